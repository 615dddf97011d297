//! Bug pack: kubernetes/cloud-provider-openstack#2066 — the provider took the load balancer's status from the
//! create's answer, `provisioning`, so every new load balancer needed a second sync (and a warning) before its
//! Service got an EXTERNAL-IP.
//!
//! Staged: a LoadBalancer Service on a cloud whose load balancers provision for a few seconds. Asserted: the
//! ensure that created the load balancer is the one that sets the EXTERNAL-IP — one `EnsuringLoadBalancer`, one
//! `EnsuredLoadBalancer`, no `SyncLoadBalancerFailed` — with one create and the waiting done by bounded polls
//! of the load balancer (about one a second, not a hot loop). Any backend, every CCM.
//!
//! cloud-provider-aws's classic ELB is active at once, so the case asks it for an NLB, which provisions first. It
//! does not wait: the Service's ingress is the DNS name `CreateLoadBalancer` answers (`toStatus`, aws.go), known
//! while the NLB provisions. Stated against it: one create, one ensure, no failure.
#![allow(clippy::unwrap_used)]

use fakecloud_api::{AuditEntry, LoadBalancerState};
use fakecloud_e2e::{HANG, Setup, called_at, case, lb, until};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ensure_sets_the_external_ip_of_a_provisioning_load_balancer() {
    case("bug-2066", Setup::new(CCM).stated_for_aws(), async |env| {
        env.initialized_nodes("k2066", 1).await;
        let ns = env.namespace("bug-2066").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let web = lb::with_aws_nlb(lb::service("web", 80, serde_json::json!({})));
        let web = services.create(&PostParams::default(), &web).await.unwrap();
        until(HANG, "the load balancer provisioning", async || {
            let lb = env.cloud.find_load_balancer(&lb::name(&web)).await.ok()??;
            (lb.state == LoadBalancerState::Provisioning).then_some(())
        })
        .await;
        if env.ccm_is_aws() {
            lb::wait_for_ingress(&services, "web", HANG).await;
            let creates = env.ccm_calls(&["CreateLoadBalancer"]).await;
            assert_eq!(creates.len(), 1, "one create: {creates:#?}");
        } else {
            lb::wait_for_ip(&services, "web", HANG).await;
            let ip_at = Timestamp::now();
            let calls = env.ccm_calls(&["CreateLoadBalancer", "GetLoadBalancer"]).await;
            let creates: Vec<&AuditEntry> = calls.iter().filter(|c| c.operation == "CreateLoadBalancer").collect();
            assert_eq!(creates.len(), 1, "one create: {creates:#?}");
            let polls = calls.iter().filter(|c| c.operation == "GetLoadBalancer").count();
            // It was provisioning when the create answered: the ensure looked again, about once a second until the
            // IP (a second more for the last look, as the wait ends on a poll).
            let waited = ip_at.duration_since(called_at(creates[0])).as_secs_f64();
            assert!(polls >= 1, "the ensure waited for the load balancer: {calls:#?}");
            assert!(polls as f64 <= waited + 2.0, "{polls} looks in {waited:.1} s: a hot loop");
        }
        let events = env.events_in(&ns, "web").await;
        let count = |reason: &str| {
            events.iter().filter(|e| e.reason.as_deref() == Some(reason)).map(|e| e.count.unwrap_or(1)).sum::<i32>()
        };
        assert_eq!(count("SyncLoadBalancerFailed"), 0, "provisioning is no failure: {events:#?}");
        assert_eq!((count("EnsuringLoadBalancer"), count("EnsuredLoadBalancer")), (1, 1), "one ensure: {events:#?}");
    })
    .await;
}

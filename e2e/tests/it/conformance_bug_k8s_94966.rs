//! kubernetes/kubernetes#94966, "Service LoadBalancer never gets its address when a node's instance is
//! stopped": the CCM registered every node's instance as a backend, the cloud (ELB: "The following targets are
//! not in a running state and cannot be registered", `InvalidTarget`) refused the whole call, and the Service
//! stayed `<pending>`. The fix sends only running instances.
//!
//! Staged: two running nodes and a third whose instance is stopped (its Node stays, NotReady and tainted
//! shutdown); a Service is created; then another node joins, so the CCM updates the backends.
//! Asserted: the Service gets its EXTERNAL-IP; the load balancer's backends are the running nodes' instances
//! and never the stopped one, at create and after the update; the cloud refused none of the CCM's calls with
//! `InvalidTarget`. Any backend, fakecloud's CCMs.
//!
//! cloud-provider-aws (v1.37.1) still has the bug for its default, a classic ELB: `findInstancesForELB`
//! (aws_loadbalancer.go L1805) takes every Node's instance from its instance cache, which lists instances in every
//! state (`describeAllInstancesUncached`, instances.go L159: no filter), and the service controller keeps the
//! stopped Node (NotReady and tainted shutdown are no reason to drop a Node from load balancers since
//! StableLoadBalancerNodeSet). The face refuses an instance that is not running (`InvalidInstance`), the whole
//! registration with it, as AWS documents for ELBv2's targets ("must be in the running state when you register
//! it") and answers classic ELB for a terminated instance. Stated against it: the Service stays `<pending>`, its
//! Warning naming `InvalidInstance`, until the instance runs again; then it gets its ingress, with every Node's
//! instance behind it.
#![allow(clippy::unwrap_used)]

use fakecloud_api::{InstanceState, codes};
use fakecloud_e2e::{HANG, Setup, case, lb, until};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
/// Classic ELB's code for an instance it cannot take (the face's, emulator/src/aws/error.rs).
const AWS_REFUSAL: &str = "InvalidInstance";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_instance_never_becomes_a_backend() {
    case("bug-k8s-94966", Setup::new(CCM).stated_for_aws(), async |env| {
        let running = env.initialized_nodes("run", 2).await;
        let stopped = env.initialized_nodes("stop", 1).await.remove(0);
        env.cloud.stop_instance(&stopped.id).await.unwrap();
        until(HANG, "the instance stopped", async || {
            (env.cloud.get_instance(&stopped.id).await.ok()?.state == InstanceState::Stopped).then_some(())
        })
        .await;
        assert!(env.node(&env.node_name(&stopped)).await.is_some(), "a stopped instance's Node stays");

        let ns = env.namespace("bug94966").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let web =
            services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
        if env.ccm_is_aws() {
            until(HANG, "web's SyncLoadBalancerFailed naming InvalidInstance", async || {
                env.events_in(&ns, "web").await.into_iter().find(|e| {
                    e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                        && e.message.as_deref().is_some_and(|m| m.contains(AWS_REFUSAL))
                })
            })
            .await;
            assert!(lb::ingress(&services.get("web").await.unwrap()).is_none(), "web stays <pending>");
            env.cloud.start_instance(&stopped.id).await.unwrap();
            lb::wait_for_ingress(&services, "web", HANG).await;
            let backends = lb::backends(&env.cloud, &web).await.unwrap();
            let all = running.iter().chain([&stopped]).all(|n| backends.contains(&n.id));
            assert!(all, "every Node's instance, the restarted one too: {backends:?}");
            return;
        }
        lb::wait_for_ip(&services, "web", HANG).await;
        let created = lb::backends(&env.cloud, &web).await.unwrap();
        assert!(running.iter().all(|n| created.contains(&n.id)), "the running nodes: {created:?}");
        assert!(!created.contains(&stopped.id), "not the stopped instance {}: {created:?}", stopped.id);

        // The nodes change: the update carries the new one, and still not the stopped one.
        let joined = env.initialized_nodes("late", 1).await.remove(0);
        let updated = until(HANG, "the new node a backend", async || {
            let b = lb::backends(&env.cloud, &web).await?;
            b.contains(&joined.id).then_some(b)
        })
        .await;
        assert!(!updated.contains(&stopped.id), "not the stopped instance {}: {updated:?}", stopped.id);

        let refused: Vec<_> = env
            .ccm_calls(env.lb_writes())
            .await
            .into_iter()
            .filter(|c| c.error_code.as_deref() == Some(codes::INVALID_TARGET))
            .collect();
        assert!(refused.is_empty(), "the CCM asked to register a non-running instance: {refused:#?}");
    })
    .await;
}

//! kubernetes/cloud-provider-aws#1328, "node replacement deadlocks at the targets-per-load-balancer quota": a
//! new node joined while the old one was still registered, the CCM asked for both, the cloud refused
//! (`TooManyTargets`) and the CCM made no change at all — the old target was never removed, so the set was
//! stuck. The fix applies the removals (current ∩ wanted) before reporting the refusal; the service controller
//! retries with its backoff and the set converges at the quota.
//!
//! Staged: two nodes behind a Service's load balancer, the backends quota set to exactly the backends it has;
//! a new node joins (the CCM's update is refused with `TooManyTargets`); then the old node's instance is
//! terminated and its Node removed by the CCM.
//! Asserted: the refusal was seen; the backend set converges to the current nodes — the new one in, the old one
//! removed — at the quota. (This cloud takes a backend set in one update, so the final set fits in one call;
//! the removals-first order itself is covered by both CCMs' unit tests.) Any backend, every CCM.
//!
//! cloud-provider-aws has the fix (v1.37.1, `ensureTargetGroupTargets`, aws_loadbalancer.go L879: deregister
//! first). The bug is its NLBs', so the case asks it for one: the refusal is ELBv2's `RegisterTargets` answered
//! `TooManyTargets`.
#![allow(clippy::unwrap_used)]

use fakecloud_api::{QuotaName, codes};
use fakecloud_e2e::{HANG, Setup, case, lb, until};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_node_at_the_backends_quota_converges() {
    case("bug-aws-1328", Setup::new(CCM).stated_for_aws(), async |env| {
        let old = env.initialized_nodes("old", 1).await.remove(0);
        let kept = env.initialized_nodes("kept", 1).await.remove(0);
        let ns = env.namespace("bug1328").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let web = lb::with_aws_nlb(lb::service("web", 80, serde_json::json!({})));
        let web = services.create(&PostParams::default(), &web).await.unwrap();
        lb::wait_for_ingress(&services, "web", HANG).await;
        let before = until(HANG, "both nodes backends", async || {
            let b = lb::backends(&env.cloud, &web).await?;
            (b.contains(&old.id) && b.contains(&kept.id)).then_some(b)
        })
        .await;
        // The quota at the node count (a shared cluster's other nodes are backends too).
        let quota = u32::try_from(before.len()).unwrap();
        env.cloud.set_quota(QuotaName::BackendsPerLoadBalancer, quota).await.unwrap();

        // The replacement joins first: one more backend than the quota allows.
        let new = env.initialized_nodes("new", 1).await.remove(0);
        until(HANG, "the CCM's update refused with TooManyTargets", async || {
            let calls = env.ccm_calls(&["UpdateLoadBalancer", "RegisterTargets"]).await;
            calls.iter().any(|c| c.error_code.as_deref() == Some(codes::TOO_MANY_TARGETS)).then_some(())
        })
        .await;

        // Then the old machine goes, and its Node with it.
        env.cloud.terminate_instance(&old.id).await.unwrap();
        until(env.timing.node_loss(), "the old Node deleted", async || env.node_gone(&old.name).await.then_some(()))
            .await;
        let after = until(HANG, "the new node in and the old one out", async || {
            let b = lb::backends(&env.cloud, &web).await?;
            (b.contains(&new.id) && !b.contains(&old.id)).then_some(b)
        })
        .await;
        assert!(after.contains(&kept.id), "the kept node stays: {after:?}");
        assert_eq!(after.len(), before.len(), "at the quota ({quota}): {after:?}");
    })
    .await;
}

//! Bug pack: kubernetes/kubernetes#109180 — a VM deleted before its Node: the AWS provider could not find the
//! Node's instance, so every load-balancer update failed, for every Service, until the Node went.
//!
//! Staged: a LoadBalancer Service on three nodes; one machine terminated while its Node stays Ready (its kubelet
//! — the case — keeps beating, so the lifecycle controller, which never checks Ready nodes, leaves it); then a
//! node joins, which makes the CCM update the backends. Asserted: the update succeeds — the new machine in, the
//! terminated one out — with every load-balancer write answered 2xx and no `SyncLoadBalancerFailed` or
//! `UpdateLoadBalancerFailed` event. Any backend, every CCM (cloud-provider-aws's writes are its classic ELB's and
//! security groups', [`fakecloud_e2e::Env::lb_writes`]).
//!
//! cloud-provider-aws (v1.37.1) is not blocked either, but keeps the terminated machine registered while its Node
//! is there: `findInstancesForELB` (aws_loadbalancer.go L1805) maps every Node to its instance through a cache of
//! instances in every state (instances.go L159), so the deleted VM is still wanted. Stated against it: the update
//! succeeds with the VM still a backend, and the VM leaves once its Node is gone.
#![allow(clippy::unwrap_used)]

use fakecloud_e2e::own_node::{OwnNode, Registration};
use fakecloud_e2e::{HANG, Setup, case, initialized, lb, until};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_deleted_before_its_node_does_not_block_load_balancer_updates() {
    case("bug-109180", Setup::new(CCM).stated_for_aws(), async |env| {
        let kept = env.initialized_nodes("k109180", 2).await;
        let doomed = env.machine_without_kubelet("k109180-doomed").await;
        let registration = Registration::WithProviderId(env.provider_id(&doomed));
        let node = OwnNode::register(env.nodes(), &doomed, &doomed.name, registration, &[], true).await;
        until(HANG, "the doomed machine's Node initialized", async || env.node(&node.name).await.filter(initialized))
            .await;
        let ns = env.namespace("bug-109180").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let web =
            services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
        lb::wait_for_ingress(&services, "web", HANG).await;
        let backends = async || lb::backends(&env.cloud, &web).await;
        assert!(backends().await.unwrap().contains(&doomed.id), "the doomed machine starts as a backend");

        let writes = env.ccm_calls(env.lb_writes()).await.len();
        env.cloud.terminate_instance(&doomed.id).await.unwrap();
        let late = env.initialized_nodes("k109180-late", 1).await.remove(0);
        let got =
            until(HANG, "the new machine a backend", async || backends().await.filter(|b| b.contains(&late.id))).await;
        assert!(env.node(&node.name).await.is_some(), "the deleted VM's Node was still there during the update");
        assert_eq!(
            got.contains(&doomed.id),
            env.ccm_is_aws(),
            "the deleted VM a backend only for the AWS CCM: {got:?}"
        );
        assert!(kept.iter().all(|k| got.contains(&k.id)), "the healthy machines stay: {got:?}");
        let updates = env.ccm_calls(env.lb_writes()).await;
        let failed: Vec<_> = updates[writes..].iter().filter(|c| !(200..300).contains(&c.status)).collect();
        assert!(failed.is_empty(), "every backend update succeeded: {failed:#?}");
        let events = env.events_in(&ns, "web").await;
        let warnings: Vec<_> = events
            .iter()
            .filter(|e| matches!(e.reason.as_deref(), Some("SyncLoadBalancerFailed" | "UpdateLoadBalancerFailed")))
            .collect();
        assert!(warnings.is_empty(), "no failed load-balancer sync: {warnings:#?}");
        node.delete().await;
        until(HANG, "the deleted VM no backend once its Node is gone", async || {
            backends().await.filter(|b| !b.contains(&doomed.id))
        })
        .await;
    })
    .await;
}

//! Bug pack: kubernetes/kubernetes#69362 — the AWS provider rewrote a load balancer's membership on every sync
//! when Node names differed from instance names (it compared the two), so an unchanged cluster cost a write per
//! Service per sync.
//!
//! Staged: two machines whose Nodes are named as AWS names them (`ip-10-…`, never the machine's name) and
//! registered with their providerID, a LoadBalancer Service on them; then three Service syncs (an annotation
//! change each: every one re-ensures) and a node sync that changes nothing (a third Node, excluded from load
//! balancers). Asserted: the backends are the two machines, and not one load-balancer write after the first
//! ensure. Any backend, every CCM.
//!
//! cloud-provider-aws (v1.37.1) compares instance IDs now (`ensureLoadBalancerInstances`, aws_loadbalancer.go), so
//! a sync writes no membership; but each re-ensure writes the ELB's attributes once, as its `reflect.DeepEqual`
//! of what it wants and what `DescribeLoadBalancerAttributes` answers never holds (kops#15990; the services case
//! states it too). Stated against it: no write but `ModifyLoadBalancerAttributes`, and that one at most once a
//! sync.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fakecloud_e2e::own_node::{self, OwnNode, Registration};
use fakecloud_e2e::{Env, HANG, Setup, case, initialized, lb, until};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

/// A machine and its Node, named as AWS names nodes, registered with its providerID, initialized by the CCM.
async fn aws_named(env: &Env, machine: &str, excluded: bool) -> (fakecloud_api::Instance, OwnNode) {
    let m = env.machine_without_kubelet(machine).await;
    let name = own_node::dns_name(&m, &env.name("internal"));
    assert_ne!(name, m.name);
    // Excluded from registration on (`--node-labels`): a label added later would be a membership change.
    let labels: &[(&str, &str)] =
        if excluded { &[("node.kubernetes.io/exclude-from-external-load-balancers", "true")] } else { &[] };
    let node =
        OwnNode::register(env.nodes(), &m, &name, Registration::WithProviderId(env.provider_id(&m)), labels, true)
            .await;
    until(HANG, &format!("{name} initialized"), async || env.node(&name).await.filter(initialized)).await;
    (m, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_names_unlike_instance_names_cost_no_load_balancer_write_per_sync() {
    case("bug-69362", Setup::new(CCM).stated_for_aws(), async |env| {
        let a = aws_named(env, "k69362-a", false).await;
        let b = aws_named(env, "k69362-b", false).await;
        let ns = env.namespace("bug-69362").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let web =
            services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
        lb::wait_for_ingress(&services, "web", HANG).await;
        let got: BTreeSet<String> = lb::backends(&env.cloud, &web).await.unwrap().into_iter().collect();
        assert!(got.contains(&a.0.id) && got.contains(&b.0.id), "both machines are backends, by ID: {got:?}");

        let writes = env.ccm_calls(env.lb_writes()).await.len();
        // Three Service syncs: any annotation change makes the service controller re-ensure (needsUpdate).
        for poke in 0..3 {
            let reads = env.ccm_calls(env.lb_reads()).await.len();
            let note = serde_json::json!({"metadata": {"annotations": {"fakecloud.test/poke": poke.to_string()}}});
            services.patch("web", &PatchParams::default(), &Patch::Merge(note)).await.unwrap();
            until(HANG, &format!("sync {poke} of web"), async || {
                (env.ccm_calls(env.lb_reads()).await.len() > reads).then_some(())
            })
            .await;
        }
        // A node sync that changes no membership: a Node joins, excluded. It costs nothing observable, so the
        // window to see a write is a fixed one.
        let c = aws_named(env, "k69362-c", true).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = env.ccm_calls(env.lb_writes()).await;
        let (attributes, others): (Vec<_>, Vec<_>) =
            after[writes..].iter().partition(|c| env.ccm_is_aws() && c.operation == "ModifyLoadBalancerAttributes");
        assert!(others.is_empty(), "no load-balancer write when nothing changed: {others:#?}");
        assert!(attributes.len() <= 3, "cloud-provider-aws's attributes, once a sync at most: {attributes:#?}");

        for (_, node) in [a, b, c] {
            node.delete().await;
        }
    })
    .await;
}

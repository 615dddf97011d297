//! The `fakecloud-ccm` binary and its manifests on the local cluster (not conformance: these are this CCM's own
//! interfaces): the deploy manifests pass a server-side dry run; the ServiceAccount has what the controllers
//! need and not more; `/healthz` has upstream's checks and `/metrics` upstream's series, with the counts of two
//! node initializations.
#![allow(clippy::unwrap_used)]

use fakecloud_e2e::{Cluster, HANG, repo};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_rbac_health_and_metrics() {
    let Some(cluster) = Cluster::start("CCM serving e2e test").await else {
        return;
    };
    // The shipped manifests pass the apiserver's validation and admission.
    let deploy = repo().join("ccm/deploy");
    cluster.kubectl_ok(&["apply", "--dry-run=server", "-f", &deploy.to_string_lossy()]);
    // Least privilege: what the controllers do, and nothing else.
    let sa = "--as=system:serviceaccount:kube-system:cloud-controller-manager";
    for (verb, resource, subresource, allowed) in [
        ("update", "nodes", "", true),
        ("patch", "nodes", "", true),
        ("delete", "nodes", "", true),
        ("watch", "nodes", "", true),
        ("patch", "nodes", "status", true),
        ("patch", "services", "status", true),
        ("create", "events", "", true),
        ("create", "nodes", "", false),
        ("update", "nodes", "status", false),
        ("delete", "services", "", false),
        ("get", "secrets", "", false),
        ("list", "pods", "", false),
    ] {
        let (ok, out) =
            cluster.kubectl(&["auth", "can-i", verb, resource, &format!("--subresource={subresource}"), sa]);
        assert_eq!(ok, allowed, "can-i {verb} {resource}/{subresource}: {out}");
    }
    for (verb, lease, allowed) in [
        ("update", "leases/cloud-controller-manager", true),
        ("update", "leases/kube-controller-manager", false),
        ("create", "leases", true),
    ] {
        let (ok, out) = cluster.kubectl(&["auth", "can-i", verb, lease, "-n", "kube-system", sa]);
        assert_eq!(ok, allowed, "can-i {verb} {lease} in kube-system: {out}");
    }

    let ccm = cluster.ccm(CCM, &[]);
    ccm.wait_log("starting controllers", HANG).await;
    cluster.initialized_nodes("served", 2, HANG).await;

    // Served: the health checks upstream has, and the metrics.
    let (status, body) = ccm.get("/healthz?verbose").unwrap();
    assert_eq!(status, 200, "{body}");
    for check in [
        "leaderElection",
        "cloud-node-controller",
        "cloud-node-lifecycle-controller",
        "service-lb-controller",
        "node-route-controller",
    ] {
        assert!(body.contains(&format!("[+]{check} ok\n")), "{check} in {body}");
    }
    assert_eq!(ccm.get("/healthz"), Some((200, "ok".into())));
    assert_eq!(ccm.get("/healthz/leaderElection").map(|r| r.0), Some(404));
    for (series, at_least) in [
        ("workqueue_adds_total{name=\"Nodes\"}", 2.0),
        ("workqueue_work_duration_seconds_count{name=\"Nodes\"}", 2.0),
        ("node_controller_initial_node_sync_delay_seconds_count", 2.0),
        ("node_controller_cloud_provider_taint_removal_delay_seconds_count", 2.0),
        ("cloudprovider_fakecloud_api_request_duration_seconds_count{request=\"ListInstances\"}", 2.0),
        ("running_managed_controllers{manager=\"cloud-controller-manager\",name=\"cloud-node\"}", 1.0),
        ("running_managed_controllers{manager=\"cloud-controller-manager\",name=\"cloud-node-lifecycle\"}", 1.0),
        ("running_managed_controllers{manager=\"cloud-controller-manager\",name=\"service\"}", 1.0),
        ("running_managed_controllers{manager=\"cloud-controller-manager\",name=\"route\"}", 1.0),
        ("leader_election_master_status{name=\"cloud-controller-manager\"}", 1.0),
    ] {
        let v = ccm.metric(series).unwrap_or_else(|| panic!("{series} not served"));
        assert!(v >= at_least, "{series} = {v}, expected at least {at_least}");
    }
}

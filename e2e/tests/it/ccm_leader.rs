//! The `fakecloud-ccm` binary's leader election with the shipped timings (15 s lease, 10 s renew deadline, 2 s
//! retry), on the local cluster: two replicas, exactly one leads (its metric, its Lease); the leader killed, the
//! other takes over and initializes nodes within 20 s; a leader that loses its Lease exits 1.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use fakecloud_api::CreateInstanceRequest;
use fakecloud_e2e::{Cluster, HANG, UNINITIALIZED_TAINT, taint_keys, until};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

async fn initialized(cluster: &Cluster, name: &str, timeout: Duration) {
    until(timeout, &format!("{name} initialized"), async || {
        let n = cluster.node(name).await?;
        (!taint_keys(&n).iter().any(|k| k == UNINITIALIZED_TAINT)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_and_the_other_takes_over() {
    let Some(cluster) = Cluster::start("CCM leader election e2e test").await else {
        return;
    };
    let leases = Api::<Lease>::namespaced(cluster.client(), "kube-system");
    let mut replicas = [cluster.ccm(CCM, &[]), cluster.ccm(CCM, &[])];
    let leader = until(HANG, "exactly one leader", async || match (replicas[0].leads()?, replicas[1].leads()?) {
        (true, false) => Some(0),
        (false, true) => Some(1),
        _ => None,
    })
    .await;
    let follower = 1 - leader;
    let lease = leases.get("cloud-controller-manager").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity, replicas[leader].identity(), "the Lease names the replica that says it leads");
    assert_eq!(lease.lease_duration_seconds, Some(15));
    assert!(!replicas[follower].log().contains("starting controllers"), "the follower runs no controller");
    // Both are healthy: following is not a failure.
    for r in &replicas {
        assert_eq!(r.get("/healthz").map(|x| x.0), Some(200));
    }
    let create = |name: &str| {
        let req = CreateInstanceRequest { name: name.into(), ..Default::default() };
        let cloud = cluster.cloud.clone();
        async move { cloud.create_instance(&req, None).await.unwrap() }
    };
    create("before-failover").await;
    initialized(&cluster, "before-failover", HANG).await;

    // The leader dies without a word; a node joins. The follower takes over and initializes it.
    replicas[leader].kill().await;
    let killed = Instant::now();
    create("after-failover").await;
    initialized(&cluster, "after-failover", HANG).await;
    let took = killed.elapsed();
    eprintln!("failover: the new leader initialized a node {took:.1?} after the old one was killed");
    // The point of the test, not a hang detector: the shipped 15 s lease and 2 s retry promise this.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(replicas[follower].leads(), Some(true));
    let lease = leases.get("cloud-controller-manager").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity, replicas[follower].identity());
    assert_eq!(lease.lease_transitions, Some(1));

    // Somebody else takes the Lease and keeps it: the leader cannot renew, gives up after the renew deadline
    // (10 s) and exits 1, as upstream's "leaderelection lost".
    let thief = tokio::spawn(async move {
        loop {
            if let Ok(mut l) = leases.get("cloud-controller-manager").await {
                let spec = l.spec.get_or_insert_with(Default::default);
                spec.holder_identity = Some("intruder".into());
                spec.renew_time = Some(MicroTime(Timestamp::now()));
                let _ = leases.replace("cloud-controller-manager", &PostParams::default(), &l).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let stolen = Instant::now();
    // It would lead on for good if it did not give up: only a hang reaches the bound.
    let code = replicas[follower].exit_code(HANG).await;
    thief.abort();
    eprintln!("the leader exited {:.1?} after its Lease was taken", stolen.elapsed());
    assert_eq!(code, Some(1), "{}", replicas[follower].log());
    assert!(replicas[follower].log().contains("leaderelection lost"));
}

//! The CCM dying mid-work must leave nothing behind: killed (SIGKILL) at seeded random moments while it creates
//! and while it deletes load balancers, and its leader killed while Services are being created, every Service
//! still converges, and the cloud ends with exactly one load balancer per LoadBalancer Service — none leaked,
//! none created twice (the audit log counts the successful creates).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fakecloud_e2e::{Ccm, Cluster, ClusterOptions, Emulator, lb, until};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
/// Faster leader election than the shipped 15 s, so a failover fits a test.
const FAST_LEASE: [&str; 3] =
    ["--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"];

/// A kill moment from a seed, 0–2.5 s: the same seed kills at the same point of the work.
fn moment(seed: u64, step: u64) -> Duration {
    let x =
        (seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(step.wrapping_mul(1_442_695_040_888_963_407))) >> 33;
    Duration::from_millis(x % 2_500)
}

/// The cloud holds exactly one load balancer per LoadBalancer Service in `ns`, and no other of theirs.
async fn exactly_one_lb_each(cluster: &Cluster, services: &Api<Service>, expected: usize) {
    let svcs = services.list(&Default::default()).await.unwrap().items;
    assert_eq!(svcs.len(), expected);
    let want: BTreeSet<String> = svcs.iter().map(lb::name).collect();
    let lbs = cluster.cloud.list_all_load_balancers().await.unwrap();
    let have: Vec<String> = lbs.iter().map(|l| l.name.clone()).filter(|n| want.contains(n)).collect();
    assert_eq!(have.len(), want.len(), "one load balancer per Service, none twice: {lbs:#?}");
}

async fn all_have_ips(services: &Api<Service>, names: &[String]) {
    for name in names {
        until(Duration::from_secs(90), &format!("{name}'s EXTERNAL-IP"), async || {
            lb::ingress_ip(&services.get_opt(name).await.ok()??)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ccm_killed_at_random_points_leaks_nothing_and_creates_nothing_twice() {
    let Some(cluster) = Cluster::start("CCM crash e2e test").await else {
        return;
    };
    let mut ccm: Ccm = cluster.ccm(CCM, &["--leader-elect=false"]);
    ccm.wait_log("starting controllers", Duration::from_secs(30)).await;
    cluster.initialized_nodes("crash-node", 2, Duration::from_secs(60)).await;
    let mut created_total = 0;
    for seed in [1u64, 2, 3] {
        let ns = format!("crash-{seed}");
        cluster.namespace(&ns).await;
        let services = Api::<Service>::namespaced(cluster.client(), &ns);
        let names: Vec<String> = (0..4).map(|i| format!("svc-{i}")).collect();
        // Creates in flight, then SIGKILL; a new CCM picks up where it died.
        for n in &names {
            services.create(&PostParams::default(), &lb::service(n, 80, serde_json::json!({}))).await.unwrap();
        }
        tokio::time::sleep(moment(seed, 1)).await;
        ccm.kill().await;
        ccm = cluster.ccm(CCM, &["--leader-elect=false"]);
        all_have_ips(&services, &names).await;
        exactly_one_lb_each(&cluster, &services, names.len()).await;
        created_total += names.len();

        // Deletes in flight, then SIGKILL again.
        for n in &names[..2] {
            services.delete(n, &DeleteParams::default()).await.unwrap();
        }
        tokio::time::sleep(moment(seed, 2)).await;
        ccm.kill().await;
        ccm = cluster.ccm(CCM, &["--leader-elect=false"]);
        for n in &names[..2] {
            until(Duration::from_secs(60), &format!("{ns}/{n} gone"), async || {
                matches!(services.get_opt(n).await, Ok(None)).then_some(())
            })
            .await;
        }
        until(Duration::from_secs(30), "the deleted Services' load balancers gone", async || {
            let svcs = services.list(&Default::default()).await.ok()?.items;
            let lbs = cluster.cloud.list_all_load_balancers().await.ok()?;
            let live = lbs.iter().filter(|l| l.state != fakecloud_api::LoadBalancerState::Deleting).count();
            // This namespace's two Services plus those kept from earlier seeds.
            (svcs.len() == 2 && live == created_total - 2 * seed as usize).then_some(())
        })
        .await;
        exactly_one_lb_each(&cluster, &services, 2).await;
    }
    let creates = cluster.ccm_calls(&["CreateLoadBalancer"]).await;
    let ok = creates.iter().filter(|e| e.status == 201).count();
    assert_eq!(ok, created_total, "each load balancer created once: {creates:#?}");
    drop(ccm);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_failover_during_creates_creates_nothing_twice() {
    let Some(cluster) = Cluster::start("CCM failover e2e test").await else {
        return;
    };
    let mut replicas = [cluster.ccm(CCM, &FAST_LEASE), cluster.ccm(CCM, &FAST_LEASE)];
    let leader =
        until(Duration::from_secs(30), "a leader", async || replicas.iter().position(|r| r.leads() == Some(true)))
            .await;
    cluster.initialized_nodes("failover-node", 2, Duration::from_secs(60)).await;
    cluster.namespace("failover").await;
    let services = Api::<Service>::namespaced(cluster.client(), "failover");
    let names: Vec<String> = (0..6).map(|i| format!("svc-{i}")).collect();
    for n in &names {
        services.create(&PostParams::default(), &lb::service(n, 80, serde_json::json!({}))).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    replicas[leader].kill().await;
    let follower = 1 - leader;
    all_have_ips(&services, &names).await;
    assert_eq!(replicas[follower].leads(), Some(true), "{}", replicas[follower].log());
    exactly_one_lb_each(&cluster, &services, names.len()).await;
    let ok = cluster.ccm_calls(&["CreateLoadBalancer"]).await.iter().filter(|e| e.status == 201).count();
    assert_eq!(ok, names.len(), "no double creates across the failover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emulator_killed_while_provisioning_leaves_no_duplicate_and_all_converge() {
    let options =
        ClusterOptions { emulator_binary: Some(env!("CARGO_BIN_EXE_e2e-fakecloud").into()), ..Default::default() };
    let Some(mut cluster) = Cluster::start_with_options("emulator restart e2e test", options).await else {
        return;
    };
    let ccm = cluster.ccm(CCM, &[]);
    ccm.wait_log("starting controllers", Duration::from_secs(30)).await;
    cluster.initialized_nodes("restart-node", 2, Duration::from_secs(60)).await;
    cluster.namespace("restart").await;
    let services = Api::<Service>::namespaced(cluster.client(), "restart");
    let names: Vec<String> = (0..4).map(|i| format!("svc-{i}")).collect();
    for n in &names {
        services.create(&PostParams::default(), &lb::service(n, 80, serde_json::json!({}))).await.unwrap();
    }
    // Some load balancers exist and are still provisioning (2 s) when the cloud dies.
    until(Duration::from_secs(30), "a load balancer provisioning", async || {
        let lbs = cluster.cloud.list_all_load_balancers().await.ok()?;
        lbs.iter().any(|l| l.state == fakecloud_api::LoadBalancerState::Provisioning).then_some(())
    })
    .await;
    let Emulator::Process(emulator) = &mut cluster.server else { unreachable!("started as a process") };
    emulator.kill().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    emulator.restart().await;
    all_have_ips(&services, &names).await;
    exactly_one_lb_each(&cluster, &services, names.len()).await;
    let lbs = cluster.cloud.list_all_load_balancers().await.unwrap();
    assert_eq!(lbs.len(), names.len(), "no stray load balancer: {lbs:#?}");
    assert!(lbs.iter().all(|l| l.state == fakecloud_api::LoadBalancerState::Active));
    drop(ccm);
}

//! Conformance when things die mid-work: the CCM's leader killed (SIGKILL, or its pod force-deleted) at seeded
//! random moments while it creates and while it deletes load balancers, the leader killed while Services are
//! created with a second replica waiting, and the emulator killed while load balancers provision and started
//! again on its state: every Service still converges, and the cloud ends with exactly one load balancer per
//! LoadBalancer Service — none leaked, none created twice (the audit log counts the successful creates). Any
//! backend that can kill what the case kills (see `Setup`), any CCM: cloud-provider-aws's classic ELBs are
//! active at once, so the emulator dies while they are being created rather than while they provision.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fakecloud_api::LoadBalancerState;
use fakecloud_e2e::{Env, HANG, Setup, case, lb, until};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
const EMULATOR: &str = env!("CARGO_BIN_EXE_e2e-fakecloud");

/// A kill moment from a seed, 0–2.5 s: the same seed kills at the same point of the work.
fn moment(seed: u64, step: u64) -> Duration {
    let x =
        (seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(step.wrapping_mul(1_442_695_040_888_963_407))) >> 33;
    Duration::from_millis(x % 2_500)
}

/// Create LoadBalancer Services `names` in the namespace behind `services`; their load balancers' names.
async fn create(services: &Api<Service>, names: &[String]) -> Vec<String> {
    let mut lbs = Vec::new();
    for n in names {
        let svc = services.create(&PostParams::default(), &lb::service(n, 80, serde_json::json!({}))).await.unwrap();
        lbs.push(lb::name(&svc));
    }
    lbs
}

/// The cloud holds exactly one load balancer per LoadBalancer Service in the namespace, and no other of theirs.
async fn exactly_one_lb_each(env: &Env, services: &Api<Service>, expected: usize) {
    let svcs = services.list(&Default::default()).await.unwrap().items;
    assert_eq!(svcs.len(), expected);
    let want: BTreeSet<String> = svcs.iter().map(lb::name).collect();
    let lbs = env.cloud.list_all_load_balancers().await.unwrap();
    let have: Vec<String> = lbs.iter().map(|l| l.name.clone()).filter(|n| want.contains(n)).collect();
    assert_eq!(have.len(), want.len(), "one load balancer per Service, none twice: {lbs:#?}");
}

async fn all_have_addresses(services: &Api<Service>, names: &[String]) {
    for name in names {
        lb::wait_for_ingress(services, name, HANG).await;
    }
}

/// Load balancers that were created successfully since the case began (each at most once, with an
/// idempotency key: a replayed create answers 200, not 201). AWS's APIs answer every success 200 and take no
/// such key; cloud-provider-aws looks an ELB up by name before it creates one (`ensureLoadBalancer`,
/// aws_loadbalancer.go L1170), so each of its successful creates is a new ELB.
async fn created(env: &Env) -> usize {
    let made = if env.ccm_is_aws() { 200 } else { 201 };
    env.ccm_calls(&["CreateLoadBalancer"]).await.iter().filter(|e| e.status == made).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ccm_killed_at_random_points_leaks_nothing_and_creates_nothing_twice() {
    case("ccm-crash", Setup::new(CCM).kills_ccm().stated_for_aws(), async |env| {
        env.initialized_nodes("crash-node", 2).await;
        let names: Vec<String> = (0..4).map(|i| format!("svc-{i}")).collect();
        let (mut made, mut live) = (BTreeSet::new(), 0);
        for seed in [1u64, 2, 3] {
            let ns = env.namespace(&format!("crash-{seed}")).await;
            let services = Api::<Service>::namespaced(env.client(), &ns);
            // Creates in flight, then the leader dies; the next one picks up where it died.
            made.extend(create(&services, &names).await);
            live += names.len();
            tokio::time::sleep(moment(seed, 1)).await;
            env.kill_ccm_leader().await;
            all_have_addresses(&services, &names).await;
            exactly_one_lb_each(env, &services, names.len()).await;

            // Deletes in flight, then the leader dies again.
            for n in &names[..2] {
                services.delete(n, &DeleteParams::default()).await.unwrap();
            }
            live -= 2;
            tokio::time::sleep(moment(seed, 2)).await;
            env.kill_ccm_leader().await;
            for n in &names[..2] {
                until(HANG, &format!("{ns}/{n} gone"), async || {
                    matches!(services.get_opt(n).await, Ok(None)).then_some(())
                })
                .await;
            }
            until(HANG, "the deleted Services' load balancers gone", async || {
                let lbs = env.cloud.list_all_load_balancers().await.ok()?;
                let mine = lbs.iter().filter(|l| made.contains(&l.name) && l.state != LoadBalancerState::Deleting);
                (mine.count() == live).then_some(())
            })
            .await;
            exactly_one_lb_each(env, &services, 2).await;
        }
        assert_eq!(created(env).await, made.len(), "each load balancer created once");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_failover_during_creates_creates_nothing_twice() {
    case("failover", Setup::new(CCM).replicas(2).kills_ccm().stated_for_aws(), async |env| {
        env.initialized_nodes("failover-node", 2).await;
        let ns = env.namespace("failover").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let names: Vec<String> = (0..6).map(|i| format!("svc-{i}")).collect();
        create(&services, &names).await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        env.kill_ccm_leader().await;
        all_have_addresses(&services, &names).await;
        exactly_one_lb_each(env, &services, names.len()).await;
        assert_eq!(created(env).await, names.len(), "no double creates across the failover");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emulator_killed_while_provisioning_leaves_no_duplicate_and_all_converge() {
    case("emulator-restart", Setup::new(CCM).restarts_emulator(EMULATOR).stated_for_aws(), async |env| {
        env.initialized_nodes("restart-node", 2).await;
        let before: BTreeSet<String> =
            env.cloud.list_all_load_balancers().await.unwrap().into_iter().map(|l| l.id).collect();
        let ns = env.namespace("restart").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let names: Vec<String> = (0..4).map(|i| format!("svc-{i}")).collect();
        let made: BTreeSet<String> = create(&services, &names).await.into_iter().collect();
        // Some load balancers exist and are still provisioning when the cloud dies (classic ELBs: some exist).
        let first = env.first_lb_state();
        until(HANG, "a load balancer provisioning", async || {
            let lbs = env.cloud.list_all_load_balancers().await.ok()?;
            lbs.iter().any(|l| made.contains(&l.name) && l.state == first).then_some(())
        })
        .await;
        env.kill_emulator().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        env.start_emulator().await;
        all_have_addresses(&services, &names).await;
        exactly_one_lb_each(env, &services, names.len()).await;
        let new: Vec<_> = env
            .cloud
            .list_all_load_balancers()
            .await
            .unwrap()
            .into_iter()
            .filter(|l| !before.contains(&l.id))
            .collect();
        let names_of_new: BTreeSet<String> = new.iter().map(|l| l.name.clone()).collect();
        assert_eq!((new.len(), &names_of_new), (made.len(), &made), "no stray load balancer: {new:#?}");
        assert!(new.iter().all(|l| l.state == LoadBalancerState::Active));
    })
    .await;
}

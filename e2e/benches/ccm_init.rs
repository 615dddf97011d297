//! How fast a CCM initializes nodes: N instances are created at once, the simulated kubelets register their
//! Nodes, and the CCM (as the manifests' ServiceAccount) initializes them. For fakecloud-ccm (a release build)
//! and upstream's CCM with fakecloud's Go provider, each on a cluster of its own, one after the other for each
//! N: registration→initialized latency per node (p50/p99/max, from a watch), the wall time from the first
//! instance created to the last node initialized, and what [`fakecloud_e2e::bench`] measures (cloud calls, API
//! writes, CPU, peak RSS, the steady state after); then the side-by-side table.
//!
//! `cargo bench -p fakecloud-e2e --bench ccm_init`; the environment is described in [`fakecloud_e2e::bench`]
//! (`FAKECLOUD_CCM_BENCH_NODES`, default `1,100,1000`; `FAKECLOUD_CCM_BENCH_ARGS`, e.g.
//! `--kube-api-qps=200 --kube-api-burst=400`; `FAKECLOUD_CCM_BENCH_CCMS`, default `fakecloud,upstream`).
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fakecloud_e2e::bench::{self, Contender, Measured, Outcome};
use fakecloud_e2e::{Cluster, ClusterOptions, Rates, UNINITIALIZED_TAINT, taint_keys};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

async fn run(n: usize, contender: &Contender, extra: &[String]) -> Option<Outcome> {
    // Kubelets at their default rates, as in a real cluster (the tests' 2 s Leases on 1,000 nodes would load the
    // apiserver with 500 writes a second).
    let options = contender.options(ClusterOptions { rates: Rates::real(), ..ClusterOptions::default() });
    let cluster = Cluster::start_with_options("CCM init benchmark", options).await?;
    // Without the route controller: what follows initialization is then nothing (the steady state), and the
    // routes have a bench of their own.
    let args: Vec<String> = extra.iter().cloned().chain(["--configure-cloud-routes=false".into()]).collect();
    let measured = Measured::start(&cluster, contender, &args).await;

    // Watch from before the first instance exists: when each Node appears, and when it loses the taint.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, bool, Instant)>();
    let watch = tokio::spawn(
        watcher(cluster.nodes(), watcher::Config::default()).default_backoff().applied_objects().for_each(move |n| {
            if let Ok(node) = n {
                let tainted = taint_keys(&node).iter().any(|k| k == UNINITIALIZED_TAINT);
                let _ = tx.send((node.metadata.name.clone().unwrap_or_default(), tainted, Instant::now()));
            }
            futures::future::ready(())
        }),
    );
    let start = Instant::now();
    for i in 0..n {
        cluster.cloud.create_instance(&cluster.instance_request(&format!("bench-{i:04}")), None).await.unwrap();
    }
    let created = start.elapsed();
    let (mut seen, mut done): (HashMap<String, Instant>, HashMap<String, Instant>) = Default::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while done.len() < n {
        let Ok(Some((name, tainted, at))) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            let log = measured.ccm.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "only {} of {n} nodes initialized after 600 s; the CCM's log ends:\n{}",
                done.len(),
                tail.join("\n")
            );
        };
        seen.entry(name.clone()).or_insert(at);
        if !tainted {
            done.entry(name).or_insert(at);
        }
    }
    let total = start.elapsed();
    watch.abort();
    let mut lat: Vec<Duration> = done.iter().map(|(k, t)| t.saturating_duration_since(seen[k])).collect();
    lat.sort();
    println!(
        "nodes={n} ccm={} flags={extra:?} create_instances={created:.1?} all_initialized={total:.1?} \
         latency p50={:.0?} p99={:.0?} max={:.0?}",
        contender.name,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or_default(),
    );
    Some(measured.converged("init", n, total).await)
}

#[tokio::main]
async fn main() {
    let (contenders, extra) = (bench::contenders(CCM), bench::extra_args());
    let mut outcomes = Vec::new();
    for n in bench::counts() {
        for contender in &contenders {
            outcomes.extend(run(n, contender, &extra).await);
        }
    }
    print!("{}", bench::comparison(&outcomes));
}

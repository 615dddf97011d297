//! How fast the CCM initializes nodes: N instances are created at once, the simulated kubelets register their
//! Nodes, and the CCM (a release build, as the manifests' ServiceAccount) initializes them. Reported per N:
//! registration→initialized latency per node (p50/p99/max, from a watch), the wall time from the first
//! instance created to the last node initialized, cloud calls per node (the emulator's audit log), and the
//! CCM's peak RSS.
//!
//! `cargo bench -p fakecloud-e2e --bench ccm_init` (N from `FAKECLOUD_CCM_BENCH_NODES`, default `1,100,1000`;
//! extra CCM flags from `FAKECLOUD_CCM_BENCH_ARGS`, e.g. `--kube-api-qps=200 --kube-api-burst=400`).
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fakecloud_api::CreateInstanceRequest;
use fakecloud_e2e::{Cluster, Rates, UNINITIALIZED_TAINT, taint_keys};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

async fn run(n: usize, extra: &[&str]) {
    // Kubelets at their default rates, as in a real cluster (the tests' 2 s Leases on 1,000 nodes would load the
    // apiserver with 500 writes a second).
    let Some(cluster) = Cluster::start_with("CCM init benchmark", Rates::real()).await else {
        return;
    };
    let ccm = cluster.ccm(CCM, extra);
    ccm.wait_log("starting controllers", Duration::from_secs(60)).await;

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
        let req = CreateInstanceRequest { name: format!("bench-{i:04}"), ..Default::default() };
        cluster.cloud.create_instance(&req, None).await.unwrap();
    }
    let created = start.elapsed();
    let (mut seen, mut done): (HashMap<String, Instant>, HashMap<String, Instant>) = Default::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while done.len() < n {
        let Ok(Some((name, tainted, at))) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            let log = ccm.log();
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
    let calls = cluster.ccm_calls(&["GetInstance", "ListInstances"]).await.len();
    println!(
        "nodes={n} create_instances={created:.1?} all_initialized={total:.1?} latency p50={:.0?} p99={:.0?} max={:.0?} \
         cloud_calls_per_node={:.2} ccm_peak_rss={:.1}MiB",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or_default(),
        calls as f64 / n as f64,
        ccm.peak_rss_mib(),
    );
}

#[tokio::main]
async fn main() {
    let counts = std::env::var("FAKECLOUD_CCM_BENCH_NODES").unwrap_or_else(|_| "1,100,1000".into());
    let extra = std::env::var("FAKECLOUD_CCM_BENCH_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    for n in counts.split(',').filter_map(|c| c.trim().parse().ok()) {
        run(n, &extra).await;
    }
}

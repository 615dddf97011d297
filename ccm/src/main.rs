//! `fakecloud-ccm`: check the flags and the cloud, serve /healthz and /metrics, wait for the lease, start the
//! controllers. Exits 1 with a message that says what to fix, or when leadership is lost.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;
use fakecloud_ccm::client_go::events::Recorder;
use fakecloud_ccm::client_go::informer::NodeInformer;
use fakecloud_ccm::client_go::kube_client::KubeClients;
use fakecloud_ccm::client_go::leader::{Elector, LeaderConfig};
use fakecloud_ccm::client_go::metrics::Metrics;
use fakecloud_ccm::client_go::serve::{self, Health};
use fakecloud_ccm::cloud::fakecloud::FakeCloud;
use fakecloud_ccm::config::Args;
use fakecloud_ccm::controllers::{ControllerName, node, node_lifecycle, route, service};
use tokio::signal::unix::{SignalKind, signal};

/// The `manager` label of `running_managed_controllers`.
const MANAGER: &str = "cloud-controller-manager";
/// How long the first call may be told to wait (throttled, an outage) before the CCM gives up at start.
const STARTUP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The cloud's region, the first call. A cloud that says "wait" (429, or 503 with `Retry-After`: throttled, an
/// outage) is waited out as the controllers wait out any call, for up to [`STARTUP_PATIENCE`]: a replica
/// restarted under throttling must not crash-loop. Anything else (a wrong token, nothing listening) fails at once.
async fn startup_region(client: &fakecloud_api::Client) -> Result<fakecloud_api::Region, fakecloud_api::ClientError> {
    let deadline = tokio::time::Instant::now() + STARTUP_PATIENCE;
    loop {
        match client.region().await {
            Err(e) if matches!(e.status(), Some(429 | 503)) && e.retry_after().is_some() => {
                let wait = e.retry_after().unwrap_or_default().max(std::time::Duration::from_millis(100));
                if tokio::time::Instant::now() + wait > deadline {
                    return Err(e);
                }
                tracing::warn!(error = %e, wait_s = wait.as_secs_f64(), "the cloud says wait; asking again");
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let settings = args.validate()?;
    let route_cidrs = match settings.controllers.contains(&ControllerName::Route) && args.configure_cloud_routes {
        true => Some(args.cluster_cidrs()?),
        false => None,
    };
    let cfg = &settings.cloud;
    let client = fakecloud_api::Client::new(&cfg.endpoint, cfg.token())?;
    let region = startup_region(&client).await.with_context(|| {
        format!("cannot reach the fakecloud emulator at {} (endpoint in --cloud-config): is it running, and is the token right?", cfg.endpoint)
    })?;
    if let Some(want) = &cfg.region
        && want != &region.name
    {
        bail!("--cloud-config says region {want:?}, but the emulator at {} serves {:?}", cfg.endpoint, region.name);
    }
    let clients = KubeClients::new(args.kubeconfig.as_deref(), args.kube_api_qps, args.kube_api_burst).await?;
    let metrics = Arc::new(Metrics::default());
    // Failed calls retried in place as cloud SDKs retry them (3 tries, jittered backoff, a short Retry-After
    // waited out): a sync that makes a few calls then fails only when one call fails three times, and a long
    // Retry-After still goes back to the controller's queue.
    let client = client.with_retry_policy(fakecloud_api::RetryPolicy::default());
    let cloud = Arc::new(FakeCloud::new(client).with_metrics(metrics.clone()));
    let health = Health::default();

    let elector = args.leader_elect.then(|| {
        let cfg = LeaderConfig {
            namespace: args.leader_elect_resource_namespace.clone(),
            name: args.leader_elect_resource_name.clone(),
            identity: fakecloud_ccm::client_go::leader::identity(),
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        };
        anyhow::Ok(Elector::new(
            clients.client("leader-election")?,
            cfg,
            Recorder::new(clients.client(MANAGER)?, MANAGER),
        ))
    });
    let elector = elector.transpose()?;
    if let Some(e) = &elector {
        let (status, lease) = (e.status(), args.leader_elect_lease_duration);
        health.add("leaderElection", move || status.check(lease));
    }
    if args.secure_port != 0 {
        let tls = serve::tls_config(args.cert_dir.as_deref(), args.bind_address)?;
        let listener = serve::bind(SocketAddr::new(args.bind_address, args.secure_port)).await?;
        tracing::info!(address = %listener.local_addr()?, "serving /healthz and /metrics over HTTPS");
        tokio::spawn(serve::serve(listener, tls, serve::router(health.clone(), metrics.clone())));
    }

    let mut sigterm = signal(SignalKind::terminate())?;
    let lease_name = args.leader_elect_resource_name.clone();
    let lost = match elector {
        Some(mut e) => {
            let status = e.status();
            metrics.leader_election_master_status.set(&[&lease_name], 0.0);
            tokio::select! {
                () = e.acquire() => {}
                _ = sigterm.recv() => return Ok(()),
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
            metrics.leader_election_master_status.set(&[&lease_name], 1.0);
            let m = metrics.clone();
            Some(tokio::spawn(async move {
                e.hold().await;
                m.leader_election_master_status.set(&[&lease_name], f64::from(u8::from(status.is_leader())));
            }))
        }
        None => None,
    };

    tracing::info!(region = %region.name, cluster = %args.cluster_name, controllers = ?settings.controllers.iter().map(|c| c.canonical()).collect::<Vec<_>>(), "starting controllers");
    let mut tasks = tokio::task::JoinSet::new();
    let mut started = Vec::new();
    // One watch of Nodes shared by the controllers; it starts once they have subscribed.
    let mut informer = NodeInformer::new(clients.client("shared-informers")?);
    for c in settings.controllers {
        match c {
            ControllerName::CloudNode => {
                let s = node::Settings {
                    workers: args.concurrent_node_syncs,
                    status_update_every: args.node_status_update_frequency,
                    status_update_workers: args.status_update_workers(),
                };
                let (nodes, synced, changes) = (informer.store(), informer.synced(), informer.subscribe());
                let kube = clients.client("node-controller")?;
                tasks.spawn(node::run(kube, cloud.clone(), metrics.clone(), s, nodes, synced, changes));
            }
            ControllerName::CloudNodeLifecycle => {
                let (nodes, synced) = (informer.store(), informer.synced());
                let kube = clients.client("node-controller")?;
                tasks.spawn(node_lifecycle::run(kube, cloud.clone(), args.node_monitor_period, nodes, synced));
            }
            ControllerName::Route => match &route_cidrs {
                Some(cidrs) => {
                    let s = route::Settings {
                        cluster_name: args.cluster_name.clone(),
                        cluster_cidrs: cidrs.clone(),
                        period: args.route_reconciliation_period,
                    };
                    let kube = clients.client("route-controller")?;
                    tasks.spawn(route::run(kube, cloud.clone(), s, informer.store(), informer.synced()));
                }
                None => {
                    tracing::info!("--configure-cloud-routes=false: the route controller is not started");
                    continue;
                }
            },
            ControllerName::Service => {
                let s = service::Settings {
                    cluster_name: args.cluster_name.clone(),
                    workers: args.concurrent_service_syncs,
                };
                let (nodes, synced, changes) = (informer.store(), informer.synced(), informer.subscribe_with_deletes());
                let kube = clients.client("service-controller")?;
                tasks.spawn(service::run(kube, cloud.clone(), metrics.clone(), s, nodes, synced, changes));
            }
        }
        metrics.running_managed_controllers.set(&[MANAGER, c.alias()], 1.0);
        started.push(c);
    }
    if !started.is_empty() {
        tasks.spawn(informer.run());
    }
    // As upstream, the controllers' checks join /healthz once all have started.
    for c in &started {
        health.add_ping(c.canonical());
    }

    let lost = async {
        match lost {
            Some(task) => {
                let _ = task.await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: stopping"),
        () = lost => bail!("leaderelection lost"),
        Some(_) = tasks.join_next() => bail!("a controller stopped unexpectedly"),
    }
    Ok(())
}

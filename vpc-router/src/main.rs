//! `fakecloud-vpc-router`: read the flags and the cloud config, open netlink, then run the CNI-config
//! writer and the route loop side by side until SIGTERM. The installed routes stay on exit, so a
//! restart (an upgrade, a crash) does not cut pod traffic.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use fakecloud_vpc_router::config::Args;
use fakecloud_vpc_router::netlink::Netlink;
use fakecloud_vpc_router::router::{Router, Settings};
use fakecloud_vpc_router::{cni, node};
use tokio::signal::unix::{SignalKind, signal};

/// How often the CNI config file is checked against what it should be, besides Node changes.
const CNI_RECHECK: Duration = Duration::from_secs(30);

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

async fn run(args: Args) -> Result<()> {
    let cloud_config = fakecloud_api::CloudConfig::load(&args.cloud_config).context("--cloud-config")?;
    let cloud = fakecloud_api::Client::new(&cloud_config.endpoint, cloud_config.token())
        .context("--cloud-config endpoint")?
        .with_timeout(args.api_timeout)?;
    let netlink =
        Netlink::connect().context("netlink (the router needs CAP_NET_ADMIN in the host's network namespace)")?;
    let kube = kube::Client::try_default().await.context("the Kubernetes client (in-cluster config, or KUBECONFIG)")?;
    tracing::info!(node = %args.node_name, endpoint = %cloud.endpoint(), route_table = %args.route_table,
        sync_period = ?args.sync_period, cni_config = %args.cni_config.display(), "starting");

    let (tx, rx) = tokio::sync::watch::channel(None);
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(node::watch_node(kube, args.node_name.clone(), tx));
    tasks.spawn(cni::keep_written(args.cni_config.clone(), rx.clone(), CNI_RECHECK));
    let settings = Settings { route_table: args.route_table.clone(), period: args.sync_period };
    tasks.spawn(Router::new(cloud, netlink, rx, settings).run());

    let mut sigterm = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: stopping; the installed routes stay"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: stopping; the installed routes stay"),
        Some(_) = tasks.join_next() => anyhow::bail!("a task stopped unexpectedly"),
    }
    Ok(())
}

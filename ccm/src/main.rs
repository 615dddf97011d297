use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;
use fakecloud_ccm::cloud::fakecloud::FakeCloud;
use fakecloud_ccm::config::{Args, CloudConfig};
use fakecloud_ccm::controllers::{ControllerName, node, node_lifecycle};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
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
    let enabled = args.validate()?;
    let cfg = CloudConfig::load(&args.cloud_config)?;
    let client = fakecloud_api::Client::new(&cfg.endpoint, cfg.token()?)?;
    let region = client.region().await.with_context(|| {
        format!("cannot reach the fakecloud emulator at {} (endpoint in --cloud-config): is it running, and is the token right?", cfg.endpoint)
    })?;
    if let Some(want) = &cfg.region
        && want != &region.name
    {
        bail!("--cloud-config says region {want:?}, but the emulator at {} serves {:?}", cfg.endpoint, region.name);
    }
    let kube = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?
        }
        None => kube::Client::try_default().await.context("no --kubeconfig and no in-cluster config")?,
    };
    let cloud = Arc::new(FakeCloud::new(client));
    tracing::info!(region = %region.name, cluster = %args.cluster_name, controllers = ?enabled.iter().map(|c| c.canonical()).collect::<Vec<_>>(), "starting");

    let mut tasks = tokio::task::JoinSet::new();
    for c in enabled {
        match c {
            ControllerName::CloudNode => {
                tasks.spawn(node::run(
                    kube.clone(),
                    cloud.clone(),
                    args.concurrent_node_syncs,
                    args.node_status_update_frequency,
                ));
            }
            ControllerName::CloudNodeLifecycle => {
                tasks.spawn(node_lifecycle::run(kube.clone(), cloud.clone(), args.node_monitor_period));
            }
            // The service and route controllers come with the next release of this CCM.
            ControllerName::Service | ControllerName::Route => {
                tracing::warn!(controller = c.canonical(), "not implemented in this version; not started");
            }
        }
    }
    let mut sigterm = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: stopping"),
        Some(_) = tasks.join_next() => bail!("a controller stopped unexpectedly"),
    }
    Ok(())
}

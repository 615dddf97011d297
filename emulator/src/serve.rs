//! `fakecloud serve`: its flags, its logging, and the emulator started from them. The `fakecloud` binary (the
//! CLI crate) runs it; so do this crate's tests and benchmarks that need the emulator as a process of its own.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use fakecloud_api::{ENV_ADMIN_TOKEN, ENV_ENDPOINT, ENV_USER_TOKEN};
use ipnet::Ipv4Net;

use crate::config::{Config, DataPlaneLimits, DbLocation, Timings, Topology};
use crate::credentials::{self, Source};
use crate::listener;
use crate::server::Server;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "FAKECLOUD_LISTEN", default_value = "127.0.0.1:8787")]
    pub listen: String,
    /// Also answer the cloud's names over DNS on this address, UDP and TCP (e.g. 127.0.0.1:5353; port 0 picks a
    /// free one): load balancers' DNS names (`*.lb.fakecloud.test`, and classic ELBs' `*.elb.amazonaws.com` as AWS
    /// names them; once active) and instances' private DNS
    /// names (`ip-10-0-1-5.<region>.compute.internal`). Authoritative for those zones only: point a resolver's
    /// forwarding of them here (CoreDNS's `forward`, or `dig @ADDR -p PORT`). With --serve-load-balancers, give
    /// an address of its own: a wildcard one (0.0.0.0:53) takes its port from every load balancer address.
    #[arg(long, env = "FAKECLOUD_DNS_LISTEN", value_name = "ADDR")]
    pub dns_listen: Option<String>,
    /// SQLite database file (created if missing; sqlite://PATH too), :memory: for a throwaway run, or a
    /// PostgreSQL database, postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (its schema applied at start), which
    /// one emulator or several replicas serve as one cloud. Other database URLs are refused.
    #[arg(long, env = "FAKECLOUD_DB", default_value = "fakecloud.db")]
    pub db: String,
    /// Region name.
    #[arg(long, default_value = "local-1")]
    pub region: String,
    /// Zones, comma-separated; each gets a subnet of the VPC.
    #[arg(long, value_delimiter = ',', default_value = "local-1a,local-1b,local-1c")]
    pub zones: Vec<String>,
    /// The VPC's CIDR, split into one subnet per zone plus one for internal load balancers.
    #[arg(long, default_value = "10.0.0.0/16")]
    pub vpc_cidr: Ipv4Net,
    /// Pool of public addresses for internet-facing load balancers.
    #[arg(long, env = "FAKECLOUD_PUBLIC_POOL", default_value = "203.0.113.0/24")]
    pub public_pool: Ipv4Net,
    /// Time from pending to running.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub boot_delay: Duration,
    /// Time from stopping to stopped.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub stop_delay: Duration,
    /// Time from shutting-down to terminated.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub terminate_delay: Duration,
    /// Time a load balancer stays provisioning (no address) before it is active.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    pub lb_provision_delay: Duration,
    /// Time a load balancer stays deleting before it is gone.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub lb_delete_delay: Duration,
    /// How long terminated instances stay listable.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    pub terminated_retention: Duration,
    /// Audit entries kept (oldest dropped first).
    #[arg(long, default_value_t = 100_000)]
    pub audit_max_entries: u64,
    /// The user token (resources). With --admin-token, no credentials file is read or written.
    #[arg(long, env = ENV_USER_TOKEN, hide_env_values = true)]
    pub user_token: Option<String>,
    /// The admin token (quotas, audit, reset, snapshot, faults, accounts, and everything a user may do).
    #[arg(long, env = ENV_ADMIN_TOKEN, hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Where tokens are read from, or generated into when missing (default: beside the database).
    #[arg(long)]
    pub credentials_file: Option<PathBuf>,
    /// The only directory `POST /v1/admin/snapshot` writes to (created if missing; default: the database's).
    #[arg(long, env = "FAKECLOUD_SNAPSHOT_DIR")]
    pub snapshot_dir: Option<PathBuf>,
    /// Seed for fault injection's random draws, so a run repeats exactly (default: random, logged at start).
    #[arg(long, env = "FAKECLOUD_SEED")]
    pub seed: Option<u64>,
    /// Time a request's head may take to arrive, from its first byte.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub header_read_timeout: Duration,
    /// Time a request's body may take to arrive, from the end of its head, however slowly it trickles in: past
    /// it the call is answered 408 and the connection closed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub body_read_timeout: Duration,
    /// Time a keep-alive connection may wait for its next request before it is closed; also how long an answer
    /// may wait for a client that stopped reading it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub idle_timeout: Duration,
    /// Client connections open at once; at the cap idle ones are closed to make room, busy ones make new ones
    /// wait (default: the open-file limit, raised to its hard limit, less 128; half of that with
    /// --serve-load-balancers, whose data plane gets the other half: see --lb-max-files).
    #[arg(long)]
    pub max_connections: Option<u32>,
    /// Serve the load balancers' data plane: accept TCP (and UDP, a session per client address) on every
    /// listener of every active load balancer (its address and port) and forward each connection to a healthy
    /// backend's private IP and backend port, round-robin, with the health check, source ranges and data-plane
    /// faults applied. The addresses must be ones this host can bind, e.g. `--public-pool 127.77.0.0/24` (all of
    /// 127.0.0.0/8 is on loopback); a listener whose address or port cannot be bound is shown failed on the load
    /// balancer (`data_plane`).
    #[arg(long, env = "FAKECLOUD_SERVE_LOAD_BALANCERS", default_value_t = false)]
    pub serve_load_balancers: bool,
    /// Data plane: TCP connections open at once on one listener; past it a new one is closed at once
    /// (`outcome="refused_listener_full"`, and a reason in the load balancer's `data_plane`).
    #[arg(long, default_value_t = 1024)]
    pub lb_max_connections_per_listener: u32,
    /// Data plane: TCP connections open at once on one load balancer, across its listeners
    /// (`outcome="refused_lb_full"`).
    #[arg(long, default_value_t = 4096)]
    pub lb_max_connections: u32,
    /// Data plane: UDP sessions (client addresses) open at once on one load balancer, across its listeners
    /// (`outcome="refused_sessions_full"`).
    #[arg(long, default_value_t = 4096)]
    pub lb_max_udp_sessions: u32,
    /// Data plane: how long a proxied TCP connection may pass no byte either way before it is closed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "350s")]
    pub lb_idle_timeout: Duration,
    /// Data plane: open files it may hold — a listening socket each, two per TCP connection, one per UDP session
    /// and per health check under way — apart from the API's connections, so that a flood of load balancer
    /// traffic never starves the API (`outcome="refused_files_full"`). Default: half of what the open-file limit
    /// leaves (the API's connections get the other half).
    #[arg(long)]
    pub lb_max_files: Option<u32>,
    /// Make every address of the public pool this host's own at start (a `local` route on lo, in the emulator's
    /// network namespace; needs CAP_NET_ADMIN), so the load balancers' addresses answer on the network the
    /// emulator sits on: on kind, a slice of the kind network that the host and the pods reach. Passthrough load
    /// balancers are then routed there too (the `local` table's rule moves to priority 200, theirs sit at 100,
    /// with routes in table 1000; needs net.ipv4.ip_forward=1): meant for a namespace of its own, a container's.
    #[arg(long, env = "FAKECLOUD_HOLD_PUBLIC_POOL", default_value_t = false)]
    pub hold_public_pool: bool,
    /// Accept a loopback `private_ip` (127.0.0.0/8, ::1) for an adopted instance: backends that are processes
    /// on this host, for the data plane on one machine.
    #[arg(long, env = "FAKECLOUD_LOOPBACK_INSTANCES", default_value_t = false)]
    pub loopback_instances: bool,
    /// Networks outside the VPC whose machines may be adopted as instances (a fixed `private_ip` or
    /// `ipv6_address` in them), comma-separated: e.g. a kind network's subnets, as `make kind-up` passes them.
    /// Outside the VPC and these, a fixed address is refused, as a real cloud refuses a private IP outside its
    /// subnets.
    #[arg(long, env = "FAKECLOUD_ADOPT_NETWORKS", value_delimiter = ',')]
    pub adopt_networks: Vec<ipnet::IpNet>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// `fakecloud serve ARGS` in a program that is not the `fakecloud` binary but must play it: this crate's tests
/// and benchmarks that kill, restart or limit the emulator (the binary lives in the CLI crate, above this one).
pub fn run_from_args(args: impl IntoIterator<Item = String>) -> Result<()> {
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }
    let serve = <Serve as clap::Parser>::try_parse_from(std::iter::once("serve".to_string()).chain(args))?;
    tokio::runtime::Runtime::new()?.block_on(run(serve.args))
}

pub async fn run(args: ServeArgs) -> Result<()> {
    init_logging(args.log_format);
    listener::raise_fd_limit();
    // First: a URL taken for a file name would leave a stray file; nothing is created before this check.
    let db = DbLocation::parse(&args.db).map_err(anyhow::Error::msg)?;
    let topology =
        Topology::new(&args.region, &args.zones, args.vpc_cidr, args.public_pool).map_err(anyhow::Error::msg)?;
    let (max_connections, lb_max_files) = share_open_files(
        listener::default_max_connections(),
        args.max_connections,
        args.lb_max_files,
        args.serve_load_balancers,
    )?;
    let cfg = Config {
        topology,
        timings: Timings {
            boot_delay: args.boot_delay,
            stop_delay: args.stop_delay,
            terminate_delay: args.terminate_delay,
            lb_provision_delay: args.lb_provision_delay,
            lb_delete_delay: args.lb_delete_delay,
            terminated_retention: args.terminated_retention,
        },
        audit_max_entries: args.audit_max_entries.max(1),
        seed: args.seed,
        snapshot_dir: args.snapshot_dir,
        connections: listener::Limits {
            header_read_timeout: args.header_read_timeout,
            body_read_timeout: args.body_read_timeout,
            idle_timeout: args.idle_timeout,
            max_connections,
        },
        serve_load_balancers: args.serve_load_balancers,
        data_plane: DataPlaneLimits {
            connections_per_listener: args.lb_max_connections_per_listener.max(1),
            connections_per_lb: args.lb_max_connections.max(1),
            udp_sessions_per_lb: args.lb_max_udp_sessions.max(1),
            idle_timeout: args.lb_idle_timeout,
            max_files: lb_max_files,
        },
        holds_public_pool: args.hold_public_pool,
        loopback_instances: args.loopback_instances,
        adopt_networks: args.adopt_networks.into_iter().map(fakecloud_api::net::canonical_net).collect(),
    };
    if args.hold_public_pool {
        crate::dataplane::pool::hold(args.public_pool).await?;
        tracing::info!(pool = %args.public_pool, "holding the public pool: its addresses are this host's");
    }
    let cred_file = args.credentials_file.clone().unwrap_or_else(|| match &db {
        DbLocation::File(p) => p.with_extension("credentials"),
        DbLocation::Memory | DbLocation::Postgres(_) => PathBuf::from("fakecloud.credentials"),
    });
    let (tokens, source) = credentials::load_or_create(args.user_token, args.admin_token, &cred_file, |t| {
        crate::aws::credentials::Keys::of(t).file_lines()
    })?;
    let mut server = match Server::start(&args.listen, &db, cfg, tokens).await {
        Ok(server) => server,
        Err(e) => {
            // Tokens made for a cloud that never started would outlive it: a failed start leaves nothing new.
            if let Source::Generated(f) = &source {
                let _ = std::fs::remove_file(f);
            }
            return Err(e.into());
        }
    };
    let dns = match &args.dns_listen {
        Some(listen) => Some(server.serve_dns(listen).await?),
        None => None,
    };
    let url = server.url();
    let limits = &server.state.cfg.connections;
    tracing::info!(
        %url, db = %db, region = %args.region, max_connections = limits.max_connections,
        header_read_timeout = ?limits.header_read_timeout, idle_timeout = ?limits.idle_timeout,
        serve_load_balancers = args.serve_load_balancers, "fakecloud listening"
    );
    match &source {
        Source::Given => eprintln!("fakecloud: serving {url} with the tokens from --user-token/--admin-token"),
        Source::File(f) | Source::Generated(f) => eprintln!(
            "fakecloud: serving {url}; tokens in {} ({})\n  to use the CLI:  export {ENV_ENDPOINT}={url}; source {}\n  \
             to use boto3 or the aws CLI:  export AWS_ENDPOINT_URL={url} AWS_DEFAULT_REGION={}; source {}",
            f.display(),
            if matches!(source, Source::Generated(_)) { "generated now, mode 0600" } else { "reused" },
            f.display(),
            args.region,
            f.display()
        ),
    }
    if let Some(dns) = dns {
        let zones = crate::dns::lb_zones(&args.region).join(", ");
        eprintln!("fakecloud: DNS on {dns} (UDP and TCP): {zones} and {}.compute.internal", args.region);
    }
    let stop = server.shutdown_handle();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop.send(true);
    });
    server.wait().await.context("server failed")?;
    Ok(())
}

/// The fewest open files the data plane can work with: a few listeners, connections and health checks.
const DATA_PLANE_FILES_MIN: u32 = 64;

/// How the `available` open files (the limit less what the process keeps for itself) are shared between the
/// API's connections and the data plane's files: as the flags say, else half each when the data plane is
/// served (and all to the API when it is not). Refused when the two would need more than there is.
fn share_open_files(available: u32, api: Option<u32>, data_plane: Option<u32>, serving: bool) -> Result<(u32, u32)> {
    if !serving {
        return Ok((api.unwrap_or(available), data_plane.unwrap_or(0)));
    }
    let (api, data_plane) = match (api, data_plane) {
        (Some(a), Some(d)) => (a, d),
        (Some(a), None) => (a, available.saturating_sub(a)),
        (None, Some(d)) => (available.saturating_sub(d), d),
        (None, None) => (available / 2, available - available / 2),
    };
    if api < 1 || data_plane < DATA_PLANE_FILES_MIN || u64::from(api) + u64::from(data_plane) > u64::from(available) {
        anyhow::bail!(
            "--max-connections {api} and --lb-max-files {data_plane} do not fit the {available} open files this \
             process may use (its open-file limit less 128 it keeps for itself): the data plane needs at least \
             {DATA_PLANE_FILES_MIN} and the two together at most {available}; lower one, or raise the limit \
             (ulimit -n)"
        );
    }
    Ok((api, data_plane))
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_and_the_data_plane_share_the_open_files() {
        assert_eq!(share_open_files(1000, None, None, false).unwrap(), (1000, 0));
        assert_eq!(share_open_files(1000, None, None, true).unwrap(), (500, 500));
        assert_eq!(share_open_files(1000, Some(100), None, true).unwrap(), (100, 900));
        assert_eq!(share_open_files(1000, None, Some(900), true).unwrap(), (100, 900));
        let err = share_open_files(1000, Some(600), Some(600), true).unwrap_err().to_string();
        assert!(err.contains("--max-connections 600 and --lb-max-files 600"), "{err}");
        assert!(share_open_files(1000, Some(990), None, true).is_err(), "10 files are too few for the data plane");
    }

    /// `--help` says what `--db` takes now: PostgreSQL is served (it once said it was refused).
    #[test]
    fn the_help_offers_postgresql_for_db() {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            args: ServeArgs,
        }
        let help = <Serve as clap::CommandFactory>::command().render_long_help().to_string();
        let db = help.split("--db").nth(1).unwrap_or_default();
        assert!(db.contains("postgres://USER") && db.contains("replicas"), "{help}");
        assert!(!help.contains("refused for now"), "{help}");
    }
}

//! The `fakecloud` command line: `serve` runs the emulator (`fakecloud_emulator::serve`); every other command
//! is a client of its API through `fakecloud_api::Client`.

pub mod adopt;
mod faults;
mod output;
mod parse;
pub mod scenario;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use fakecloud_api::{
    AuditQuery, Client, CreateInstanceRequest, CreateRouteRequest, ENV_ADMIN_TOKEN, ENV_ENDPOINT, ENV_USER_TOKEN,
    InstanceState, LeaseRequest, ListInstancesQuery, Market, QuotaName, RenewLeaseRequest, SetLbProvisioningRequest,
};

use self::output::{Format, Output};
use fakecloud_emulator::config::DbLocation;
use fakecloud_emulator::serve::{self, ServeArgs};

#[derive(Debug, Parser)]
#[command(name = "fakecloud", version, about = "A local cloud emulator for testing Kubernetes cloud integrations", long_about = LONG_ABOUT)]
pub struct Cli {
    #[command(flatten)]
    pub conn: Connection,
    #[command(subcommand)]
    pub command: Command,
}

const LONG_ABOUT: &str = "fakecloud emulates a cloud API — instances, networks and route tables, load balancers, quotas and an \
audit log — on a SQLite file, for testing cloud-controller-managers and other Kubernetes cloud integrations.

Start it with `fakecloud serve`; it prints its URL and where its tokens are. The other commands talk to a running emulator:
`source fakecloud.credentials` (written beside the database) or set FAKECLOUD_ENDPOINT and FAKECLOUD_USER_TOKEN / \
FAKECLOUD_ADMIN_TOKEN.";

#[derive(Debug, Args)]
pub struct Connection {
    /// Emulator URL.
    #[arg(long, global = true, env = ENV_ENDPOINT, default_value = "http://127.0.0.1:8787")]
    pub endpoint: String,
    /// Bearer token (default: FAKECLOUD_ADMIN_TOKEN for admin commands, else FAKECLOUD_USER_TOKEN, else the
    /// credentials file).
    #[arg(long, global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// A credentials file written by `fakecloud serve`, read when no token is in the environment.
    #[arg(long, global = true, env = "FAKECLOUD_CREDENTIALS", default_value = "fakecloud.credentials")]
    pub credentials: PathBuf,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the emulator.
    Serve(Box<ServeArgs>),
    /// Apply the emulator's schema to a database without serving it (a SQLite file, or PostgreSQL by a
    /// postgres:// URL) and print its schema version: a farm's replicas start on a database prepared once.
    Migrate {
        /// The database: a SQLite file (created if missing) or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE.
        #[arg(long, env = "FAKECLOUD_DB", default_value = "fakecloud.db")]
        db: String,
    },
    /// Create, list, inspect, stop, start and terminate instances.
    #[command(subcommand)]
    Instance(InstanceCmd),
    /// List, create and delete routes of a route table.
    #[command(subcommand)]
    Route(RouteCmd),
    /// List, inspect and delete load balancers; script how long new ones provision (admin).
    #[command(subcommand)]
    Lb(LbCmd),
    /// Read quotas, or set one (admin).
    #[command(subcommand)]
    Quota(QuotaCmd),
    /// Show the audit log: every call the emulator answered (admin).
    Audit(AuditArgs),
    /// Delete every resource and the audit log; quotas and LB provisioning back to defaults (admin).
    Reset,
    /// Make a cluster's Nodes cloud instances (for kind clusters).
    ///
    /// Creates an instance for every Node that has none, with the Node's name, its InternalIP and a zone (its
    /// topology.kubernetes.io/zone label if the emulator has that zone, else round-robin). Safe to run again.
    /// The Nodes' addresses must be where the emulator takes machines: start it with `serve --adopt-networks`
    /// and the cluster network's subnets (`make kind-up` does).
    Adopt {
        /// Kubeconfig of the cluster (default: KUBECONFIG, or in-cluster).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<std::path::PathBuf>,
    },
    /// Fault rules: errors, latency, no response, apply-then-fail (admin).
    #[command(subcommand)]
    Fault(faults::FaultCmd),
    /// Data-plane faults on load balancers: reset connections, add latency, black-hole backends (admin).
    #[command(subcommand, name = "lb-fault")]
    LbFault(faults::LbFaultCmd),
    /// Token-bucket rate limits with Retry-After (admin).
    #[command(subcommand, name = "ratelimit")]
    RateLimit(faults::RateLimitCmd),
    /// Outages of the API, a service or a zone (admin).
    #[command(subcommand)]
    Outage(faults::OutageCmd),
    /// Hung machines: the instance runs, its kubelet falls silent (admin).
    #[command(subcommand)]
    Hang(faults::HangCmd),
    /// Spot instance reclamation (admin).
    #[command(subcommand)]
    Spot(faults::SpotCmd),
    /// Run timed fault-injection steps from a YAML file (admin); see `fakecloud scenario run --help`.
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// Accounts: clouds of their own on this emulator, each with its own tokens, resources, quotas, faults,
    /// rate limits and audit log (the emulator's own admin token).
    #[command(subcommand)]
    Account(AccountCmd),
    /// Leases of accounts for CI jobs: take one for a while, renew it, release it; a lease that ends (released,
    /// or lapsed unrenewed) has its account wiped — emptied, new tokens — and free again (the emulator's own
    /// admin token).
    #[command(subcommand)]
    Lease(LeaseCmd),
    /// Write a consistent copy of the database to the file NAME in the emulator's snapshot directory (the
    /// emulator's own admin token, not an account's).
    Snapshot {
        /// A new file name (letters, digits, '.', '_', '-'; no path): the file is written to the directory of
        /// `fakecloud serve --snapshot-dir` (default: beside its database). Start from it with
        /// `fakecloud serve --db <the path printed>`.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ScenarioCmd {
    /// Run FILE's steps at their times, printing each; at the end or on Ctrl-C, put back what they changed.
    #[command(long_about = SCENARIO_HELP)]
    Run {
        file: std::path::PathBuf,
        /// Leave the faults, limits, outages and quotas in place at the end.
        #[arg(long)]
        keep: bool,
        /// Only check the file.
        #[arg(long)]
        check: bool,
        /// Multiply the step times by this (0.1 runs ten times faster), e.g. for a quick run in CI.
        #[arg(long, default_value_t = 1.0)]
        time_scale: f64,
        /// Give the scenario's variable NAME this value instead of its default (repeatable), e.g.
        /// `--set limit=3 --set duration=120`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Return once the steps at 0s are applied; a process in the background (its pid printed) runs the rest
        /// and restores at the end. For what must come after them: `fakecloud scenario run --background FILE &&
        /// kubectl create ...`.
        #[arg(long, conflicts_with = "check")]
        background: bool,
    },
}

const SCENARIO_HELP: &str = "Run FILE's steps at their times. A scenario is YAML:

  name: lb-api-outage
  steps:
    - at: 0s
      set_quota: {name: load-balancers, limit: 2}
    - at: 5s
      start_outage: {scope: service, service: load-balancing, duration_seconds: 20}
    - at: 10s
      add_fault: {match: {operations: [CreateRoute]}, action: {type: latency, ms: 800}}
    - at: 12s
      set_rate_limit: {id: writes, scope: writes, capacity: 5, refill_per_second: 1}
    - at: 15s
      reclaim: {tag: pool=spot, notice_seconds: 10}
    - at: 40s
      wait: true

One action per step: add_fault, remove_fault, add_lb_fault, remove_lb_fault (data-plane rules: reset, latency,
black-hole), set_rate_limit, remove_rate_limit, rate_limit_preset (aws-ec2, aws-elb, azure-arm, gcp-compute),
clear_rate_limit_presets, start_outage, stop_outages, set_quota, reclaim, hang, stop_hangs, clear_faults or
wait. Examples are in scenarios/. The file is checked before anything runs.

A scenario may declare variables with defaults and use them in its steps; --set changes one:

  vars: {limit: 2, duration: 60}
  steps:
    - at: 0s
      set_quota: {name: routes-per-route-table, limit: \"${limit}\"}
    - at: \"${duration}s\"
      wait: true

  fakecloud scenario run scenarios/route-limit.yaml --set limit=3";

#[derive(Debug, Subcommand)]
pub enum InstanceCmd {
    /// Create an instance (it becomes a Kubernetes node of the same name).
    Create {
        name: String,
        /// Zone (default: the region's first).
        #[arg(long)]
        zone: Option<String>,
        /// Instance type (see `fakecloud instance types`).
        #[arg(long = "type")]
        instance_type: Option<String>,
        /// A spot instance (can be reclaimed).
        #[arg(long)]
        spot: bool,
        /// A tag, KEY=VALUE; repeatable.
        #[arg(long = "tag", value_parser = parse::tag)]
        tags: Vec<(String, String)>,
        /// A fixed private IP (to adopt an existing machine).
        #[arg(long)]
        private_ip: Option<std::net::IpAddr>,
        /// A fixed IPv6 address beside an IPv4 private IP (to adopt a dual-stack machine).
        #[arg(long)]
        ipv6_address: Option<std::net::Ipv6Addr>,
        /// Client token: running the same command again returns the same instance.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// List instances (all pages).
    List {
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        zone: Option<String>,
        /// pending, running, stopping, stopped, shutting-down or terminated.
        #[arg(long, value_parser = parse::state)]
        state: Option<InstanceState>,
        /// KEY=VALUE, or KEY to list instances that have the tag.
        #[arg(long)]
        tag: Option<String>,
    },
    /// Show one instance.
    Get { id: String },
    /// Stop a running instance.
    Stop { id: String },
    /// Start a stopped instance.
    Start { id: String },
    /// Terminate an instance.
    Terminate { id: String },
    /// Show the region, its zones and the instance types.
    Types,
}

#[derive(Debug, Subcommand)]
pub enum RouteCmd {
    /// List the routes of a table.
    List {
        #[arg(long, default_value = "main")]
        table: String,
    },
    /// Add a route DESTINATION → instance.
    Create {
        /// Destination CIDR, e.g. 10.244.1.0/24.
        #[arg(long)]
        destination: String,
        /// Target instance ID.
        #[arg(long)]
        target: String,
        /// Route name (default: derived from the destination).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, default_value = "main")]
        table: String,
    },
    /// Delete a route by ID.
    Delete {
        id: String,
        #[arg(long, default_value = "main")]
        table: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum LbCmd {
    /// List load balancers (all pages).
    List,
    /// Show one load balancer; with the data plane on, also its backends' health and any listener that is not
    /// listening, with why.
    Get { id: String },
    /// Delete a load balancer.
    Delete { id: String },
    /// How long new load balancers stay `provisioning`, scripted at run time (admin).
    #[command(subcommand)]
    Provisioning(LbProvisioningCmd),
}

#[derive(Debug, Subcommand)]
pub enum LbProvisioningCmd {
    /// Show what applies: per name, else for every load balancer, else `serve --lb-provision-delay`.
    Show,
    /// Set how long load balancers created from now on stay `provisioning` (0 to 3600 seconds; 0: active at
    /// once): every one, or only those named --load-balancer (which wins). Kept across restarts.
    Set {
        seconds: f64,
        #[arg(long)]
        load_balancer: Option<String>,
    },
    /// Back to `serve --lb-provision-delay`: the --load-balancer name's setting, or every setting.
    Clear {
        #[arg(long)]
        load_balancer: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AccountCmd {
    /// Create an account and print its tokens, as lines to `source` (shown this once).
    Create {
        /// 1-63 lowercase letters, digits and '-' (`default` is the emulator's own account).
        id: String,
    },
    /// List the accounts.
    List,
    /// Delete an account and everything in it; its tokens stop working.
    Delete { id: String },
}

#[derive(Debug, Subcommand)]
pub enum LeaseCmd {
    /// Take an account (the first free one, or --account) and print its tokens as lines to `source`.
    Take {
        /// Who takes it, e.g. the CI job's name.
        #[arg(long)]
        holder: String,
        /// How long it lasts unless renewed (1s to 7d), e.g. 30m.
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: std::time::Duration,
        /// This account rather than the first free one.
        #[arg(long)]
        account: Option<String>,
    },
    /// Renew a lease for --ttl from now, as its holder.
    Renew {
        account: String,
        #[arg(long)]
        holder: String,
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: std::time::Duration,
    },
    /// End a lease now: the account is wiped and free.
    Release { account: String },
}

#[derive(Debug, Subcommand)]
pub enum QuotaCmd {
    /// Show all quotas with their usage, or one.
    Get {
        /// e.g. routes-per-route-table.
        #[arg(value_parser = parse::quota)]
        name: Option<QuotaName>,
    },
    /// Set a quota's limit (admin).
    Set {
        #[arg(value_parser = parse::quota)]
        name: QuotaName,
        limit: u32,
    },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this operation, e.g. CreateLoadBalancer.
    #[arg(long)]
    operation: Option<String>,
    /// Only calls about this resource ID.
    #[arg(long)]
    resource: Option<String>,
    /// Only calls answered with this HTTP status.
    #[arg(long)]
    status: Option<u16>,
    /// Only calls at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// Only entries after this sequence number.
    #[arg(long)]
    after: Option<i64>,
    /// At most this many entries.
    #[arg(long, default_value_t = 1000)]
    limit: u32,
}

impl Connection {
    /// A client with the token this command needs.
    fn client(&self, admin: bool) -> Result<Client> {
        let token = match &self.token {
            Some(t) => t.clone(),
            None => self.token_from_env_or_file(admin)?,
        };
        Client::new(&self.endpoint, token).context("bad --endpoint")
    }

    fn token_from_env_or_file(&self, admin: bool) -> Result<String> {
        let order = if admin { [ENV_ADMIN_TOKEN, ENV_ADMIN_TOKEN] } else { [ENV_USER_TOKEN, ENV_ADMIN_TOKEN] };
        for var in order {
            if let Ok(v) = std::env::var(var)
                && !v.is_empty()
            {
                return Ok(v);
            }
        }
        if let Ok(text) = std::fs::read_to_string(&self.credentials) {
            for var in order {
                let found = text
                    .lines()
                    .find_map(|l| l.trim().trim_start_matches("export ").strip_prefix(var)?.strip_prefix('='));
                if let Some(v) = found {
                    return Ok(v.trim_matches('"').to_string());
                }
            }
        }
        bail!(
            "no {} token: pass --token, set {}, or point --credentials at the file `fakecloud serve` wrote",
            if admin { "admin" } else { "user" },
            order[0]
        )
    }
}

pub async fn run(cli: Cli) -> Result<()> {
    let out = Output::new(cli.conn.output);
    let conn = &cli.conn;
    match cli.command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Migrate { db } => {
            let location = DbLocation::parse(&db).map_err(anyhow::Error::msg)?;
            let version = fakecloud_emulator::db::migrate(&location).await?;
            println!("{location}: schema at version {version}");
            Ok(())
        }
        Command::Instance(cmd) => {
            let client = conn.client(false)?;
            match cmd {
                InstanceCmd::Create {
                    name,
                    zone,
                    instance_type,
                    spot,
                    tags,
                    private_ip,
                    ipv6_address,
                    idempotency_key,
                } => {
                    let req = CreateInstanceRequest {
                        name,
                        zone,
                        instance_type,
                        market: if spot { Market::Spot } else { Market::OnDemand },
                        tags: tags.into_iter().collect::<BTreeMap<_, _>>(),
                        private_ip,
                        ipv6_address,
                    };
                    out.instances(&[client.create_instance(&req, idempotency_key.as_deref()).await?])
                }
                InstanceCmd::List { name, zone, state, tag } => {
                    let q = ListInstancesQuery { name, zone, state, tag, page_size: Some(1000), page_token: None };
                    out.instances(&client.list_all_instances(&q).await?)
                }
                InstanceCmd::Get { id } => out.instances(&[client.get_instance(&id).await?]),
                InstanceCmd::Stop { id } => out.instances(&[client.stop_instance(&id).await?]),
                InstanceCmd::Start { id } => out.instances(&[client.start_instance(&id).await?]),
                InstanceCmd::Terminate { id } => out.instances(&[client.terminate_instance(&id).await?]),
                InstanceCmd::Types => out.region(&client.region().await?),
            }
        }
        Command::Route(cmd) => {
            let client = conn.client(false)?;
            match cmd {
                RouteCmd::List { table } => out.routes(&client.list_routes(&table).await?.items),
                RouteCmd::Create { destination, target, name, table } => {
                    let name = name.unwrap_or_else(|| format!("route-{}", destination.replace(['/', '.', ':'], "-")));
                    let req = CreateRouteRequest { name, destination, target_instance: target };
                    out.routes(&[client.create_route(&table, &req, None).await?])
                }
                RouteCmd::Delete { id, table } => out.routes(&[client.delete_route(&table, &id).await?]),
            }
        }
        Command::Lb(LbCmd::List) => out.load_balancers(&conn.client(false)?.list_all_load_balancers().await?),
        Command::Lb(LbCmd::Get { id }) => out.load_balancer(&conn.client(false)?.get_load_balancer(&id).await?),
        Command::Lb(LbCmd::Delete { id }) => {
            out.load_balancers(&[conn.client(false)?.delete_load_balancer(&id).await?])
        }
        Command::Lb(LbCmd::Provisioning(cmd)) => {
            let client = conn.client(true)?;
            let shown = match cmd {
                LbProvisioningCmd::Show => client.lb_provisioning().await?,
                LbProvisioningCmd::Set { seconds, load_balancer } => {
                    client.set_lb_provisioning(&SetLbProvisioningRequest { seconds, load_balancer }).await?
                }
                LbProvisioningCmd::Clear { load_balancer } => {
                    client.reset_lb_provisioning(load_balancer.as_deref()).await?
                }
            };
            out.lb_provisioning(&shown)
        }
        Command::Quota(QuotaCmd::Get { name }) => {
            let client = conn.client(false)?;
            match name {
                Some(n) => out.quotas(&[client.get_quota(n).await?]),
                None => out.quotas(&client.list_quotas().await?.items),
            }
        }
        Command::Quota(QuotaCmd::Set { name, limit }) => {
            out.quotas(&[conn.client(true)?.set_quota(name, limit).await?])
        }
        Command::Audit(a) => {
            let q = AuditQuery {
                operation: a.operation,
                resource: a.resource,
                status: a.status,
                since: a.since,
                after: a.after,
                limit: Some(a.limit),
            };
            out.audit(&conn.client(true)?.audit(&q).await?.items)
        }
        Command::Adopt { kubeconfig } => adopt::run(kubeconfig.as_deref(), &conn.client(false)?).await,
        Command::Fault(cmd) => faults::fault(&conn.client(true)?, &out, cmd).await,
        Command::LbFault(cmd) => faults::lb_fault(&conn.client(true)?, &out, cmd).await,
        Command::RateLimit(cmd) => faults::rate_limit(&conn.client(true)?, &out, cmd).await,
        Command::Outage(cmd) => faults::outage(&conn.client(true)?, &out, cmd).await,
        Command::Hang(cmd) => faults::hang(&conn.client(true)?, &out, cmd).await,
        Command::Spot(cmd) => faults::spot(&conn.client(true)?, &out, cmd).await,
        Command::Scenario(ScenarioCmd::Run { file, keep, check, time_scale, set, background }) => {
            let plan = scenario::load(&file, &set)?;
            if check {
                eprintln!("{}: ok", file.display());
                return Ok(());
            }
            if background {
                return scenario::in_background(&plan);
            }
            scenario::run(&conn.client(true)?, &plan, keep, time_scale).await
        }
        Command::Account(cmd) => {
            let client = conn.client(true)?;
            match cmd {
                AccountCmd::Create { id } => out.created_account(&client.create_account(&id).await?),
                AccountCmd::List => out.accounts(&client.list_accounts().await?.items),
                AccountCmd::Delete { id } => out.accounts(&[client.delete_account(&id).await?]),
            }
        }
        Command::Lease(cmd) => {
            let client = conn.client(true)?;
            match cmd {
                LeaseCmd::Take { holder, ttl, account } => {
                    let req = LeaseRequest { holder, ttl_seconds: ttl.as_secs_f64(), account };
                    out.leased_account(&client.take_lease(&req).await?)
                }
                LeaseCmd::Renew { account, holder, ttl } => {
                    let req = RenewLeaseRequest { holder, ttl_seconds: ttl.as_secs_f64() };
                    out.accounts(&[client.renew_lease(&account, &req).await?])
                }
                LeaseCmd::Release { account } => out.accounts(&[client.release_lease(&account).await?]),
            }
        }
        Command::Reset => out.value(&conn.client(true)?.reset().await?),
        Command::Snapshot { name } => out.value(&serde_json::to_value(conn.client(true)?.snapshot(&name).await?)?),
    }
}

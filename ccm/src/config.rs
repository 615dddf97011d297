//! Flags, with upstream's names and defaults where they apply (durations in Go's syntax: `15s`, `5m0s`,
//! `1h30m`), and the `--cloud-config` file.
//!
//! The cloud config's format and parser are in the api crate ([`fakecloud_api::cloud_config`]).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::controllers::ControllerName;
use clap::{ArgAction, Parser};

/// The `--cloud-config` file, parsed by the api crate (the VPC router reads the same file).
pub use fakecloud_api::CloudConfig;

/// What is wrong with the flags or the cloud config, worded as what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Flag(String),
    #[error("--cloud-config {path}: {reason}")]
    CloudConfig { path: PathBuf, reason: String },
}

fn flag(msg: impl Into<String>) -> ConfigError {
    ConfigError::Flag(msg.into())
}

#[derive(Debug, Clone, Parser)]
#[command(name = "fakecloud-ccm", version, about = "A cloud-controller-manager for the fakecloud emulator", long_about = None)]
pub struct Args {
    /// Kubeconfig (default: the in-cluster config, else KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The cloud provider; only `fakecloud` is known.
    #[arg(long, default_value = "")]
    pub cloud_provider: String,
    /// The cloud config file (YAML: endpoint, token or token-file, region).
    #[arg(long)]
    pub cloud_config: Option<PathBuf>,
    /// The cluster's name, for the cloud resources it owns.
    #[arg(long, default_value = "kubernetes")]
    pub cluster_name: String,
    /// Controllers to run: `*` for all, canonical names or aliases (cloud-node, cloud-node-lifecycle, service,
    /// route), `-name` to disable one. Comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// Run the controllers only while holding the leader-election Lease (`--leader-elect=false` to run alone).
    #[arg(long, action = ArgAction::Set, default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: bool,
    /// How long followers wait after the leader's last renewal before taking the Lease.
    #[arg(long, value_parser = parse_go_duration, default_value = "15s")]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up (and exits).
    #[arg(long, value_parser = parse_go_duration, default_value = "10s")]
    pub leader_elect_renew_deadline: Duration,
    /// How often to try to acquire or renew the Lease.
    #[arg(long, value_parser = parse_go_duration, default_value = "2s")]
    pub leader_elect_retry_period: Duration,
    /// The lock's kind; only `leases`.
    #[arg(long, default_value = "leases")]
    pub leader_elect_resource_lock: String,
    #[arg(long, default_value = "cloud-controller-manager")]
    pub leader_elect_resource_name: String,
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// The HTTPS port for /healthz and /metrics; 0 serves nothing.
    #[arg(long, default_value_t = 10258)]
    pub secure_port: u16,
    /// The address to serve on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Where the serving certificate is (`cloud-controller-manager.crt`/`.key`); a self-signed pair is written
    /// there if missing. Without it a self-signed certificate is made in memory.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// How often the lifecycle controller checks NotReady nodes against the cloud.
    #[arg(long, value_parser = parse_go_duration, default_value = "5s")]
    pub node_monitor_period: Duration,
    /// How often initialized nodes' addresses are refreshed from the cloud.
    #[arg(long, value_parser = parse_go_duration, default_value = "5m0s")]
    pub node_status_update_frequency: Duration,
    /// Nodes initialized at once.
    #[arg(long, default_value_t = 1)]
    pub concurrent_node_syncs: u16,
    /// Nodes whose addresses are refreshed at once; 0 means `--concurrent-node-syncs`.
    #[arg(long, default_value_t = 0)]
    pub concurrent_node_status_updates: u16,
    /// Services whose load balancers are synced at once.
    #[arg(long, default_value_t = 1)]
    pub concurrent_service_syncs: u16,
    /// Whether the route controller runs (it needs --cluster-cidr).
    #[arg(long, action = ArgAction::Set, default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub configure_cloud_routes: bool,
    /// The cluster's pod range(s), comma-separated (one, or one per IP family): the routes this CCM manages.
    #[arg(long, default_value = "")]
    pub cluster_cidr: String,
    /// How often the route controller reconciles.
    #[arg(long, value_parser = parse_go_duration, default_value = "10s")]
    pub route_reconciliation_period: Duration,
    /// Requests a second to the Kubernetes API, on average, per client: as upstream, each controller, the shared
    /// informers and leader election have a client (and so a budget) of their own.
    #[arg(long, default_value_t = 20.0)]
    pub kube_api_qps: f32,
    /// Requests to the Kubernetes API allowed in a burst above the QPS, per client.
    #[arg(long, default_value_t = 30)]
    pub kube_api_burst: u32,
}

/// Go's `time.ParseDuration` for the forms flags use: one or more `<number><unit>`, unit one of `ns`, `us`
/// (`µs`), `ms`, `s`, `m`, `h`; or a bare `0`.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}: expected e.g. 15s, 500ms, 5m0s or 1h30m");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut rest = s;
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * seconds;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// The checked settings the binary runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub controllers: Vec<ControllerName>,
    pub cloud: CloudConfig,
}

impl Args {
    /// Check the flags and read the cloud config; every error says what to fix.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        if self.cloud_provider.is_empty() {
            return Err(flag("--cloud-provider cannot be empty: set --cloud-provider=fakecloud"));
        }
        if self.cloud_provider != crate::cloud::fakecloud::PROVIDER_NAME {
            return Err(flag(format!(
                "--cloud-provider {:?} is not known; this CCM serves --cloud-provider=fakecloud",
                self.cloud_provider
            )));
        }
        if self.node_monitor_period.is_zero() || self.node_status_update_frequency.is_zero() {
            return Err(flag("--node-monitor-period and --node-status-update-frequency must be above zero"));
        }
        if self.concurrent_node_syncs == 0 || self.concurrent_service_syncs == 0 {
            return Err(flag("--concurrent-node-syncs and --concurrent-service-syncs must be at least 1"));
        }
        if self.kube_api_qps.is_nan() || self.kube_api_qps <= 0.0 || self.kube_api_burst == 0 {
            return Err(flag("--kube-api-qps must be above zero and --kube-api-burst at least 1"));
        }
        if self.leader_elect {
            self.validate_leader_election()?;
        }
        let controllers = crate::controllers::enabled(&self.controllers).map_err(flag)?;
        let path = self.cloud_config.as_deref().ok_or_else(|| {
            flag("--cloud-config is required: a YAML file with the emulator's endpoint and token (see --help)")
        })?;
        let cloud = CloudConfig::load(path).map_err(|e| ConfigError::CloudConfig { path: e.path, reason: e.reason })?;
        Ok(Settings { controllers, cloud })
    }

    /// Upstream's `ValidateLeaderElectionConfiguration` and lock-type check.
    fn validate_leader_election(&self) -> Result<(), ConfigError> {
        let (lease, renew, retry) =
            (self.leader_elect_lease_duration, self.leader_elect_renew_deadline, self.leader_elect_retry_period);
        if lease.is_zero() || renew.is_zero() || retry.is_zero() {
            return Err(flag("--leader-elect-lease-duration, -renew-deadline and -retry-period must be above zero"));
        }
        if lease <= renew {
            return Err(flag(format!(
                "--leader-elect-lease-duration ({lease:?}) must be greater than --leader-elect-renew-deadline ({renew:?})"
            )));
        }
        if renew.as_secs_f64() <= crate::client_go::leader::JITTER_FACTOR * retry.as_secs_f64() {
            return Err(flag(format!(
                "--leader-elect-renew-deadline ({renew:?}) must be greater than {} × --leader-elect-retry-period ({retry:?})",
                crate::client_go::leader::JITTER_FACTOR
            )));
        }
        if self.leader_elect_resource_lock != "leases" {
            return Err(flag(format!(
                "--leader-elect-resource-lock {:?} is not supported: use leases",
                self.leader_elect_resource_lock
            )));
        }
        if self.leader_elect_resource_name.is_empty() || self.leader_elect_resource_namespace.is_empty() {
            return Err(flag("--leader-elect-resource-name and --leader-elect-resource-namespace cannot be empty"));
        }
        Ok(())
    }

    /// `--cluster-cidr`, parsed strictly as upstream does: one CIDR, or two of different IP families. Empty or
    /// invalid is an error (fatal when the route controller is to run).
    pub fn cluster_cidrs(&self) -> Result<Vec<ipnet::IpNet>, ConfigError> {
        let bad = |why: String| flag(format!("--cluster-cidr {:?}: {why}", self.cluster_cidr));
        if self.cluster_cidr.trim().is_empty() {
            return Err(bad(
                "the route controller needs the cluster's pod range (or --configure-cloud-routes=false)".into()
            ));
        }
        let cidrs: Vec<ipnet::IpNet> = self
            .cluster_cidr
            .split(',')
            .map(|c| c.trim().parse().map_err(|e| bad(format!("{c:?} is not a CIDR: {e}"))))
            .collect::<Result<_, _>>()?;
        match cidrs.as_slice() {
            [_] => Ok(cidrs),
            [a, b] if matches!(a, ipnet::IpNet::V4(_)) != matches!(b, ipnet::IpNet::V4(_)) => Ok(cidrs),
            _ => Err(bad("give one CIDR, or two of different IP families".into())),
        }
    }

    /// Workers for the periodic address refresh (`--concurrent-node-status-updates`, 0 = the sync workers).
    pub fn status_update_workers(&self) -> usize {
        usize::from(if self.concurrent_node_status_updates == 0 {
            self.concurrent_node_syncs
        } else {
            self.concurrent_node_status_updates
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["fakecloud-ccm", "--cloud-provider", "fakecloud"];
        v.extend_from_slice(extra);
        Args::try_parse_from(v).unwrap()
    }

    #[test]
    fn defaults_are_upstreams() {
        let a = args(&[]);
        assert_eq!(a.cluster_name, "kubernetes");
        assert_eq!(a.controllers, ["*"]);
        assert!(a.leader_elect);
        assert_eq!(
            (a.leader_elect_lease_duration, a.leader_elect_renew_deadline, a.leader_elect_retry_period),
            (Duration::from_secs(15), Duration::from_secs(10), Duration::from_secs(2))
        );
        assert_eq!(
            (a.leader_elect_resource_lock.as_str(), a.leader_elect_resource_name.as_str()),
            ("leases", "cloud-controller-manager")
        );
        assert_eq!(a.leader_elect_resource_namespace, "kube-system");
        assert_eq!(a.secure_port, 10258);
        assert_eq!(a.node_monitor_period, Duration::from_secs(5));
        assert_eq!(a.node_status_update_frequency, Duration::from_secs(300));
        assert_eq!((a.concurrent_node_syncs, a.status_update_workers()), (1, 1));
        assert_eq!((a.kube_api_qps, a.kube_api_burst), (20.0, 30));
    }

    #[test]
    fn bool_flags_take_go_forms() {
        assert!(!args(&["--leader-elect=false"]).leader_elect);
        assert!(args(&["--leader-elect"]).leader_elect);
        assert!(args(&["--leader-elect=true"]).leader_elect);
        // pflag does not take the value as a separate word either.
        assert!(Args::try_parse_from(["x", "--leader-elect", "false"]).is_err());
    }

    #[test]
    fn go_durations() {
        let d = |s| parse_go_duration(s);
        assert_eq!(d("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(d("5m0s"), Ok(Duration::from_secs(300)));
        assert_eq!(d("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(d("0"), Ok(Duration::ZERO));
        for bad in ["", "5", "5x", "s", "-1s", "1.2.3s"] {
            assert!(d(bad).is_err(), "{bad:?}");
        }
        assert_eq!(args(&["--node-monitor-period=250ms"]).node_monitor_period, Duration::from_millis(250));
    }

    #[test]
    fn bad_flags_say_what_to_fix() {
        let msg = |a: Args| a.validate().unwrap_err().to_string();
        let mut a = args(&[]);
        a.cloud_provider = String::new();
        assert!(msg(a).contains("--cloud-provider cannot be empty"));
        let mut a = args(&[]);
        a.cloud_provider = "aws".into();
        assert!(msg(a).contains("\"aws\" is not known"));
        assert!(msg(args(&["--controllers", "*,bogus"])).contains("\"bogus\" is not in the list of known controllers"));
        assert!(msg(args(&["--leader-elect-renew-deadline=20s"])).contains("must be greater than"));
        assert!(msg(args(&["--leader-elect-retry-period=9s"])).contains("1.2 × --leader-elect-retry-period"));
        assert!(msg(args(&["--leader-elect-resource-lock=endpoints"])).contains("use leases"));
        // Leader election flags are not checked when it is off.
        assert!(
            msg(args(&["--leader-elect=false", "--leader-elect-renew-deadline=20s"]))
                .contains("--cloud-config is required")
        );
        assert!(msg(args(&["--kube-api-qps=0"])).contains("--kube-api-qps"));
        assert!(msg(args(&["--cloud-config=/nonexistent/c.yaml"])).contains("cannot read it"));
    }

    #[test]
    fn cluster_cidr_is_parsed_strictly() {
        let c = |v: &str| args(&[&format!("--cluster-cidr={v}")]).cluster_cidrs();
        assert_eq!(c("10.244.0.0/16").unwrap().len(), 1);
        assert_eq!(c("10.244.0.0/16,fd00::/48").unwrap().len(), 2);
        assert!(c("").is_err());
        assert!(c("10.244.0.0/16,10.245.0.0/16").is_err(), "two of one family");
        assert!(c("10.244.0.0/16,fd00::/48,10.1.0.0/16").is_err());
        assert!(c("10.244.0.0").unwrap_err().to_string().contains("is not a CIDR"));
        assert!(args(&[]).configure_cloud_routes);
        assert!(!args(&["--configure-cloud-routes=false"]).configure_cloud_routes);
        assert_eq!(args(&[]).route_reconciliation_period, Duration::from_secs(10));
    }
}

//! Which cluster the conformance suite runs against, chosen by the environment:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `FAKECLOUD_E2E_BACKEND` | `local`: every case starts its own control plane, emulator and CCM; `existing`: the cluster below (kind: `make e2e-kind`) | `local` |
//! | `FAKECLOUD_E2E_KUBECONFIG` | the cluster, as its admin | `KUBECONFIG` |
//! | `FAKECLOUD_E2E_EMULATOR` | the emulator's URL, as the suite reaches it | `FAKECLOUD_ENDPOINT` |
//! | `FAKECLOUD_ADMIN_TOKEN` | the emulator's admin token | from `FAKECLOUD_E2E_CREDENTIALS` |
//! | `FAKECLOUD_E2E_CREDENTIALS` | a credentials file as `fakecloud serve` writes it | — |
//! | `FAKECLOUD_E2E_CCM_NAMESPACE`, `FAKECLOUD_E2E_CCM_LEASE` | where the CCM's leader-election Lease is | `kube-system`, `cloud-controller-manager` |
//! | `FAKECLOUD_E2E_CCM_PODS` | a label selector for the CCM's pods (their logs are shown when a case fails) | `app.kubernetes.io/name=fakecloud-upstream-ccm` with `FAKECLOUD_E2E_CCM=upstream`, `…=fakecloud-aws-ccm` with `aws`, else `app.kubernetes.io/name=fakecloud-ccm` |
//! | `FAKECLOUD_E2E_CLUSTER_NAME` | the CCM's `--cluster-name` | `kubernetes` |
//! | `FAKECLOUD_E2E_NODE_GRACE` | kube-controller-manager's `--node-monitor-grace-period` | `50s` |
//! | `FAKECLOUD_E2E_NODE_MONITOR_PERIOD`, `FAKECLOUD_E2E_ROUTE_PERIOD` | the CCM's `--node-monitor-period`, `--route-reconciliation-period` | `5s`, `10s` |
//! | `FAKECLOUD_E2E_CCM` | the CCM the local backend runs: `fakecloud` (fakecloud-ccm), `upstream` (upstream's cloud-controller-manager with fakecloud's Go provider, at `FAKECLOUD_E2E_UPSTREAM_CCM`), `aws` (cloud-provider-aws on the emulator's AWS face, at `FAKECLOUD_AWS_CCM`), or the path of a CCM binary of your own, given fakecloud-ccm's flags; on an existing cluster, the CCM deployed there (`make e2e-kind` sets it) | `fakecloud` |
//! | `FAKECLOUD_E2E_UPSTREAM_CCM` | the fakecloud-upstream-ccm binary, as `scripts/build-upstream-ccm.sh` prints it | — |
//! | `FAKECLOUD_AWS_CCM`, `FAKECLOUD_AWS_CLI` | with `FAKECLOUD_E2E_CCM=aws` locally: cloud-provider-aws and the AWS CLI, as `make aws-ccm` and `make aws-clients` print them (`make e2e-aws` sets both); on an existing cluster the AWS CLI only | — |
//! | `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION` | with `FAKECLOUD_E2E_CCM=aws` on an existing cluster: the account's key pair and region, as the AWS CLI reads them (`make e2e-kind` sources them from the cluster's credentials file) | — |
//! | `FAKECLOUD_E2E_DNS` | the emulator's DNS address (`fakecloud serve --dns-listen`), as the suite reaches it: the load balancer cases resolve their DNS names there | `FAKECLOUD_DNS` |
//! | `FAKECLOUD_E2E_EMULATOR_KILL`, `FAKECLOUD_E2E_EMULATOR_START` | shell commands that SIGKILL the emulator and start it again on its state (without them, the case that needs it is skipped) | — |
//!
//! On an existing cluster the CCM must be deployed with the emulator's *user* token (its calls are the audit
//! log's `user` ones) and leader election on; the suite adds simulated machines of its own (tagged, with a
//! taint that keeps real pods off them) and removes them, its namespaces and its faults after each case.

use std::path::PathBuf;
use std::time::Duration;

use fakecloud_api::{ENV_ADMIN_TOKEN, ENV_ENDPOINT};
use fakecloud_ccm::config::parse_go_duration;
use fakecloud_controlplane::aws_cluster::AwsCli;

/// Which CCM the local backend runs; every one but cloud-provider-aws gets fakecloud-ccm's flags
/// (`--cloud-provider=fakecloud`, `--cloud-config`, `--kubeconfig`, `--cluster-cidr`, `--secure-port`, the periods
/// and leader election), which upstream's command accepts too; cloud-provider-aws gets its own
/// (`composition::AwsCcm`) and the same periods and leader election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalCcm {
    /// fakecloud-ccm, the case's own build of it.
    Fakecloud,
    /// Upstream's cloud-controller-manager with fakecloud's Go provider (ccm-upstream/), at this path.
    Upstream(PathBuf),
    /// cloud-provider-aws (`make aws-ccm`, unmodified) on the emulator's AWS face, its cluster's network tagged
    /// with the AWS CLI (`make aws-clients`) at `cli`.
    Aws { ccm: PathBuf, cli: PathBuf },
    /// A CCM binary of the user's own.
    Command(PathBuf),
}

impl LocalCcm {
    pub fn from_env() -> Self {
        match std::env::var("FAKECLOUD_E2E_CCM").ok().filter(|v| !v.is_empty()).as_deref() {
            None | Some("fakecloud") => Self::Fakecloud,
            Some("upstream") => match std::env::var_os("FAKECLOUD_E2E_UPSTREAM_CCM").filter(|v| !v.is_empty()) {
                Some(bin) => Self::Upstream(bin.into()),
                None => panic!(
                    "FAKECLOUD_E2E_CCM=upstream needs FAKECLOUD_E2E_UPSTREAM_CCM: the path that \
                     scripts/build-upstream-ccm.sh prints"
                ),
            },
            Some("aws") => {
                let need = |name: &str, what: &str| -> PathBuf {
                    var(name).map(Into::into).unwrap_or_else(|| {
                        panic!("FAKECLOUD_E2E_CCM=aws needs {name}: the path of {what} (make e2e-aws sets it)")
                    })
                };
                Self::Aws {
                    ccm: need("FAKECLOUD_AWS_CCM", "cloud-provider-aws, as `make aws-ccm` prints it"),
                    cli: need("FAKECLOUD_AWS_CLI", "the AWS CLI, `bin/aws` in the venv `make aws-clients` prints"),
                }
            }
            Some(command) => Self::Command(command.into()),
        }
    }

    /// The binary to run: `fakecloud_ccm` (the case's build of fakecloud-ccm) unless another CCM is chosen.
    pub fn binary(&self, fakecloud_ccm: &str) -> PathBuf {
        match self {
            Self::Fakecloud => fakecloud_ccm.into(),
            Self::Upstream(bin) | Self::Command(bin) | Self::Aws { ccm: bin, .. } => bin.clone(),
        }
    }

    /// Flags beside fakecloud-ccm's: upstream's logs say what its controllers do only from `--v=2` on.
    pub fn extra_args(&self) -> &'static [&'static str] {
        match self {
            Self::Upstream(_) => &["--v=2"],
            // (cloud-provider-aws's flags have it: `composition::AwsCcm`.)
            Self::Fakecloud | Self::Command(_) | Self::Aws { .. } => &[],
        }
    }
}

#[derive(Debug, Clone)]
pub enum Backend {
    Local,
    Existing(Box<Existing>),
}

/// A cluster someone else started, with the emulator and a CCM deployed.
#[derive(Debug, Clone)]
pub struct Existing {
    pub kubeconfig: PathBuf,
    pub emulator: String,
    pub admin_token: String,
    /// The CCM deployed (`FAKECLOUD_E2E_CCM`: `fakecloud`, `upstream` or another name), as failure reports say.
    pub ccm: String,
    pub ccm_namespace: String,
    pub ccm_lease: String,
    pub ccm_pods: String,
    pub cluster_name: String,
    pub timing: Timing,
    pub emulator_kill: Option<String>,
    pub emulator_start: Option<String>,
    pub dns: Option<String>,
    /// With `FAKECLOUD_E2E_CCM=aws`.
    pub aws: Option<AwsAccess>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn duration(name: &str, default: &str) -> Duration {
    let value = var(name).unwrap_or_else(|| default.to_string());
    parse_go_duration(&value).unwrap_or_else(|e| panic!("{name}={value:?}: {e}"))
}

impl Backend {
    /// From the environment; a setting that is missing or wrong panics with what to set.
    pub fn from_env() -> Self {
        match var("FAKECLOUD_E2E_BACKEND").as_deref() {
            None | Some("local") => Self::Local,
            Some("existing") => Self::Existing(Box::new(Existing::from_env())),
            Some(other) => panic!("FAKECLOUD_E2E_BACKEND={other:?}: use `local` (the default) or `existing`"),
        }
    }
}

impl Existing {
    fn from_env() -> Self {
        let need = |what: &str, vars: &[&str]| {
            vars.iter()
                .find_map(|v| var(v))
                .unwrap_or_else(|| panic!("FAKECLOUD_E2E_BACKEND=existing needs {what}: set {}", vars.join(" or ")))
        };
        let kubeconfig = need("the cluster's kubeconfig", &["FAKECLOUD_E2E_KUBECONFIG", "KUBECONFIG"]).into();
        let emulator = need("the emulator's URL", &["FAKECLOUD_E2E_EMULATOR", ENV_ENDPOINT]);
        let admin_token = var(ENV_ADMIN_TOKEN).or_else(|| {
            let file = var("FAKECLOUD_E2E_CREDENTIALS")?;
            let text =
                std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("FAKECLOUD_E2E_CREDENTIALS={file}: {e}"));
            fakecloud_api::credential(&text, ENV_ADMIN_TOKEN)
        });
        let admin_token = admin_token.unwrap_or_else(|| {
            panic!(
                "FAKECLOUD_E2E_BACKEND=existing needs the emulator's admin token: set {ENV_ADMIN_TOKEN}, or \
                 FAKECLOUD_E2E_CREDENTIALS to the credentials file"
            )
        });
        let ccm = var("FAKECLOUD_E2E_CCM").unwrap_or_else(|| "fakecloud".into());
        // The pods of ccm/deploy/ and of its overlays ccm-upstream/deploy/ and ccm-aws/deploy/.
        let pods = match ccm.as_str() {
            "upstream" => "fakecloud-upstream-ccm",
            "aws" => "fakecloud-aws-ccm",
            _ => "fakecloud-ccm",
        };
        let aws = (ccm == "aws").then(|| AwsAccess::from_env(&emulator));
        Self {
            kubeconfig,
            emulator,
            admin_token,
            ccm_pods: var("FAKECLOUD_E2E_CCM_PODS").unwrap_or_else(|| format!("app.kubernetes.io/name={pods}")),
            ccm,
            ccm_namespace: var("FAKECLOUD_E2E_CCM_NAMESPACE").unwrap_or_else(|| "kube-system".into()),
            ccm_lease: var("FAKECLOUD_E2E_CCM_LEASE").unwrap_or_else(|| "cloud-controller-manager".into()),
            cluster_name: var("FAKECLOUD_E2E_CLUSTER_NAME").unwrap_or_else(|| "kubernetes".into()),
            timing: Timing {
                node_grace: duration("FAKECLOUD_E2E_NODE_GRACE", "50s"),
                node_monitor: duration("FAKECLOUD_E2E_NODE_MONITOR_PERIOD", "5s"),
                route_period: duration("FAKECLOUD_E2E_ROUTE_PERIOD", "10s"),
            },
            emulator_kill: var("FAKECLOUD_E2E_EMULATOR_KILL"),
            emulator_start: var("FAKECLOUD_E2E_EMULATOR_START"),
            dns: var("FAKECLOUD_E2E_DNS").or_else(|| var("FAKECLOUD_DNS")),
            aws,
        }
    }
}

/// A cluster set up for cloud-provider-aws: the account's key pair, which its CCMs sign with, and the AWS CLI
/// pointed at the face with it (the cases read what the CCM made on the face with it).
#[derive(Debug, Clone)]
pub struct AwsAccess {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub cli: PathBuf,
    /// The face, as the suite reaches it.
    pub url: String,
    pub region: String,
}

impl AwsAccess {
    /// On an existing cluster: the AWS CLI at `FAKECLOUD_AWS_CLI`, and the key pair and region the environment
    /// gives the AWS CLI (`make e2e-kind` sources them from the cluster's credentials file).
    fn from_env(url: &str) -> Self {
        let need = |name: &str| {
            var(name).unwrap_or_else(|| {
                panic!("FAKECLOUD_E2E_CCM=aws on an existing cluster needs {name} (make e2e-kind sets it)")
            })
        };
        Self {
            access_key_id: need("AWS_ACCESS_KEY_ID"),
            secret_access_key: need("AWS_SECRET_ACCESS_KEY"),
            cli: need("FAKECLOUD_AWS_CLI").into(),
            url: url.to_string(),
            region: need("AWS_DEFAULT_REGION"),
        }
    }

    pub fn cli(&self) -> AwsCli<'_> {
        let keys = (self.access_key_id.as_str(), self.secret_access_key.as_str());
        AwsCli { path: &self.cli, url: &self.url, region: &self.region, keys }
    }
}

/// How fast the cluster and its CCM react, for the cases' patience.
#[derive(Debug, Clone)]
pub struct Timing {
    /// kube-controller-manager's `--node-monitor-grace-period`: a silent kubelet's Node turns NotReady after it.
    pub node_grace: Duration,
    /// The CCM's `--node-monitor-period`.
    pub node_monitor: Duration,
    /// The CCM's `--route-reconciliation-period`.
    pub route_period: Duration,
}

impl Timing {
    /// From a machine falling silent to the CCM having acted on its NotReady Node, with room for a loaded host
    /// ([`crate::HANG`]: only a hang takes longer).
    pub fn node_loss(&self) -> Duration {
        self.node_grace + 2 * self.node_monitor + crate::HANG
    }

    /// From a change to the route controller having acted on it, with room for a loaded host ([`crate::HANG`]).
    pub fn routes(&self) -> Duration {
        3 * self.route_period + crate::HANG
    }
}

//! Flags (upstream names and defaults where they apply) and the `--cloud-config` file.
//!
//! The cloud config is YAML:
//!
//! ```yaml
//! endpoint: http://127.0.0.1:8787      # the emulator's URL
//! token-file: /etc/fakecloud/token      # a file holding the user token (or `token: <value>`)
//! region: local-1                       # optional: refuse to start against another region
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde::Deserialize;

use crate::controllers::ControllerName;

#[derive(Debug, Parser)]
#[command(name = "fakecloud-ccm", version, about = "A cloud-controller-manager for the fakecloud emulator", long_about = None)]
pub struct Args {
    /// Kubeconfig (default: in-cluster config, else KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The cloud provider; only `fakecloud` is known.
    #[arg(long)]
    pub cloud_provider: String,
    /// The cloud config file (YAML: endpoint, token or token-file, region).
    #[arg(long)]
    pub cloud_config: PathBuf,
    /// Name of the cluster, for cloud resources' names.
    #[arg(long, default_value = "kubernetes")]
    pub cluster_name: String,
    /// Controllers to run: `*` for all, names or aliases (cloud-node, cloud-node-lifecycle, service, route),
    /// `-name` to disable one. Comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// How often the lifecycle controller checks NotReady nodes against the cloud.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub node_monitor_period: Duration,
    /// How often initialized nodes' addresses are refreshed from the cloud.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    pub node_status_update_frequency: Duration,
    /// Nodes initialized at once.
    #[arg(long, default_value_t = 1)]
    pub concurrent_node_syncs: u16,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CloudConfig {
    pub endpoint: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub region: Option<String>,
}

impl CloudConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--cloud-config {}: cannot read it", path.display()))?;
        let cfg: Self =
            serde_saphyr::from_str(&text).map_err(|e| anyhow::anyhow!("--cloud-config {}: {e}", path.display()))?;
        if cfg.token.is_some() == cfg.token_file.is_some() {
            bail!("--cloud-config {}: give exactly one of token and token-file", path.display());
        }
        Ok(cfg)
    }

    pub fn token(&self) -> Result<String> {
        match (&self.token, &self.token_file) {
            (Some(t), _) => Ok(t.clone()),
            (None, Some(f)) => Ok(std::fs::read_to_string(f)
                .with_context(|| format!("token-file {}: cannot read it", f.display()))?
                .trim()
                .to_string()),
            (None, None) => bail!("the cloud config has no token"),
        }
    }
}

impl Args {
    /// Check what can be checked without the cloud; say what to fix.
    pub fn validate(&self) -> Result<Vec<ControllerName>> {
        if self.cloud_provider != crate::cloud::fakecloud::PROVIDER_NAME {
            bail!("--cloud-provider {:?} is not known; this CCM serves `fakecloud`", self.cloud_provider);
        }
        if self.node_monitor_period.is_zero() || self.node_status_update_frequency.is_zero() {
            bail!("--node-monitor-period and --node-status-update-frequency must be above zero");
        }
        if self.concurrent_node_syncs == 0 {
            bail!("--concurrent-node-syncs must be at least 1");
        }
        crate::controllers::enabled(&self.controllers).map_err(anyhow::Error::msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["fakecloud-ccm", "--cloud-provider", "fakecloud", "--cloud-config", "/x"];
        v.extend_from_slice(extra);
        Args::try_parse_from(v).unwrap()
    }

    #[test]
    fn defaults_are_upstreams() {
        let a = args(&[]);
        assert_eq!(a.cluster_name, "kubernetes");
        assert_eq!(a.node_monitor_period, Duration::from_secs(5));
        assert_eq!(a.node_status_update_frequency, Duration::from_secs(300));
        assert_eq!(a.controllers, ["*"]);
    }

    #[test]
    fn bad_flags_say_what_to_fix() {
        let mut a = args(&[]);
        a.cloud_provider = "aws".into();
        assert!(a.validate().unwrap_err().to_string().contains("not known"));
        let a = args(&["--controllers", "*,bogus"]);
        assert!(a.validate().unwrap_err().to_string().contains("\"bogus\" is not in the list of known controllers"));
    }

    #[test]
    fn cloud_config_needs_one_token() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.yaml");
        std::fs::write(&p, "endpoint: http://x\n").unwrap();
        assert!(CloudConfig::load(&p).unwrap_err().to_string().contains("exactly one of token"));
        std::fs::write(&p, "endpoint: http://x\ntoken: t\nregoin: r\n").unwrap();
        assert!(CloudConfig::load(&p).is_err(), "unknown keys are refused");
        std::fs::write(&p, "endpoint: http://x\ntoken: t\n").unwrap();
        assert_eq!(CloudConfig::load(&p).unwrap().token().unwrap(), "t");
    }
}

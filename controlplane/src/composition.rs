//! How the stack's services are started, written once for `stack up` (the supervisor in this crate's binary) and
//! for the e2e suite's local clusters (fakecloud-e2e's `local.rs`): the emulator's command line and a CCM's. The
//! cloud config a CCM reads is [`fakecloud_api::CloudConfig`], written where it is parsed.
//!
//! The e2e crate's tests parse both command lines with the `fakecloud` binary's and fakecloud-ccm's own flag
//! definitions, so a renamed flag fails a test there rather than a stack.

use std::path::Path;

/// `fakecloud serve` on a SQLite file.
#[derive(Debug, Clone)]
pub struct Emulator<'a> {
    /// `host:port` on loopback.
    pub listen: &'a str,
    pub db: &'a Path,
    /// The user and the admin token. Without them the emulator reads its credentials file beside the database,
    /// or generates one there.
    pub tokens: Option<(&'a str, &'a str)>,
}

impl Emulator<'_> {
    /// Its arguments, from `serve` on.
    pub fn args(&self) -> Vec<String> {
        let mut args =
            vec!["serve".to_string(), format!("--listen={}", self.listen), format!("--db={}", self.db.display())];
        if let Some((user, admin)) = self.tokens {
            args.extend([format!("--user-token={user}"), format!("--admin-token={admin}")]);
        }
        args
    }
}

/// A CCM (fakecloud-ccm, or upstream's `k8s.io/cloud-provider` build: the flags are upstream's) on the emulator.
#[derive(Debug, Clone)]
pub struct Ccm<'a> {
    /// The [`fakecloud_api::CloudConfig`] file.
    pub cloud_config: &'a Path,
    pub kubeconfig: &'a Path,
    /// The controller manager's `--cluster-cidr`, which the route controller reads too.
    pub cluster_cidr: &'a str,
    /// Its HTTPS port (`/healthz`, `/metrics`) on 127.0.0.1.
    pub port: u16,
}

impl Ccm<'_> {
    pub fn args(&self) -> Vec<String> {
        vec![
            "--cloud-provider=fakecloud".to_string(),
            format!("--cloud-config={}", self.cloud_config.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--cluster-cidr={}", self.cluster_cidr),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={}", self.port),
        ]
    }
}

//! kind and kubectl as a cluster's steps run them.

use std::path::{Path, PathBuf};

use crate::docker::Docker;
use crate::run::{Cmd, cmd};
use crate::settings::Settings;

/// kind and kubectl for one cluster: the engine, the binaries kind-up built on PATH, the cluster's network.
pub struct Tools<'a> {
    pub s: &'a Settings,
    pub docker: Docker,
    path: String,
}

impl<'a> Tools<'a> {
    /// `extra_bin`: directories put first on PATH beside the kind binaries (the control plane's kubectl).
    pub fn new(s: &'a Settings, docker: Docker, extra_bin: &[&Path]) -> Self {
        let mut dirs: Vec<PathBuf> = vec![s.kind_bin_dir.clone()];
        dirs.extend(extra_bin.iter().map(|p| p.to_path_buf()));
        let mut path = std::env::join_paths(&dirs).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        if let Ok(rest) = std::env::var("PATH") {
            path = format!("{path}:{rest}");
        }
        Tools { s, docker, path }
    }

    fn with_env(&self, c: Cmd) -> Cmd {
        let c = c.env("PATH", &self.path).envs(self.s.cluster.kind_env());
        match &self.docker.host {
            Some(h) => c.env("DOCKER_HOST", h),
            None => c,
        }
    }

    pub fn kind<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(&self, args: I) -> Cmd {
        self.with_env(cmd("kind", args))
    }

    pub fn kubectl<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(&self, args: I) -> Cmd {
        self.with_env(cmd("kubectl", args)).env("KUBECONFIG", self.s.cluster.kubeconfig())
    }

    /// Whether kind cluster `name` runs on this engine.
    pub fn cluster_exists(&self, name: &str) -> bool {
        self.kind(["get", "clusters"]).output().is_ok_and(|out| out.lines().any(|l| l == name))
    }
}

//! Where the kind path caches and keeps things, and the names of one cluster's parts: read once from the
//! environment, so every step (and every script, through `fakecloud-kind env`) agrees on them.
//!
//! ```text
//! $cache/engine/moby-<v>-runc-<v>/bin   dockerd, docker-proxy, runc built from the Go module proxy
//! $cache/engine/data                    the private engine's data-root (images survive between runs)
//! $cache/engine/run                     its socket, pid file, exec-root and log (one engine per machine)
//! $cache/kind/<k8s version>/bin         kind, kubelet, kubeadm, kube-proxy, kube-scheduler, crictl, coredns
//! $cache/kind/rootfs                    Debian root filesystems made with debootstrap
//! $cache/k8s/<k8s version>/bin          kube-apiserver, kube-controller-manager, etcd, kubectl (control plane)
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::host::env_setting;

/// The repository under which the kubeadm images are preloaded into the offline node image (no registry
/// behind it).
pub const IMAGE_REPOSITORY: &str = "fakecloud.local";
/// The second cluster of `make e2e-kind-both`, for upstream's CCM.
pub const UPSTREAM_CLUSTER: &str = "fakecloud-upstream";

/// The CCM the kind path deploys (`FAKECLOUD_KIND_CCM`). All run as the same ServiceAccount
/// (ccm/deploy/rbac.yaml), with the same cloud-config Secret and Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ccm {
    /// fakecloud-ccm (ccm/deploy/).
    Fakecloud,
    /// upstream's cloud-controller-manager with fakecloud's Go provider (ccm-upstream/deploy/, an overlay of
    /// the same Deployment).
    Upstream,
    /// cloud-provider-aws, unmodified, on the emulator's AWS face (ccm-aws/deploy/, the same Deployment again).
    Aws,
}

impl Ccm {
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "fakecloud" => Ok(Ccm::Fakecloud),
            "upstream" => Ok(Ccm::Upstream),
            "aws" => Ok(Ccm::Aws),
            other => bail!("FAKECLOUD_KIND_CCM must be fakecloud, upstream or aws, not '{other}'"),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Ccm::Fakecloud => "fakecloud",
            Ccm::Upstream => "upstream",
            Ccm::Aws => "aws",
        }
    }
    /// Its image, tagged `dev` by the image build.
    pub fn image(self) -> &'static str {
        match self {
            Ccm::Fakecloud => "fakecloud/ccm",
            Ccm::Upstream => "fakecloud/upstream-ccm",
            Ccm::Aws => "fakecloud/aws-ccm",
        }
    }
    /// Its kustomize overlay of ccm/deploy/deployment.yaml, for the Go CCMs; fakecloud-ccm's is that file.
    pub fn overlay(self) -> Option<&'static str> {
        match self {
            Ccm::Fakecloud => None,
            Ccm::Upstream => Some("ccm-upstream/deploy"),
            Ccm::Aws => Some("ccm-aws/deploy"),
        }
    }
    /// Its Deployment in kube-system (and the `app.kubernetes.io/name` of its pods).
    pub fn deployment(self) -> &'static str {
        match self {
            Ccm::Fakecloud => "fakecloud-ccm",
            Ccm::Upstream => "fakecloud-upstream-ccm",
            Ccm::Aws => "fakecloud-aws-ccm",
        }
    }
}

/// The cargo profile of the binaries in the project's images and of the CLI kind-up runs
/// (`FAKECLOUD_IMAGE_PROFILE`): release, or dev for a quicker debug build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Release,
    Dev,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Dev => "dev",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub repo: PathBuf,
    pub cache: PathBuf,
    /// The Go module that pins Kubernetes for the control plane; the kind nodes run the same release.
    pub k8s_module_dir: PathBuf,
    pub k8s_version: String,
    pub kind_bin_dir: PathBuf,
    pub engine_root: PathBuf,
    pub engine_run_dir: PathBuf,
    pub engine_socket: PathBuf,
    /// `fakecloud/kind-node:<k8s version>`.
    pub node_image: String,
    pub image_profile: Profile,
    /// Where cargo puts the binaries of `image_profile`.
    pub image_target_dir: PathBuf,
    /// FAKECLOUD_IMAGE_PREBUILT: the caller has just built the workspace's binaries (CI, before its tests'
    /// build starts beside the kind path; cargo would wait for that build's lock only to find nothing to do).
    pub prebuilt: bool,
    pub ccm: Ccm,
    pub cluster: Cluster,
    /// The emulator's port on the host's loopback (FAKECLOUD_PORT).
    pub port: u16,
}

/// One cluster's names (KIND_CLUSTER_NAME): the default cluster `fakecloud` keeps the plain ones; any other
/// gets its own kind network, emulator container and run directory, so two clusters (one per CCM: make
/// e2e-kind-both) run side by side on one engine, each with its own cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub name: String,
    pub network: String,
    pub emulator: String,
    pub run_root: PathBuf,
}

impl Cluster {
    /// `network` is KIND_EXPERIMENTAL_DOCKER_NETWORK, `run_dir` FAKECLOUD_RUN_DIR, when set.
    pub fn named(name: &str, repo: &Path, network: Option<String>, run_dir: Option<PathBuf>) -> Self {
        let (default_network, emulator, default_run) = if name == "fakecloud" {
            ("kind".to_string(), "fakecloud-emulator".to_string(), repo.join(".run"))
        } else {
            (format!("kind-{name}"), format!("{name}-emulator"), repo.join(".run").join(name))
        };
        Cluster {
            name: name.to_string(),
            network: network.unwrap_or(default_network),
            emulator,
            run_root: run_dir.unwrap_or(default_run),
        }
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.run_root.join("kind.kubeconfig")
    }
    pub fn credentials(&self) -> PathBuf {
        self.run_root.join("kind.credentials")
    }
    /// kind-up records the CCM it deployed here, so the suite judges the CCM that runs.
    pub fn ccm_file(&self) -> PathBuf {
        self.run_root.join("kind.ccm")
    }
    /// The kind config as kind-up gave it to kind (what the cluster was made from).
    pub fn config_copy(&self) -> PathBuf {
        self.run_root.join("kind-config.yaml")
    }
    /// The environment a `kind` command needs to find this cluster's network: kind reads another network's
    /// name from KIND_EXPERIMENTAL_DOCKER_NETWORK (and warns that it does).
    pub fn kind_env(&self) -> Option<(&'static str, &str)> {
        (self.network != "kind").then_some(("KIND_EXPERIMENTAL_DOCKER_NETWORK", self.network.as_str()))
    }
}

impl Settings {
    /// The settings of this checkout, from the environment.
    pub fn from_env() -> anyhow::Result<Self> {
        // The binary belongs to the checkout it was built from, as the scripts did to theirs.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("the kind crate has no parent directory")?
            .to_path_buf();
        let home = env_setting("HOME").unwrap_or_else(|| "/root".into());
        let cache =
            env_setting("FAKECLOUD_CACHE").map_or_else(|| Path::new(&home).join(".cache/fakecloud"), PathBuf::from);
        let k8s_module_dir = repo.join("controlplane/upstream");
        let go_mod = k8s_module_dir.join("go.mod");
        let text = std::fs::read_to_string(&go_mod).with_context(|| format!("reading {}", go_mod.display()))?;
        let k8s_version = kubernetes_version(&text)
            .with_context(|| format!("no k8s.io/kubernetes requirement in {}", go_mod.display()))?;
        let engine_root = cache.join("engine");
        let engine_run_dir = engine_root.join("run");
        let cargo_target_dir = match env_setting("CARGO_TARGET_DIR") {
            Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
            Some(d) => repo.join(d),
            None => repo.join("target"),
        };
        let image_profile = match env_setting("FAKECLOUD_IMAGE_PROFILE").as_deref() {
            None | Some("release") => Profile::Release,
            Some("dev") => Profile::Dev,
            Some(other) => bail!("FAKECLOUD_IMAGE_PROFILE must be release or dev, not '{other}'"),
        };
        let image_target_dir = cargo_target_dir.join(match image_profile {
            Profile::Release => "release",
            Profile::Dev => "debug",
        });
        let ccm = Ccm::parse(env_setting("FAKECLOUD_KIND_CCM").as_deref().unwrap_or("fakecloud"))?;
        let cluster = Cluster::named(
            env_setting("KIND_CLUSTER_NAME").as_deref().unwrap_or("fakecloud"),
            &repo,
            env_setting("KIND_EXPERIMENTAL_DOCKER_NETWORK"),
            env_setting("FAKECLOUD_RUN_DIR").map(PathBuf::from),
        );
        let port = match env_setting("FAKECLOUD_PORT") {
            None => 8787,
            Some(p) => p.parse().map_err(|_| anyhow::anyhow!("FAKECLOUD_PORT must be a port number, not '{p}'"))?,
        };
        Ok(Settings {
            kind_bin_dir: cache.join("kind").join(&k8s_version).join("bin"),
            engine_socket: engine_run_dir.join("docker.sock"),
            node_image: format!("fakecloud/kind-node:{k8s_version}"),
            prebuilt: env_setting("FAKECLOUD_IMAGE_PREBUILT").is_some(),
            repo,
            cache,
            k8s_module_dir,
            k8s_version,
            engine_root,
            engine_run_dir,
            image_profile,
            image_target_dir,
            ccm,
            cluster,
            port,
        })
    }

    /// The same settings for another cluster of this checkout (kind-down's loop over them).
    pub fn for_cluster(&self, name: &str) -> Self {
        Settings { cluster: Cluster::named(name, &self.repo, None, None), ..self.clone() }
    }

    /// `unix://` + the private engine's socket: the DOCKER_HOST of a client of the private engine.
    pub fn private_docker_host(&self) -> String {
        format!("unix://{}", self.engine_socket.display())
    }

    /// The shell assignments `fakecloud-kind env` prints for the scripts (scripts/kind/common.sh evals them).
    pub fn shell_assignments(&self) -> Vec<(&'static str, String)> {
        let p = |p: &Path| p.display().to_string();
        vec![
            ("kind_repo_root", p(&self.repo)),
            ("cache_root", p(&self.cache)),
            ("k8s_module_dir", p(&self.k8s_module_dir)),
            ("k8s_version", self.k8s_version.clone()),
            ("kind_bin_dir", p(&self.kind_bin_dir)),
            ("engine_root", p(&self.engine_root)),
            ("engine_run_dir", p(&self.engine_run_dir)),
            ("engine_socket", p(&self.engine_socket)),
            ("kind_image_repository", IMAGE_REPOSITORY.to_string()),
            ("kind_node_image", self.node_image.clone()),
            ("image_target_dir", p(&self.image_target_dir)),
            ("image_profile", self.image_profile.name().to_string()),
            ("kind_ccm", self.ccm.name().to_string()),
            ("kind_ccm_image", self.ccm.image().to_string()),
            ("kind_ccm_deployment", self.ccm.deployment().to_string()),
            ("kind_cluster", self.cluster.name.clone()),
            ("kind_upstream_cluster", UPSTREAM_CLUSTER.to_string()),
            ("kind_network", self.cluster.network.clone()),
            ("kind_emulator", self.cluster.emulator.clone()),
            ("kind_run_root", p(&self.cluster.run_root)),
            ("kind_ccm_file", p(&self.cluster.ccm_file())),
        ]
    }
}

/// The release of `k8s.io/kubernetes` a go.mod requires (a one-line or a block `require`).
pub fn kubernetes_version(go_mod: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let first = words.next()?;
        let (module, version) =
            if first == "require" { (words.next()?, words.next()?) } else { (first, words.next()?) };
        (module == "k8s.io/kubernetes" && version.starts_with('v')).then(|| version.to_string())
    })
}

/// `s` quoted for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-:=,+@".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubernetes_release_is_read_from_either_form_of_require() {
        let block = "module x\n\ngo 1.25\n\nrequire (\n\tk8s.io/api v0.37.2\n\tk8s.io/kubernetes v1.37.2\n)\n";
        assert_eq!(kubernetes_version(block).as_deref(), Some("v1.37.2"));
        let line = "module x\nrequire k8s.io/kubernetes v1.36.0\n";
        assert_eq!(kubernetes_version(line).as_deref(), Some("v1.36.0"));
        // A replace of the module is not its requirement.
        assert_eq!(kubernetes_version("replace k8s.io/kubernetes => ../k\n"), None);
        assert_eq!(kubernetes_version("require k8s.io/kubernetes-extra v1.0.0\n"), None);
    }

    #[test]
    fn the_default_cluster_keeps_the_plain_names_and_another_gets_its_own() {
        let repo = Path::new("/src/fakecloud");
        let plain = Cluster::named("fakecloud", repo, None, None);
        assert_eq!(
            plain,
            Cluster {
                name: "fakecloud".into(),
                network: "kind".into(),
                emulator: "fakecloud-emulator".into(),
                run_root: repo.join(".run"),
            }
        );
        assert_eq!(plain.kind_env(), None);
        let other = Cluster::named("fakecloud-upstream", repo, None, None);
        assert_eq!(other.network, "kind-fakecloud-upstream");
        assert_eq!(other.emulator, "fakecloud-upstream-emulator");
        assert_eq!(other.run_root, repo.join(".run/fakecloud-upstream"));
        assert_eq!(other.kind_env(), Some(("KIND_EXPERIMENTAL_DOCKER_NETWORK", "kind-fakecloud-upstream")));
        let told = Cluster::named("fakecloud", repo, Some("mine".into()), Some("/tmp/r".into()));
        assert_eq!((told.network.as_str(), told.run_root.as_path()), ("mine", Path::new("/tmp/r")));
    }

    #[test]
    fn an_unknown_ccm_is_refused_with_the_choices() {
        assert_eq!(Ccm::parse("upstream").map(Ccm::deployment).ok(), Some("fakecloud-upstream-ccm"));
        assert_eq!(Ccm::parse("aws").map(Ccm::image).ok(), Some("fakecloud/aws-ccm"));
        assert_eq!(Ccm::parse("aws").ok().and_then(Ccm::overlay), Some("ccm-aws/deploy"));
        assert_eq!(Ccm::parse("fakecloud").ok().and_then(Ccm::overlay), None);
        let err = Ccm::parse("gce").unwrap_err().to_string();
        assert!(err.contains("fakecloud, upstream or aws") && err.contains("'gce'"), "{err}");
    }

    #[test]
    fn common_sh_declares_every_setting_env_prints() {
        let s = Settings::from_env().unwrap();
        let common = std::fs::read_to_string(s.repo.join("scripts/kind/common.sh")).unwrap();
        for (name, _) in s.shell_assignments() {
            assert!(
                name == "kind_repo_root" || common.contains(&format!("{name}=''")),
                "scripts/kind/common.sh declares {name} for shellcheck"
            );
        }
    }

    #[test]
    fn shell_quoting_survives_the_shell() {
        assert_eq!(shell_quote("/a/b-c_d.e"), "/a/b-c_d.e");
        assert_eq!(shell_quote("it's here"), r"'it'\''s here'");
        assert_eq!(shell_quote(""), "''");
    }
}

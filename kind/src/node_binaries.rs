//! What a kind node needs beyond the local control plane, built from the Go module proxy into
//! $cache/kind/<k8s version>/bin (Settings::kind_bin_dir):
//!
//! ```text
//! kubelet kubeadm kube-proxy kube-scheduler   upstream's own mains (k8s.io/kubernetes/cmd/...) at the control
//!                                             plane's release, built inside controlplane/upstream so they use
//!                                             its pinned module graph and staging replaces; stamped with the
//!                                             same version ldflags as build-control-plane.sh (k8s-ldflags.sh)
//! agnhost   upstream's e2e test server (k8s.io/kubernetes/test/images/agnhost) at the same release: the pods
//!           the suite sends load balancer traffic to (netexec answers /hostname, /clientip)
//! crictl    sigs.k8s.io/cri-tools, the release of the same minor as Kubernetes (cri-tools follows k8s minors)
//! coredns   github.com/coredns/coredns at the version kubeadm deploys (CoreDNSVersion in kubeadm's
//!           constants, read from the module cache, so the image tag and the binary agree)
//! kind      sigs.k8s.io/kind, KIND_VERSION or the newest release known to support this Kubernetes minor
//! cni/      the CNI plugins the VPC router's config uses (bridge, host-local, loopback, portmap), from
//!           github.com/containernetworking/plugins at the release kind's node image ships (its base image
//!           Dockerfile's CNI_PLUGINS_VERSION). kind's image has all but bridge; the router image carries
//!           these and installs on each node the ones it lacks (vpc-router/deploy/vpc-router.yaml)
//! ```
//!
//! kube-apiserver, kube-controller-manager, etcd and kubectl are not built here: scripts/build-control-plane.sh
//! has them (and `make test` must not pay for the ones here).
//!
//! crictl, coredns and kind are separate main modules: each is built inside its own downloaded module (its own
//! go.mod, go.sum and replace directives, exactly as its release was tested), not pulled into
//! controlplane/upstream, where MVS would mix their dependencies with Kubernetes'.
//!
//! A binary keeps what it was built from in a stamp beside it, `.NAME.version` (scripts/e2e-kind-lb.sh and
//! scripts/kind/build-e2e-test.sh read them too): one already built is skipped (a second run takes about a
//! second), one whose pinned version changed is rebuilt. Builds go to a temporary directory and are moved into
//! place when complete.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::go::Go;
use crate::host::{env_setting, is_executable};
use crate::run::{cmd, step};
use crate::settings::Settings;

/// kind v0.33.0 is the newest release in the module proxy, and its default node image is v1.37.0: it writes
/// kubeadm configs 1.37 accepts. Raise it together with the Kubernetes version in controlplane/upstream/go.mod.
const KIND_VERSION: &str = "v0.33.0";
const KUBERNETES_COMMANDS: [&str; 4] = ["kubelet", "kubeadm", "kube-proxy", "kube-scheduler"];
const CNI_PLUGINS: [&str; 4] = ["main/bridge", "ipam/host-local", "main/loopback", "meta/portmap"];

/// Where NAME's stamp is kept in `bin_dir`.
pub fn stamp_path(bin_dir: &Path, name: &str) -> PathBuf {
    bin_dir.join(format!(".{name}.version"))
}

/// Whether NAME in `bin_dir` is built from exactly `version`.
pub fn is_built(bin_dir: &Path, name: &str, version: &str) -> bool {
    is_executable(&bin_dir.join(name))
        && std::fs::read_to_string(stamp_path(bin_dir, name)).is_ok_and(|stamp| stamp.trim_end() == version)
}

/// N of a Kubernetes release v1.N.M.
fn minor_of(version: &str) -> Option<u32> {
    let mut parts = version.strip_prefix("v1.")?.split('.');
    let (minor, patch) = (parts.next()?, parts.next()?);
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (parts.next().is_none() && number(minor) && number(patch)).then(|| minor.parse().ok()).flatten()
}

/// `VAR = "v…"` in a Go source or `ARG VAR="v…"` in a Dockerfile: the first version assigned to `name`.
fn version_assigned(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.trim_start();
        let line = line.strip_prefix("ARG ").unwrap_or(line);
        let value = line.strip_prefix(name)?.trim_start().strip_prefix('=')?.trim_start().strip_prefix('"')?;
        let version = &value[..value.find('"')?];
        (version.starts_with('v') && version.as_bytes().get(1).is_some_and(u8::is_ascii_digit))
            .then(|| version.to_string())
    })
}

/// The -ldflags that stamp a Kubernetes binary with its release: scripts/kind/k8s-ldflags.sh's function, the
/// one definition build-control-plane.sh and build-upstream-ccm.sh use too.
pub fn k8s_version_ldflags(s: &Settings) -> anyhow::Result<String> {
    let script = s.repo.join("scripts/kind/k8s-ldflags.sh");
    cmd("bash", ["-c", r#"source "$1" && k8s_version_ldflags "$2""#, "bash"]).arg(&script).arg(&s.k8s_version).output()
}

struct Build<'a> {
    s: &'a Settings,
    go: Go,
    tmp: tempfile::TempDir,
}

impl Build<'_> {
    fn out(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn install(&self, name: &str, version: &str) -> anyhow::Result<()> {
        let bin = &self.s.kind_bin_dir;
        std::fs::rename(self.out(name), bin.join(name)).with_context(|| format!("installing {name}"))?;
        std::fs::write(stamp_path(bin, name), format!("{version}\n"))?;
        tracing::info!("installed {} ({version})", bin.join(name).display());
        Ok(())
    }

    /// Builds one main package inside its own module's directory in the module cache (read-only, so
    /// -mod=readonly).
    fn in_module(&self, dir: &Path, pkg: &str, out: &str, ldflags: &str) -> anyhow::Result<()> {
        self.go
            .cmd(["build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o"])
            .arg(self.out(out))
            .arg(pkg)
            .current_dir(dir)
            .env("GOWORK", "off")
            .env("CGO_ENABLED", "0")
            .run_shown()
            .with_context(|| {
                format!("go build of {pkg} in {} failed (compiler output above); nothing was installed", dir.display())
            })
    }

    fn kubernetes(&self, missing: &[&str]) -> anyhow::Result<()> {
        let packages: Vec<String> = missing.iter().map(|name| format!("k8s.io/kubernetes/cmd/{name}")).collect();
        tracing::info!(
            "building {} (kubelet is the slow one: several minutes warm, 10-20 cold on 2 cores)",
            missing.join(" ")
        );
        let v = &self.s.k8s_version;
        // One go build for all of them shares the compiled package graph (and the control plane's build cache).
        self.go
            .cmd(["build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-ldflags"])
            .arg(k8s_version_ldflags(self.s)?)
            .arg("-o")
            .arg(format!("{}/", self.tmp.path().display()))
            .args(&packages)
            .current_dir(&self.s.k8s_module_dir)
            .env("CGO_ENABLED", "0")
            .run_shown()
            .with_context(|| {
                let at: Vec<String> = packages.iter().map(|p| format!("{p}@{v}")).collect();
                format!(
                    "go build of {} failed (see above). A 'missing go.sum entry' means controlplane/upstream/go.mod \
                     lost its tool block for these commands: restore it with\n  (cd {} && go get -tool {})",
                    missing.join(" "),
                    self.s.k8s_module_dir.display(),
                    at.join(" ")
                )
            })?;
        missing.iter().try_for_each(|name| self.install(name, &format!("k8s.io/kubernetes@{v}")))
    }

    fn agnhost(&self) -> anyhow::Result<()> {
        let v = &self.s.k8s_version;
        self.go
            .cmd(["build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o"])
            .arg(self.out("agnhost"))
            .arg("k8s.io/kubernetes/test/images/agnhost")
            .current_dir(&self.s.k8s_module_dir)
            .env("CGO_ENABLED", "0")
            .run_shown()
            .with_context(|| {
                format!(
                    "go build of agnhost failed (see above). A 'missing go.sum entry' means controlplane/upstream/go.mod \
                     lost its tool line for it: restore it with\n  (cd {} && go get -tool \
                     k8s.io/kubernetes/test/images/agnhost@{v})",
                    self.s.k8s_module_dir.display()
                )
            })?;
        self.install("agnhost", &format!("k8s.io/kubernetes@{v}"))
    }

    /// CoreDNS at the version kubeadm deploys: kubeadm's constant, read from its source, never guessed.
    fn coredns_version(&self) -> anyhow::Result<String> {
        let file = self.go.kubernetes_dir(self.s)?.join("cmd/kubeadm/app/constants/constants.go");
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("kubeadm's constants not found at {}", file.display()))?;
        version_assigned(&text, "CoreDNSVersion")
            .with_context(|| format!("could not read CoreDNSVersion from {} (did kubeadm rename it?)", file.display()))
    }

    /// The CNI plugins' release: the one kind's own node image ships, read from kind's base image Dockerfile.
    fn cni_plugins_version(&self, kind_version: &str) -> anyhow::Result<String> {
        let file = self.go.download(&format!("sigs.k8s.io/kind@{kind_version}"))?.join("images/base/Dockerfile");
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        version_assigned(&text, "CNI_PLUGINS_VERSION").with_context(|| {
            format!("could not read CNI_PLUGINS_VERSION from {} (did kind rename it?)", file.display())
        })
    }

    /// A separate main module, built inside its downloaded directory.
    fn module(&self, module: &str, version: &str, pkg: &str, name: &str, ldflags: &str) -> anyhow::Result<()> {
        let dir = self.go.download(&format!("{module}@{version}"))?;
        self.in_module(&dir, pkg, name, ldflags)?;
        self.install(name, &format!("{module}@{version}"))
    }

    fn cni_plugins(&self, version: &str, stamp: &str) -> anyhow::Result<()> {
        let dir = self.go.download(&format!("github.com/containernetworking/plugins@{version}"))?;
        std::fs::create_dir_all(self.out("cni"))?;
        let ldflags =
            format!("-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion={version}");
        for plugin in CNI_PLUGINS {
            let name = plugin.rsplit('/').next().unwrap_or(plugin);
            self.in_module(&dir, &format!("./plugins/{plugin}"), &format!("cni/{name}"), &ldflags)?;
        }
        let installed = self.s.kind_bin_dir.join("cni");
        if installed.exists() {
            std::fs::remove_dir_all(&installed).with_context(|| format!("removing {}", installed.display()))?;
        }
        self.install("cni", stamp)
    }
}

/// Builds what is missing or stale, and gives the bin directory.
pub fn build(s: &Settings) -> anyhow::Result<PathBuf> {
    let minor = minor_of(&s.k8s_version).with_context(|| {
        format!(
            "could not read a k8s.io/kubernetes release from {} (got '{}')",
            s.k8s_module_dir.join("go.mod").display(),
            s.k8s_version
        )
    })?;
    let kind_version = env_setting("KIND_VERSION").unwrap_or_else(|| KIND_VERSION.into());
    let crictl_version = env_setting("CRICTL_VERSION").unwrap_or_else(|| format!("v1.{minor}.0"));
    let go = Go::find(s)?;
    let bin = &s.kind_bin_dir;
    std::fs::create_dir_all(bin).with_context(|| format!("creating {}", bin.display()))?;
    let tmp = tempfile::Builder::new().prefix(".build.").tempdir_in(bin).context("creating a build directory")?;
    let b = Build { s, go, tmp };
    let v = &s.k8s_version;
    tracing::info!(
        "using {}; Kubernetes {v}, crictl {crictl_version}, kind {kind_version}",
        b.go.cmd(["version"]).output().unwrap_or_else(|_| "go".into())
    );

    let kubernetes = format!("k8s.io/kubernetes@{v}");
    let missing: Vec<&str> = KUBERNETES_COMMANDS.into_iter().filter(|name| !is_built(bin, name, &kubernetes)).collect();
    if !missing.is_empty() {
        step(&format!("build {}", missing.join(" ")), || b.kubernetes(&missing))?;
    }
    if !is_built(bin, "agnhost", &kubernetes) {
        step("build agnhost (upstream's e2e test server)", || b.agnhost())?;
    }
    if !is_built(bin, "crictl", &format!("sigs.k8s.io/cri-tools@{crictl_version}")) {
        step(&format!("build crictl {crictl_version}"), || {
            let bare = crictl_version.strip_prefix('v').unwrap_or(&crictl_version);
            let ldflags = format!("-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={bare}");
            b.module("sigs.k8s.io/cri-tools", &crictl_version, "./cmd/crictl", "crictl", &ldflags)
        })?;
    }
    let coredns = b.coredns_version()?;
    if !is_built(bin, "coredns", &format!("github.com/coredns/coredns@{coredns}")) {
        step(&format!("build coredns {coredns} (kubeadm's CoreDNSVersion)"), || {
            let ldflags = format!("-s -w -X github.com/coredns/coredns/coremain.GitCommit={coredns}");
            b.module("github.com/coredns/coredns", &coredns, ".", "coredns", &ldflags)
        })?;
    }
    if !is_built(bin, "kind", &format!("sigs.k8s.io/kind@{kind_version}")) {
        step(&format!("build kind {kind_version}"), || {
            b.module("sigs.k8s.io/kind", &kind_version, ".", "kind", "-s -w")
        })?;
    }
    let cni = b.cni_plugins_version(&kind_version)?;
    let cni_stamp = format!("github.com/containernetworking/plugins@{cni} {}", CNI_PLUGINS.join(" "));
    if !is_built(bin, "cni", &cni_stamp) {
        let names: Vec<&str> = CNI_PLUGINS.iter().map(|p| p.rsplit('/').next().unwrap_or(p)).collect();
        step(&format!("build the CNI plugins {} {cni} (kind's CNI_PLUGINS_VERSION)", names.join(" ")), || {
            b.cni_plugins(&cni, &cni_stamp)
        })?;
    }
    tracing::info!("kind node binaries for Kubernetes {v} ready in {}", bin.display());
    Ok(bin.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minor_is_read_from_a_release_only() {
        assert_eq!(minor_of("v1.37.2"), Some(37));
        assert_eq!(minor_of("v1.9.0"), Some(9));
        for not_a_release in ["v1.37", "v1.37.2-rc.0", "v2.0.0", "1.37.2", "v1..2", "v1.37.2.1"] {
            assert_eq!(minor_of(not_a_release), None, "{not_a_release}");
        }
    }

    #[test]
    fn pinned_versions_are_read_from_kubeadm_and_kind_sources() {
        let constants = "\t// CoreDNSImageName specifies the name of the image for CoreDNS add-on\n\
                         \tCoreDNSImageName = \"coredns\"\n\n\
                         \t// CoreDNSVersion is the version of CoreDNS to be deployed if it is used\n\
                         \tCoreDNSVersion = \"v1.14.6\"\n";
        assert_eq!(version_assigned(constants, "CoreDNSVersion").as_deref(), Some("v1.14.6"));
        let dockerfile = "ARG CNI_PLUGINS_CLONE_URL=\"https://github.com/containernetworking/plugins\"\n\
                          ARG CNI_PLUGINS_VERSION=\"v1.9.1\"\n\
                          RUN git checkout \"${CNI_PLUGINS_VERSION}\"\n";
        assert_eq!(version_assigned(dockerfile, "CNI_PLUGINS_VERSION").as_deref(), Some("v1.9.1"));
        assert_eq!(version_assigned("CoreDNSVersionX = \"v1.0.0\"\n", "CoreDNSVersion"), None);
        assert_eq!(version_assigned("CoreDNSVersion = \"latest\"\n", "CoreDNSVersion"), None);
    }

    #[test]
    fn a_binary_is_built_when_it_runs_and_its_stamp_says_the_version() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let bin = dir.path();
        assert_eq!(stamp_path(bin, "kind"), bin.join(".kind.version"));
        assert!(!is_built(bin, "kind", "sigs.k8s.io/kind@v0.33.0"));
        std::fs::write(bin.join("kind"), "").expect("written");
        std::fs::write(stamp_path(bin, "kind"), "sigs.k8s.io/kind@v0.33.0\n").expect("written");
        assert!(!is_built(bin, "kind", "sigs.k8s.io/kind@v0.33.0"), "not executable");
        std::fs::set_permissions(bin.join("kind"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(is_built(bin, "kind", "sigs.k8s.io/kind@v0.33.0"));
        assert!(!is_built(bin, "kind", "sigs.k8s.io/kind@v0.34.0"));
        // A directory (the CNI plugins) counts as built the same way.
        std::fs::create_dir(bin.join("cni")).expect("created");
        std::fs::write(stamp_path(bin, "cni"), "plugins@v1.9.1 main/bridge\n").expect("written");
        assert!(is_built(bin, "cni", "plugins@v1.9.1 main/bridge"));
    }

    #[test]
    fn the_ldflags_come_from_the_shell_definition() {
        let s = Settings { k8s_version: "v1.37.2".into(), ..Settings::from_env().expect("this checkout's settings") };
        let flags = k8s_version_ldflags(&s).expect("the shell function runs");
        assert!(flags.starts_with("-s -w "), "{flags}");
        for want in [
            "-X k8s.io/component-base/version.gitVersion=v1.37.2",
            "-X k8s.io/component-base/version.gitMinor=37",
            "-X k8s.io/client-go/pkg/version.gitVersion=v1.37.2",
            "-X k8s.io/client-go/pkg/version.gitTreeState=clean",
        ] {
            assert!(flags.contains(want), "{want} missing from {flags}");
        }
        let bad = Settings { k8s_version: "v1.37".into(), ..s };
        let err = k8s_version_ldflags(&bad).unwrap_err().to_string();
        assert!(err.contains("is not a Kubernetes release"), "{err}");
    }
}

//! Where the upstream binaries live and which Kubernetes version they are.
//!
//! `scripts/build-control-plane.sh` builds them into
//! `${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/k8s/<version>/bin`; `FAKECLOUD_K8S_BIN` points
//! elsewhere. The version comes from `upstream/go.mod`, the single place it is pinned.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The Go module that pins the upstream sources; compiled in so the launcher and the build
/// script can never disagree on the version.
const UPSTREAM_GO_MOD: &str = include_str!("../upstream/go.mod");

/// The module that pins kwok (its `tool` line), compiled in for the same reason.
const KWOK_GO_MOD: &str = include_str!("../kwok/go.mod");

/// Environment variable naming a kwok binary (overrides the cache).
pub const KWOK_ENV: &str = "FAKECLOUD_KWOK";

/// Environment variable naming a directory with the three binaries (overrides the cache).
pub const BIN_DIR_ENV: &str = "FAKECLOUD_K8S_BIN";
/// Environment variable naming the cache root (default `$HOME/.cache/fakecloud`).
pub const CACHE_ENV: &str = "FAKECLOUD_CACHE";

/// The Kubernetes release pinned in `controlplane/upstream/go.mod`, e.g. `v1.37.2`.
pub fn pinned_kubernetes_version() -> &'static str {
    go_mod_version(UPSTREAM_GO_MOD, "k8s.io/kubernetes").unwrap_or("unknown")
}

/// The etcd release built alongside (the version k8s.io/kubernetes itself requires).
pub fn pinned_etcd_version() -> &'static str {
    go_mod_version(UPSTREAM_GO_MOD, "go.etcd.io/etcd/server/v3").unwrap_or("unknown")
}

/// The kwok release pinned in `controlplane/kwok/go.mod`, e.g. `v0.8.0`.
pub fn pinned_kwok_version() -> &'static str {
    go_mod_version(KWOK_GO_MOD, "sigs.k8s.io/kwok").unwrap_or("unknown")
}

/// kwok and the pod stages it runs with (a kwok binary has none of its own).
#[derive(Debug, Clone)]
pub struct Kwok {
    pub binary: PathBuf,
    /// Stage files, each given to kwok as a `--config`.
    pub stages: Vec<PathBuf>,
}

/// kwok: `FAKECLOUD_KWOK`, or where `scripts/build-go-tool.sh controlplane/kwok` builds it
/// (`${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/kwok/<version>/kwok`), with the stages in `pod-stages/` beside it;
/// checked to be there.
pub fn kwok() -> Result<Kwok> {
    match std::env::var_os(KWOK_ENV).filter(|v| !v.is_empty()) {
        Some(path) => kwok_at(PathBuf::from(path)),
        None => kwok_at(cache_root()?.join("kwok").join(pinned_kwok_version()).join("kwok")),
    }
}

/// kwok at `binary`, with its stages in `pod-stages/` beside it; checked to be there.
pub fn kwok_at(binary: PathBuf) -> Result<Kwok> {
    let missing = || Error::KwokMissing { path: binary.clone(), version: pinned_kwok_version().to_string() };
    let dir = binary.parent().map(|d| d.join("pod-stages")).ok_or_else(missing)?;
    let mut stages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|_| missing())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    stages.sort();
    if is_executable(&binary) && !stages.is_empty() { Ok(Kwok { binary, stages }) } else { Err(missing()) }
}

/// For integration tests, as [`Binaries::for_tests`]: kwok, or `None` (skip, saying why) outside CI.
pub fn kwok_for_tests(test: &str) -> Option<Kwok> {
    found_for_tests(test, kwok())
}

/// What an integration test needs, or `None` (skip, with a message saying why) outside CI. Under CI (`CI` set)
/// a missing build is a failure, so a green CI always means the tests really ran.
fn found_for_tests<T>(test: &str, found: Result<T>) -> Option<T> {
    match found {
        Ok(found) => Some(found),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Finds `module vX.Y.Z` in a go.mod, inside or outside a `require (...)` block.
fn go_mod_version<'a>(go_mod: &'a str, module: &str) -> Option<&'a str> {
    go_mod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let mut first = words.next()?;
        if first == "require" {
            first = words.next()?;
        }
        if first != module {
            return None;
        }
        words.next().filter(|version| version.starts_with('v'))
    })
}

/// The directory the binaries are expected in, honouring the environment overrides.
pub fn default_bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    Ok(cache_root()?.join("k8s").join(pinned_kubernetes_version()).join("bin"))
}

/// `$FAKECLOUD_CACHE`, or `$HOME/.cache/fakecloud`.
fn cache_root() -> Result<PathBuf> {
    match std::env::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
        Some(cache) => Ok(PathBuf::from(cache)),
        None => {
            let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or(Error::NoCacheDir)?;
            Ok(PathBuf::from(home).join(".cache").join("fakecloud"))
        }
    }
}

/// Absolute paths of the three binaries, checked to exist.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
}

impl Binaries {
    /// For integration tests: the built binaries, or `None` (skip, with a message saying why) outside CI. Under
    /// CI (`CI` set) a missing build is a failure, so a green CI always means the tests really ran.
    pub fn for_tests(test: &str) -> Option<Self> {
        found_for_tests(test, Self::locate(None))
    }

    /// The kubectl built beside the control plane (same version), if it is there. Not required to run the
    /// control plane; caches filled before kubectl was added to the build lack it until the next build.
    pub fn kubectl(&self) -> Option<PathBuf> {
        let path = self.etcd.parent()?.join("kubectl");
        is_executable(&path).then_some(path)
    }

    /// Looks in `dir`, or in [`default_bin_dir`] when `None`.
    pub fn locate(dir: Option<&Path>) -> Result<Self> {
        let dir = match dir {
            Some(dir) => dir.to_path_buf(),
            None => default_bin_dir()?,
        };
        let path = |name: &str| dir.join(name);
        let binaries = Binaries {
            etcd: path("etcd"),
            kube_apiserver: path("kube-apiserver"),
            kube_controller_manager: path("kube-controller-manager"),
        };
        let missing: Vec<&str> = [
            ("etcd", &binaries.etcd),
            ("kube-apiserver", &binaries.kube_apiserver),
            ("kube-controller-manager", &binaries.kube_controller_manager),
        ]
        .into_iter()
        .filter(|(_, p)| !is_executable(p))
        .map(|(name, _)| name)
        .collect();
        if missing.is_empty() {
            Ok(binaries)
        } else {
            Err(Error::BinariesMissing {
                dir,
                missing: missing.join(", "),
                version: pinned_kubernetes_version().to_string(),
            })
        }
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pinned_versions_from_go_mod() {
        let k8s = pinned_kubernetes_version();
        assert!(k8s.starts_with("v1.3"), "unexpected k8s version {k8s}");
        // kube 5 / k8s-openapi 0.29 support 1.33..=1.37.
        let minor: u32 = k8s.trim_start_matches("v1.").split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
        assert!((33..=37).contains(&minor), "{k8s} outside kube 5's range");
        assert!(pinned_etcd_version().starts_with("v3."));
        assert!(pinned_kwok_version().starts_with("v0."), "{}", pinned_kwok_version());
    }

    #[test]
    fn parses_single_line_and_block_requires() {
        let go_mod = "module x\n\nrequire k8s.io/kubernetes v1.2.3\nrequire (\n\tfoo/bar v0.1.0 // indirect\n)\n";
        assert_eq!(go_mod_version(go_mod, "k8s.io/kubernetes"), Some("v1.2.3"));
        assert_eq!(go_mod_version(go_mod, "foo/bar"), Some("v0.1.0"));
        assert_eq!(go_mod_version(go_mod, "missing"), None);
        // replace lines must not be mistaken for requirements
        assert_eq!(go_mod_version("\tk8s.io/api => k8s.io/api v0.1.0\n", "k8s.io/api"), None);
    }

    #[test]
    fn missing_binaries_error_names_the_build_script() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Binaries::locate(Some(dir.path())).expect_err("empty dir has no binaries");
        let msg = err.to_string();
        assert!(msg.contains("scripts/build-control-plane.sh"), "{msg}");
        assert!(msg.contains("kube-apiserver"), "{msg}");
    }
}

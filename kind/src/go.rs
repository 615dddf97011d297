//! The Go toolchain, and the modules it downloads from the Go module proxy (into its module cache, verified
//! against go.sum or the checksum database).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, bail};

use crate::host::{is_executable, on_path};
use crate::run::{Cmd, cmd};
use crate::settings::Settings;

pub struct Go {
    program: String,
}

/// The `go` directive of a go.mod: the Go release it needs.
fn go_directive(go_mod: &str) -> Option<&str> {
    go_mod.lines().find_map(|line| line.strip_prefix("go ")).map(str::trim)
}

/// The directory `go mod download -json` reports a module in.
fn module_dir_in(json: &str) -> Option<PathBuf> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get("Dir")?.as_str().filter(|d| !d.is_empty()).map(PathBuf::from)
}

impl Go {
    /// `go` on PATH, else /usr/local/go/bin/go: our machines ship Go there, which a non-login shell may not
    /// have on PATH.
    pub fn find(s: &Settings) -> anyhow::Result<Self> {
        if on_path("go").is_some() {
            return Ok(Go { program: "go".into() });
        }
        let shipped = Path::new("/usr/local/go/bin/go");
        if is_executable(shipped) {
            return Ok(Go { program: shipped.display().to_string() });
        }
        let go_mod = s.k8s_module_dir.join("go.mod");
        let text = std::fs::read_to_string(&go_mod).unwrap_or_default();
        let release = go_directive(&text).unwrap_or("(see the go line of controlplane/upstream/go.mod)");
        bail!(
            "the Go toolchain is not on PATH, and the kind path builds its binaries with it. Install Go {release} or newer, \
             put its bin directory on PATH, and run this again."
        )
    }

    /// `go ARGS`.
    pub fn cmd<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        cmd(&self.program, args)
    }

    /// Downloads `module@version` and gives its directory in the module cache. Run outside any module, so no
    /// go.mod or go.work around us is consulted or changed.
    pub fn download(&self, module_at_version: &str) -> anyhow::Result<PathBuf> {
        let outside = tempfile::tempdir().context("creating a temporary directory")?;
        let json = self
            .cmd(["mod", "download", "-json", module_at_version])
            .current_dir(outside.path())
            .env("GOWORK", "off")
            .env("GOFLAGS", "-mod=mod")
            .output()
            .with_context(|| {
                let proxy = self.cmd(["env", "GOPROXY"]).output().unwrap_or_default();
                format!(
                    "could not download {module_at_version} from the Go module proxy ({proxy}).\nIf that version \
                     does not exist yet, pin another one (KIND_VERSION, CRICTL_VERSION, or the defaults in \
                     kind/src/node_binaries.rs)."
                )
            })?;
        module_dir_in(&json)
            .filter(|d| d.is_dir())
            .with_context(|| format!("go mod download {module_at_version} reported no module directory"))
    }

    /// The directory of k8s.io/kubernetes in the control plane module's graph (the module cache).
    pub fn kubernetes_dir(&self, s: &Settings) -> anyhow::Result<PathBuf> {
        let dir = self
            .cmd(["list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"])
            .current_dir(&s.k8s_module_dir)
            .output()
            .unwrap_or_default();
        if !dir.is_empty() && Path::new(&dir).is_dir() {
            return Ok(PathBuf::from(dir));
        }
        self.download(&format!("k8s.io/kubernetes@{}", s.k8s_version))
    }
}

/// Runs one of the project's build scripts with `args` (scripts/build-control-plane.sh, build-upstream-ccm.sh,
/// build-go-tool.sh ccm-aws, aws-clients.sh; `make test` runs them too): its progress shown, the path it prints on
/// its last line given back.
pub fn build_script(s: &Settings, script: &str, args: &[&str]) -> anyhow::Result<PathBuf> {
    let out = std::process::Command::new("bash")
        .arg(s.repo.join(script))
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run `bash {script}`"))?;
    if !out.status.success() {
        bail!("`bash {script}` failed ({}); its output is above", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().map(str::trim).unwrap_or_default();
    if last.is_empty() {
        bail!("`bash {script}` printed no path on its last line");
    }
    Ok(PathBuf::from(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_go_release_is_read_from_go_mod() {
        assert_eq!(go_directive("module x\n\ngo 1.25.0\n\ntoolchain go1.25.3\n"), Some("1.25.0"));
        assert_eq!(go_directive("module x\n"), None);
    }

    #[test]
    fn the_module_directory_is_read_from_go_mod_download() {
        let json = r#"{
	"Path": "sigs.k8s.io/kind",
	"Version": "v0.33.0",
	"Info": "/root/go/pkg/mod/cache/download/sigs.k8s.io/kind/@v/v0.33.0.info",
	"Dir": "/root/go/pkg/mod/sigs.k8s.io/kind@v0.33.0",
	"Sum": "h1:abc="
}"#;
        assert_eq!(module_dir_in(json), Some(PathBuf::from("/root/go/pkg/mod/sigs.k8s.io/kind@v0.33.0")));
        let failed = r#"{"Path": "sigs.k8s.io/kind", "Version": "v9.9.9", "Error": "unknown revision v9.9.9"}"#;
        assert_eq!(module_dir_in(failed), None);
        assert_eq!(module_dir_in("not json"), None);
    }
}

//! The node root filesystem's customization, run on the debootstrap result (this file's code is in its cache
//! key, so editing it rebuilds the root filesystem): kind's own files from the kind module (images/base/files,
//! placed as its images/base/Dockerfile does), systemd trimmed for a container, containerd's config with our
//! pause image and restrict_oom_score_adj = true (our hosts' capability bounding set lacks CAP_SYS_RESOURCE, so
//! pods may not lower oom_score_adj), and kind's CNI plugins from Debian's package.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::host::is_executable;
use crate::rootfs::{glob, in_rootfs, install, remove_glob, symlink_force};

/// The code of this customization, for the root filesystem's cache key.
pub const CODE: &[&str] = &[include_str!("node_rootfs.rs"), DEFAULT_STORAGE];

/// The StorageClass kind falls back to without this file, written so it does not warn.
const DEFAULT_STORAGE: &str = include_str!("default-storage.yaml");

/// The CNI plugins kind's own node image ships in /opt/cni/bin, and only those (its base image Dockerfile copies
/// host-local, loopback, ptp and portmap; Debian's package has them in /usr/lib/cni): like kindest/node, this
/// image has no bridge, so the kind path proves the VPC router brings what its config needs to any node image.
const KIND_CNI_PLUGINS: [&str; 4] = ["host-local", "loopback", "portmap", "ptp"];

/// What kind's images/base/Dockerfile installs a file of images/base/files with: scripts 0755, the rest 0644.
fn kind_file_mode(relative: &Path) -> u32 {
    if relative.starts_with("usr/local/bin") || relative.starts_with("kind/bin") { 0o755 } else { 0o644 }
}

/// The files below `dir`, relative to it, sorted.
fn files_below(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).with_context(|| format!("reading {}", current.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(relative) = path.strip_prefix(dir) {
                found.push(relative.to_path_buf());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Whether kind's base runtime spec has its product_uuid hook first among createContainer hooks.
fn has_product_hook(cri_base: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(cri_base).is_ok_and(|spec| {
        spec.pointer("/hooks/createContainer/0/path").and_then(|p| p.as_str())
            == Some("/kind/bin/mount-product-files.sh")
    })
}

/// kind's containerd config.toml with our pause image, restrict_oom_score_adj = true, and without the
/// fuse-overlayfs proxy snapshotter (only rootless nodes use it, and its daemon is not installed); an error
/// when kind's file no longer has the shape these edits expect.
pub fn containerd_config(kind: &str, kind_module: &str, pause_ref: &str) -> anyhow::Result<String> {
    let mut body = String::new();
    // The [proxy_plugins] table runs to the next empty line.
    let mut in_proxy_plugins = false;
    for line in kind.lines() {
        if line.starts_with("[proxy_plugins]") {
            in_proxy_plugins = true;
        }
        if in_proxy_plugins {
            in_proxy_plugins = !line.is_empty();
            continue;
        }
        let setting = line.trim_start();
        let indent = &line[..line.len() - setting.len()];
        if setting.starts_with("sandbox_image = ") {
            body.push_str(&format!("{indent}sandbox_image = \"{pause_ref}\"\n"));
        } else {
            body.push_str(&line.replacen("restrict_oom_score_adj = false", "restrict_oom_score_adj = true", 1));
            body.push('\n');
        }
    }
    // Settings, not comments, must say what we set.
    let has_setting = |want: &str| body.lines().any(|l| l.trim() == want);
    if !has_setting(&format!("sandbox_image = \"{pause_ref}\""))
        || !has_setting("restrict_oom_score_adj = true")
        || body.contains("proxy_plugins")
    {
        bail!(
            "kind's containerd config.toml changed shape; update the edits in kind/src/node_image/node_rootfs.rs \
             (containerd_config)"
        );
    }
    Ok(format!(
        "# kind {kind_module} images/base/files/etc/containerd/config.toml, changed by fakecloud-kind node-image:\n\
         # local pause image, restrict_oom_score_adj = true (no CAP_SYS_RESOURCE), no fuse-overlayfs.\n{body}"
    ))
}

/// Customizes the node root filesystem `dir` with kind's files from `kind_files` (kind `kind_module`'s
/// images/base/files) and containerd's sandbox image `pause_ref`.
pub fn customize(dir: &Path, kind_files: &Path, kind_module: &str, pause_ref: &str) -> anyhow::Result<()> {
    for relative in files_below(kind_files)? {
        install(&kind_files.join(&relative), &dir.join(&relative), kind_file_mode(&relative))?;
    }
    // The rest of kind's Dockerfile's RUN steps: trim systemd's units for a container, enable kind's.
    let units = dir.join("lib/systemd/system");
    remove_glob(&units.join("sysinit.target.wants"), "systemd-tmpfiles-setup.service")?;
    remove_glob(&units.join("multi-user.target.wants"), "*")?;
    for wants in glob(&dir.join("etc/systemd/system"), "*.wants")? {
        remove_glob(&wants, "*")?;
    }
    remove_glob(&units.join("local-fs.target.wants"), "*")?;
    remove_glob(&units.join("sockets.target.wants"), "*udev*")?;
    remove_glob(&units.join("sockets.target.wants"), "*initctl*")?;
    remove_glob(&units.join("basic.target.wants"), "*")?;
    let journald = dir.join("etc/systemd/journald.conf");
    let mut conf = std::fs::read_to_string(&journald).with_context(|| format!("reading {}", journald.display()))?;
    conf.push_str("ReadKMsg=no\n");
    std::fs::write(&journald, conf)?;
    in_rootfs(dir, ["ln", "-sf", "/usr/lib/systemd/systemd", "/sbin/init"]).run()?;
    in_rootfs(dir, ["systemctl", "enable", "kubelet.service", "containerd.service", "undo-mount-hacks.service"])
        .run()?;
    in_rootfs(dir, ["systemctl", "mask", "systemd-binfmt.service"]).run()?;
    std::fs::create_dir_all(dir.join("etc/kubernetes/manifests"))?;
    // Debian's containerd is /usr/bin/containerd; kind's unit starts /usr/local/bin/containerd.
    symlink_force("/usr/bin/containerd", &dir.join("usr/local/bin/containerd"))?;

    // kind's base runtime spec: containerd's default plus the hook that gives each container its own
    // product_uuid, without rlimits.
    in_rootfs(dir, [
        "sh",
        "-c",
        r#"ctr oci spec | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" | jq "del(.process.rlimits)" >/etc/containerd/cri-base.json"#,
    ])
    .run()?;
    let spec = std::fs::read_to_string(dir.join("etc/containerd/cri-base.json")).unwrap_or_default();
    if !has_product_hook(&spec) {
        bail!("could not generate /etc/containerd/cri-base.json with the root filesystem's ctr and jq");
    }

    let config = dir.join("etc/containerd/config.toml");
    let kind_config = kind_files.join("etc/containerd/config.toml");
    let text = std::fs::read_to_string(&kind_config).with_context(|| format!("reading {}", kind_config.display()))?;
    std::fs::write(&config, containerd_config(&text, kind_module, pause_ref)?)?;

    // kind's CNI plugins where containerd looks for them.
    let cni = dir.join("opt/cni/bin");
    std::fs::create_dir_all(&cni)?;
    for plugin in KIND_CNI_PLUGINS {
        let debians = format!("/usr/lib/cni/{plugin}");
        if !is_executable(&dir.join(&debians[1..])) {
            bail!("Debian's containernetworking-plugins has no {plugin}");
        }
        symlink_force(&debians, &cni.join(plugin))?;
    }
    let manifests = dir.join("kind/manifests");
    std::fs::create_dir_all(&manifests)?;
    std::fs::write(manifests.join("default-storage.yaml"), DEFAULT_STORAGE)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND_CONFIG: &str = include_str!("testdata/kind-v0.33.0-containerd-config.toml");
    const PAUSE: &str = "fakecloud.local/pause:3.10.1";

    #[test]
    fn kinds_containerd_config_gets_our_pause_oom_setting_and_no_proxy_plugins() {
        let edited = containerd_config(KIND_CONFIG, "sigs.k8s.io/kind@v0.33.0", PAUSE).expect("kind's shape");
        assert!(edited.starts_with("# kind sigs.k8s.io/kind@v0.33.0 images/base/files/etc/containerd/config.toml"));
        assert!(edited.contains("\n  sandbox_image = \"fakecloud.local/pause:3.10.1\"\n"), "{edited}");
        assert!(!edited.contains("registry.k8s.io/pause"), "{edited}");
        assert!(edited.contains("\n  restrict_oom_score_adj = true\n") && !edited.contains("= false"), "{edited}");
        assert!(!edited.contains("proxy_plugins") && !edited.contains("fuse-overlayfs.sock"), "{edited}");
        // The rest is kind's, line for line.
        for kept in ["version = 2", "  discard_unpacked_layers = true", "    SystemdCgroup = true"] {
            assert!(edited.lines().any(|l| l == kept), "{kept} lost from {edited}");
        }
        let removed = KIND_CONFIG.lines().count() - (edited.lines().count() - 2);
        assert_eq!(removed, 6, "the [proxy_plugins] table (five lines) and its empty line, nothing else");
    }

    #[test]
    fn a_changed_shape_of_kinds_config_is_refused() {
        let refused = |text: &str| {
            let err = containerd_config(text, "sigs.k8s.io/kind@v9", PAUSE).unwrap_err().to_string();
            assert!(err.contains("changed shape"), "{err}");
        };
        refused(&KIND_CONFIG.replace("sandbox_image", "pause_image"));
        refused(&KIND_CONFIG.replace("restrict_oom_score_adj = false", "restrict_oom_score_adj=false"));
        // A proxy plugin outside a [proxy_plugins] table of its own.
        refused(&KIND_CONFIG.replace("[proxy_plugins]\n", ""));
    }

    #[test]
    fn kinds_scripts_are_executable_and_its_other_files_are_not() {
        assert_eq!(kind_file_mode(Path::new("usr/local/bin/entrypoint")), 0o755);
        assert_eq!(kind_file_mode(Path::new("kind/bin/mount-product-files.sh")), 0o755);
        assert_eq!(kind_file_mode(Path::new("etc/containerd/config.toml")), 0o644);
        assert_eq!(kind_file_mode(Path::new("kind/README.txt")), 0o644);
    }

    #[test]
    fn kinds_files_are_found_and_installed_with_their_modes() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().expect("a temporary directory");
        let (files, dir) = (root.path().join("files"), root.path().join("rootfs"));
        std::fs::create_dir_all(files.join("usr/local/bin")).expect("created");
        std::fs::create_dir_all(files.join("etc/sysctl.d")).expect("created");
        std::fs::write(files.join("usr/local/bin/entrypoint"), "#!/bin/sh\n").expect("written");
        std::fs::write(files.join("etc/sysctl.d/10-network.conf"), "x=1\n").expect("written");
        let found = files_below(&files).expect("walked");
        assert_eq!(found, [PathBuf::from("etc/sysctl.d/10-network.conf"), PathBuf::from("usr/local/bin/entrypoint")]);
        for relative in &found {
            install(&files.join(relative), &dir.join(relative), kind_file_mode(relative)).expect("installed");
        }
        let mode = |p: &str| dir.join(p).metadata().expect("installed").permissions().mode() & 0o777;
        assert_eq!((mode("usr/local/bin/entrypoint"), mode("etc/sysctl.d/10-network.conf")), (0o755, 0o644));
    }

    #[test]
    fn the_runtime_spec_must_carry_kinds_product_hook_first() {
        let spec =
            r#"{"ociVersion": "1.1.0", "hooks": {"createContainer": [{"path": "/kind/bin/mount-product-files.sh"}]}}"#;
        assert!(has_product_hook(spec));
        assert!(!has_product_hook(r#"{"hooks": {"createContainer": [{"path": "/other"}]}}"#));
        assert!(!has_product_hook(r#"{"process": {}}"#));
        assert!(!has_product_hook(""));
    }
}

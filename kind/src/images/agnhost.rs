//! agnhost's base image. Upstream's image is alpine with `bind-tools curl netcat-openbsd iproute2 iperf bash
//! util-linux-misc socat`, and its specs exec curl, wget, nc, dig and ip in agnhost pods (the LoadBalancers
//! specs of scripts/e2e-kind-lb.sh among them), so the binary alone is not enough. The same tools from Debian
//! (dnsutils is bind9-dnsutils; wget and procps because specs call them too), as a debootstrap root filesystem
//! (cached, no registry), imported once per root filesystem: its directory's name, which carries its cache key
//! (the packages and this file's code), is the label that says the image is current.

use std::path::Path;

use anyhow::bail;

use crate::docker::Docker;
use crate::go::Go;
use crate::rootfs::{
    Customization, DEBIAN_SUITE, dir_name, import_rootfs_image, in_rootfs, install, make_rootfs, remove_glob,
    symlink_force,
};
use crate::settings::Settings;

const PACKAGES: &[&str] =
    &["bash", "bind9-dnsutils", "curl", "iperf", "iproute2", "netcat-openbsd", "procps", "socat", "wget"];
const LABEL_ROOTFS: &str = "org.fakecloud.rootfs";

/// The image's name.
pub fn base() -> String {
    format!("fakecloud/agnhost-base:{DEBIAN_SUITE}")
}

/// What upstream's Dockerfile adds beside the packages: /uploads (netexec's upload target), porter's TLS pair,
/// the agnhost-2 name (entrypoint tests), and the user and group the image-defined-user specs look for.
fn customize(s: &Settings, dir: &Path) -> anyhow::Result<()> {
    let src = Go::find(s)?.kubernetes_dir(s)?.join("test/images/agnhost");
    if !src.join("porter/localhost.crt").is_file() {
        bail!("agnhost's sources not found at {} (run fakecloud-kind node-binaries first)", src.display());
    }
    std::fs::create_dir_all(dir.join("uploads"))?;
    for file in ["localhost.crt", "localhost.key"] {
        install(&src.join("porter").join(file), &dir.join(file), 0o644)?;
    }
    symlink_force("agnhost", &dir.join("agnhost-2"))?;
    in_rootfs(dir, ["groupadd", "-g", "50000", "group-defined-in-image"]).run()?;
    in_rootfs(dir, ["useradd", "-u", "1000", "-M", "-G", "group-defined-in-image", "user-defined-in-image"]).run()?;
    // Only what the tools need at run time: locales and translations are most of what is left to drop.
    remove_glob(&dir.join("usr/share/locale"), "*")?;
    remove_glob(&dir.join("usr/share/i18n"), "*")
}

/// Makes sure the engine has the current agnhost base image, labelled `label` (what the images prune by).
pub fn base_image(s: &Settings, d: &Docker, label: &str) -> anyhow::Result<()> {
    let apply = |dir: &Path| customize(s, dir);
    let customization = Customization { code: &[include_str!("agnhost.rs")], apply: &apply };
    let rootfs = make_rootfs(s, "agnhost", PACKAGES, Some(&customization), &s.k8s_version)?;
    let name = dir_name(&rootfs)?;
    let base = base();
    if d.label(&base, LABEL_ROOTFS).as_deref() == Some(name) {
        tracing::info!("{base} is current ({name})");
        return Ok(());
    }
    let changes = [
        format!("LABEL {label}=agnhost-base"),
        format!("LABEL {LABEL_ROOTFS}={name}"),
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
    ];
    import_rootfs_image(d, &rootfs, &base, &changes.each_ref().map(String::as_str))?;
    tracing::info!("{base} imported from {} ({})", rootfs.display(), d.size(&base));
    Ok(())
}

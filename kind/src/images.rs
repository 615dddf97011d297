//! The project's own images for the kind path: fakecloud/emulator, fakecloud/ccm and fakecloud/vpc-router (tag
//! `dev`, or FAKECLOUD_IMAGE_TAG), fakecloud/agnhost (upstream's e2e test server, built by node_binaries, which
//! runs first), with FAKECLOUD_KIND_CCM=upstream fakecloud/upstream-ccm (the Go binary of
//! scripts/build-upstream-ccm.sh), with FAKECLOUD_KIND_CCM=aws fakecloud/aws-ccm (cloud-provider-aws, as
//! scripts/build-go-tool.sh ccm-aws builds it). The Rust binaries are built on the host (Settings::image_profile) and staged
//! into a small build context per image, so the Dockerfiles in docker/ download nothing: they build the same
//! offline (on the debootstrap base of rootfs::base_image) and online.

mod agnhost;

use std::path::Path;

use anyhow::{Context as _, bail};

use crate::docker::Docker;
use crate::go::build_script;
use crate::host::{env_setting, is_executable};
use crate::run::{cmd, step};
use crate::settings::{Ccm, Settings};

/// Every image built here carries this label: what a rebuild leaves untagged (the old binary's layer) is pruned
/// by it, and never anyone else's image. Without that, each run with a new binary left its old image behind in
/// the engine's data-root, and the disk filled over repeated runs.
const LABEL: &str = "org.fakecloud.image";
/// The images of the workspace's binaries: image name, the binary it carries.
const RUST_IMAGES: [(&str, &str); 3] =
    [("emulator", "fakecloud"), ("ccm", "fakecloud-ccm"), ("vpc-router", "fakecloud-vpc-router")];

/// A file's size as `du -m` shows it: MiB, rounded up.
fn mebibytes(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20)
}

/// Builds the project's images into `d`'s engine.
pub fn build(s: &Settings, d: &Docker) -> anyhow::Result<()> {
    let tag = env_setting("FAKECLOUD_IMAGE_TAG").unwrap_or_else(|| "dev".into());
    crate::rootfs::base_image(s, d)?;
    let names: Vec<&str> = RUST_IMAGES.iter().map(|(_, bin)| *bin).collect();
    if s.prebuilt {
        if let Some(bin) = names.iter().find(|bin| !is_executable(&s.image_target_dir.join(bin))) {
            bail!("FAKECLOUD_IMAGE_PREBUILT is set, and {} is not built", s.image_target_dir.join(bin).display());
        }
        tracing::info!(
            "using {} as built in {} (FAKECLOUD_IMAGE_PREBUILT)",
            names.join(" "),
            s.image_target_dir.display()
        );
    } else {
        step(&format!("building {} ({} profile)", names.join(" "), s.image_profile.name()), || {
            cmd("cargo", ["build", "--locked", "--quiet", "--profile", s.image_profile.name()])
                .args(names.iter().flat_map(|bin| ["--bin", bin]))
                .arg("--manifest-path")
                .arg(s.repo.join("Cargo.toml"))
                .run_shown()
        })?;
    }

    let stage = Stage { s, d, root: s.cluster.run_root.join("image-context"), tag };
    // The VPC router's image carries the CNI plugins its config uses, for the nodes that lack them (kindest/node
    // has no bridge), built by node_binaries.
    let cni = s.kind_bin_dir.join("cni");
    if !cni.is_dir() {
        bail!("{} is missing: run fakecloud-kind node-binaries first (make kind-up does)", cni.display());
    }
    for (name, bin) in RUST_IMAGES {
        let plugins = (name == "vpc-router").then_some(cni.as_path());
        stage.image_of(name, &s.image_target_dir.join(bin), plugins)?;
    }
    let agnhost = s.kind_bin_dir.join("agnhost");
    if !is_executable(&agnhost) {
        bail!("{} is missing: run fakecloud-kind node-binaries first (make kind-up does)", agnhost.display());
    }
    step(&format!("agnhost's base image {} (Debian with upstream's tools)", agnhost::base()), || {
        agnhost::base_image(s, d, LABEL)
    })?;
    stage.image_of("agnhost", &agnhost, None)?;
    // A Go CCM only where it is the one deployed: its Go build is the slow part.
    match s.ccm {
        Ccm::Fakecloud => {}
        Ccm::Upstream => {
            stage.image_of("upstream-ccm", &build_script(s, "scripts/build-upstream-ccm.sh", &[])?, None)?
        }
        Ccm::Aws => stage.image_of("aws-ccm", &build_script(s, "scripts/build-go-tool.sh", &["ccm-aws"])?, None)?,
    }
    std::fs::remove_dir_all(&stage.root).with_context(|| format!("removing {}", stage.root.display()))?;
    d.cmd(["image", "prune", "-f", "--filter", &format!("label={LABEL}")]).run()
}

/// Where the build contexts are staged.
struct Stage<'a> {
    s: &'a Settings,
    d: &'a Docker,
    root: std::path::PathBuf,
    tag: String,
}

impl Stage<'_> {
    /// fakecloud/NAME:TAG from docker/NAME.Dockerfile, with the binary `bin` staged by its file name, and
    /// `plugins` (a directory) staged beside it as cni-plugins/.
    fn image_of(&self, name: &str, bin: &Path, plugins: Option<&Path>) -> anyhow::Result<()> {
        let context = self.root.join(name);
        if context.exists() {
            std::fs::remove_dir_all(&context).with_context(|| format!("removing {}", context.display()))?;
        }
        std::fs::create_dir_all(&context).with_context(|| format!("creating {}", context.display()))?;
        if let Some(plugins) = plugins {
            cmd("cp", ["-r".as_ref(), plugins.as_os_str(), context.join("cni-plugins").as_os_str()]).run()?;
        }
        let staged = context.join(bin.file_name().with_context(|| format!("{} has no file name", bin.display()))?);
        // Without its debug info (symbols stay, so a backtrace still names functions): a debug build's binary is
        // mostly DWARF, and every kind node holds each image twice (its layers and the unpacked copy).
        cmd("objcopy", ["--strip-debug".as_ref(), bin.as_os_str(), staged.as_os_str()]).run()?;
        let size = mebibytes(staged.metadata()?.len());
        let image = format!("fakecloud/{name}:{}", self.tag);
        step(&format!("building image {image} ({size} MB binary)"), || {
            let dockerfile = self.s.repo.join(format!("docker/{name}.Dockerfile"));
            // --network none: nothing in these Dockerfiles may need a network, offline or not.
            self.d
                .cmd(["build", "--quiet", "--network", "none", "--label", &format!("{LABEL}={name}"), "-f"])
                .arg(&dockerfile)
                .args(["-t", &image])
                .arg(&context)
                .run()
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_are_whole_mebibytes_rounded_up_as_du_shows_them() {
        assert_eq!(super::mebibytes(0), 0);
        assert_eq!(super::mebibytes(1), 1);
        assert_eq!(super::mebibytes(1 << 20), 1);
        assert_eq!(super::mebibytes((1 << 20) + 1), 2);
    }
}

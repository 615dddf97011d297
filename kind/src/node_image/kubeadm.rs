//! The images kubeadm asks the node's containerd for, tiny and offline: named exactly as `kubeadm config images
//! list --image-repository fakecloud.local` says, built from generated Dockerfiles around our binaries. pause
//! is FROM scratch; etcd, the control plane and coredns FROM debian:bookworm-slim; kube-proxy FROM a Debian
//! base with iptables, nftables, conntrack and ipset, and the iptables wrapper.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::docker::Docker;
use crate::inputs::Inputs;

/// The label with the hash of what an image was built from (also on the node image).
pub const LABEL_INPUTS: &str = "io.fakecloud.inputs";
const NAMES: [&str; 7] =
    ["pause", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns"];

/// kube-proxy's iptables must be the backend (legacy or nft) the node already uses, or its rules and the node's
/// would live in different tables. Like upstream's iptables-wrapper: the first call picks it from the rules
/// kubelet left (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY) or anything else there, points the commands at it and
/// runs the real command.
const IPTABLES_WRAPPER: &str = include_str!("iptables-wrapper.sh");

/// The kubeadm images: name → reference (`fakecloud.local/pause:3.10`).
#[derive(Debug)]
pub struct KubeadmImages(BTreeMap<String, String>);

impl KubeadmImages {
    /// From `kubeadm config images list`'s output: every image this module builds, and no other.
    pub fn parse(list: &str, k8s_version: &str) -> anyhow::Result<Self> {
        let images: BTreeMap<String, String> = list
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(|reference| {
                let last = reference.rsplit('/').next().unwrap_or(reference);
                let name = last.split(':').next().unwrap_or(last);
                (name.to_string(), reference.to_string())
            })
            .collect();
        if let Some(name) = NAMES.iter().find(|name| !images.contains_key(**name)) {
            bail!(
                "kubeadm {k8s_version} does not list a {name} image (kubeadm config images list); the image set \
                 fakecloud-kind node-image builds needs updating (kind/src/node_image/kubeadm.rs)"
            );
        }
        if images.len() != NAMES.len() {
            let all: Vec<&str> = images.values().map(String::as_str).collect();
            bail!("kubeadm {k8s_version} lists images fakecloud-kind node-image does not build: {}", all.join(" "));
        }
        Ok(KubeadmImages(images))
    }

    pub fn reference(&self, name: &str) -> anyhow::Result<&str> {
        self.0.get(name).map(String::as_str).with_context(|| format!("no kubeadm image {name}"))
    }

    pub fn references(&self) -> impl Iterator<Item = &str> {
        self.0.values().map(String::as_str)
    }

    /// The tag of pause's reference (`3.10`).
    pub fn pause_tag(&self) -> anyhow::Result<&str> {
        let reference = self.reference("pause")?;
        Ok(reference.rsplit_once(':').map_or(reference, |(_, tag)| tag))
    }
}

/// The Dockerfile of kubeadm image `name` FROM `from`; its files are in the build context by their names.
pub fn dockerfile_for(name: &str, from: &str) -> String {
    let body = match name {
        "pause" => "COPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n".to_string(),
        "coredns" => "COPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT [\"/coredns\"]\n".to_string(),
        "kube-proxy" => concat!(
            "COPY kube-proxy /usr/local/bin/kube-proxy\n",
            "COPY iptables-wrapper /usr/sbin/iptables-wrapper\n",
            "RUN chmod 0755 /usr/sbin/iptables-wrapper && for c in iptables ip6tables; do for s in \"\" -save -restore; ",
            "do ln -sf iptables-wrapper \"/usr/sbin/$c$s\"; done; done\n",
            "ENTRYPOINT [\"/usr/local/bin/kube-proxy\"]\n",
        )
        .to_string(),
        // etcd and the control plane: kubeadm's static pods run them by name from PATH.
        _ => format!("COPY {name} /usr/local/bin/{name}\nENTRYPOINT [\"/usr/local/bin/{name}\"]\n"),
    };
    format!("# {name} for kind nodes without a registry; built by fakecloud-kind node-image\nFROM {from}\n{body}")
}

/// Builds kubeadm image `name` (reference `reference`) FROM `from` with `files` copied into its context under
/// `work`. Skipped when the image exists with the same inputs: the Dockerfile, the base image's ID, files made
/// in `work` by content and the (large) cached binaries by name, size and time.
fn build_image(
    d: &Docker,
    work: &Path,
    name: &str,
    reference: &str,
    from: &str,
    files: &[PathBuf],
) -> anyhow::Result<()> {
    let context = work.join(name);
    std::fs::create_dir_all(&context)?;
    let mut inputs = Inputs::default();
    let mut dockerfile = dockerfile_for(name, from);
    inputs.add(&dockerfile);
    if from != "scratch" {
        inputs.add(d.cmd(["image", "inspect", "-f", "{{.Id}}", from]).output()?);
    }
    for file in files {
        let staged = context.join(file.file_name().context("a file to stage has a name")?);
        // Hard links where they can be (the work dir is in the same cache), copies where not.
        if std::fs::hard_link(file, &staged).is_err() {
            std::fs::copy(file, &staged)
                .with_context(|| format!("copying {} into {}", file.display(), context.display()))?;
        }
        if file.starts_with(work) {
            inputs.content(file)?
        } else {
            inputs.stat(file)?
        };
    }
    let hash = inputs.hex(16);
    if d.label(reference, LABEL_INPUTS).as_deref() == Some(hash.as_str()) {
        tracing::info!("{reference} is up to date");
        return Ok(());
    }
    dockerfile.push_str(&format!("LABEL {LABEL_INPUTS}={hash}\n"));
    std::fs::write(context.join("Dockerfile"), dockerfile)?;
    d.cmd(["build", "-q", "--network", "none", "-t", reference])
        .arg(&context)
        .run()
        .with_context(|| format!("docker build of {reference} failed"))?;
    tracing::info!("built {reference}");
    Ok(())
}

/// Where the binaries of the kubeadm images are: the control plane's and the node's.
pub struct Binaries<'a> {
    pub control_plane: &'a Path,
    pub node: &'a Path,
}

/// Builds the seven images (each skipped when current), FROM `base` or, for kube-proxy, `iptables_base`.
pub fn build_images(
    d: &Docker,
    work: &Path,
    images: &KubeadmImages,
    bins: &Binaries<'_>,
    base: &str,
    iptables_base: &str,
) -> anyhow::Result<()> {
    let wrapper = work.join("iptables-wrapper");
    std::fs::write(&wrapper, IPTABLES_WRAPPER)?;
    let (cp, node) = (bins.control_plane, bins.node);
    let builds: [(&str, &str, Vec<PathBuf>); 7] = [
        ("pause", "scratch", vec![node.join("pause")]),
        ("etcd", base, vec![cp.join("etcd")]),
        ("kube-apiserver", base, vec![cp.join("kube-apiserver")]),
        ("kube-controller-manager", base, vec![cp.join("kube-controller-manager")]),
        ("kube-scheduler", base, vec![node.join("kube-scheduler")]),
        ("coredns", base, vec![node.join("coredns")]),
        ("kube-proxy", iptables_base, vec![node.join("kube-proxy"), wrapper.clone()]),
    ];
    for (name, from, files) in builds {
        build_image(d, work, name, images.reference(name)?, from, &files)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // `kubeadm config images list --kubernetes-version v1.37.2 --image-repository fakecloud.local`, as it prints.
    const LISTED: &str = "fakecloud.local/kube-apiserver:v1.37.2\n\
                          fakecloud.local/kube-controller-manager:v1.37.2\n\
                          fakecloud.local/kube-scheduler:v1.37.2\n\
                          fakecloud.local/kube-proxy:v1.37.2\n\
                          fakecloud.local/coredns:v1.14.6\n\
                          fakecloud.local/pause:3.10.1\n\
                          fakecloud.local/etcd:3.6.6-0\n";

    #[test]
    fn kubeadms_list_gives_each_image_its_reference() {
        let images = KubeadmImages::parse(LISTED, "v1.37.2").expect("the seven images");
        assert_eq!(images.reference("etcd").ok(), Some("fakecloud.local/etcd:3.6.6-0"));
        assert_eq!(images.reference("coredns").ok(), Some("fakecloud.local/coredns:v1.14.6"));
        assert_eq!(images.pause_tag().ok(), Some("3.10.1"));
        assert_eq!(images.references().count(), 7);
        assert!(images.reference("kindnetd").is_err());
    }

    #[test]
    fn an_image_missing_from_or_added_to_kubeadms_list_is_refused() {
        let without_pause: String = LISTED.lines().filter(|l| !l.contains("pause")).map(|l| format!("{l}\n")).collect();
        let err = KubeadmImages::parse(&without_pause, "v1.37.2").unwrap_err().to_string();
        assert!(err.contains("does not list a pause image"), "{err}");
        let with_more = format!("{LISTED}fakecloud.local/kube-dns-autoscaler:1.0\n");
        let err = KubeadmImages::parse(&with_more, "v1.37.2").unwrap_err().to_string();
        assert!(err.contains("does not build") && err.contains("kube-dns-autoscaler:1.0"), "{err}");
    }

    #[test]
    fn each_kind_of_kubeadm_image_gets_its_dockerfile() {
        let header = "# pause for kind nodes without a registry; built by fakecloud-kind node-image\n";
        assert_eq!(
            dockerfile_for("pause", "scratch"),
            format!("{header}FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n")
        );
        let coredns = dockerfile_for("coredns", "debian:bookworm-slim");
        assert!(coredns.contains("FROM debian:bookworm-slim\nCOPY coredns /coredns\nEXPOSE 53 53/udp\n"), "{coredns}");
        assert!(coredns.ends_with("ENTRYPOINT [\"/coredns\"]\n"), "{coredns}");
        let proxy = dockerfile_for("kube-proxy", "fakecloud.local/debian-iptables:bookworm");
        assert!(proxy.contains("FROM fakecloud.local/debian-iptables:bookworm\n"), "{proxy}");
        assert!(proxy.contains("COPY iptables-wrapper /usr/sbin/iptables-wrapper\n"), "{proxy}");
        assert!(
            proxy.contains(
                "for c in iptables ip6tables; do for s in \"\" -save -restore; do ln -sf iptables-wrapper \"/usr/sbin/$c$s\"; done; done\n"
            ),
            "{proxy}"
        );
        assert!(proxy.ends_with("ENTRYPOINT [\"/usr/local/bin/kube-proxy\"]\n"), "{proxy}");
        for name in ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"] {
            let file = dockerfile_for(name, "debian:bookworm-slim");
            let want = format!("COPY {name} /usr/local/bin/{name}\nENTRYPOINT [\"/usr/local/bin/{name}\"]\n");
            assert!(file.ends_with(&want), "{file}");
        }
    }

    #[test]
    fn the_iptables_wrapper_is_a_posix_script_that_runs_the_real_command() {
        assert!(IPTABLES_WRAPPER.starts_with("#!/bin/sh\n"));
        assert!(IPTABLES_WRAPPER.trim_end().ends_with("exec \"$0\" \"$@\""));
        let out = crate::run::cmd("sh", ["-n", "-c", IPTABLES_WRAPPER]).output();
        assert!(out.is_ok(), "sh -n: {out:?}");
    }
}

//! The offline kind node image `fakecloud/kind-node:<k8s version>`, built by hand because `kind build
//! node-image` always pulls (its base image and the kubeadm images):
//!
//! 1. binaries: scripts/build-control-plane.sh (kube-apiserver, kube-controller-manager, etcd, kubectl) and
//!    node_binaries (kubelet, kubeadm, kube-proxy, kube-scheduler, crictl, coredns, kind), plus pause,
//!    compiled static from the kubernetes module's build/pause/linux/pause.c;
//! 2. the kubeadm images (kubeadm.rs);
//! 3. the node root filesystem: debootstrap with systemd, Debian's containerd and runc, the CNI plugins,
//!    iptables/nftables/conntrack/iproute2/socat/ebtables/kmod/e2fsprogs/pigz..., customized with kind's own
//!    files (node_rootfs.rs);
//! 4. a build container from that root filesystem gets kubeadm, kubelet, kubectl, crictl and /kind/version
//!    (what `kind create cluster` reads), imports the kubeadm images into its containerd (pinned, not unpacked:
//!    the node unpacks them on its /var volume) and is committed with kind's ENTRYPOINT, ENV and STOPSIGNAL.
//!
//! Every step is cached: binaries and root filesystems under $cache, images in the engine. The node image
//! carries labels with the Kubernetes version and a hash of its inputs (the code that makes it, the binaries,
//! kubeadm's image list); it is rebuilt only when they change.
//!
//! Clusters from this image need, in the kind config: networking.disableDefaultCNI: true (the image has no
//! kindnetd; bring a CNI), a ClusterConfiguration patch imageRepository: fakecloud.local, and on cgroup v1
//! hosts a KubeletConfiguration patch failCgroupV1: false. Needs root (debootstrap and chroot).

mod kubeadm;
mod node_rootfs;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::docker::Docker;
use crate::go::{Go, build_script};
use crate::host::{apt_install, is_executable, on_path, require_root};
use crate::inputs::Inputs;
use crate::node_binaries::{is_built, stamp_path};
use crate::pipe::pipe;
use crate::rootfs::{BASE_IMAGE, Customization, DEBIAN_SUITE, dir_name, import_rootfs_image, make_rootfs};
use crate::run::{cmd, step};
use crate::settings::{IMAGE_REPOSITORY, Settings};
use kubeadm::{Binaries, KubeadmImages, LABEL_INPUTS};

/// What kind's images/base/Dockerfile installs, minus what only rootless nodes (fuse-overlayfs) and storage e2e
/// tests (nfs-common, open-iscsi) use, plus Debian's containerd, runc and CNI plugins where kind builds its own,
/// and socat/ebtables/ipset that kubelet, kubeadm's checks and port-forward look for.
const NODE_PACKAGES: &[&str] = &[
    "systemd",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "conntrack",
    "iptables",
    "nftables",
    "ebtables",
    "ipset",
    "iproute2",
    "ethtool",
    "util-linux",
    "mount",
    "kmod",
    "socat",
    "libseccomp2",
    "pigz",
    "e2fsprogs",
    "bash",
    "ca-certificates",
    "curl",
    "jq",
    "procps",
];
/// kube-proxy's image base: what it execs (upstream bases it on distroless-iptables).
const KUBE_PROXY_PACKAGES: &[&str] = &["iptables", "nftables", "conntrack", "ipset", "kmod"];
const LABEL_VERSION: &str = "io.fakecloud.kubernetes-version";
const LABEL_ROOTFS: &str = "io.fakecloud.rootfs";
const ROOTFS_IMAGE: &str = "fakecloud/kind-node-rootfs";

/// The code that makes the node image, in its inputs hash: editing any of it rebuilds the image (the root
/// filesystem has its own key, node_rootfs::CODE).
const CODE: &[&str] = &[
    include_str!("node_image.rs"),
    include_str!("node_image/kubeadm.rs"),
    include_str!("node_image/iptables-wrapper.sh"),
    include_str!("node_image/node_rootfs.rs"),
    include_str!("node_image/default-storage.yaml"),
    include_str!("node_binaries.rs"),
    include_str!("go.rs"),
    include_str!("rootfs.rs"),
    include_str!("rootfs/finish.rs"),
    include_str!("settings.rs"),
];

/// The node image's build, once its binaries are there.
struct NodeBuild<'a> {
    s: &'a Settings,
    d: &'a Docker,
    go: Go,
    control_plane: PathBuf,
    node: PathBuf,
    images: KubeadmImages,
}

/// Makes sure the engine has the current node image (Settings::node_image), building what changed.
pub fn ensure(s: &Settings, d: &Docker) -> anyhow::Result<()> {
    require_root("the node image (its root filesystems are made with debootstrap and chroot)")?;
    let (control_plane, node) = step("binaries (control plane and node)", || {
        let control_plane = build_script(s, "scripts/build-control-plane.sh", &[])?;
        let node = crate::node_binaries::build(s)?;
        if !["kubectl", "etcd"].iter().all(|b| is_executable(&control_plane.join(b)))
            || !is_executable(&node.join("kubeadm"))
        {
            bail!(
                "the binary builds reported {} and {}, which lack kubectl, etcd or kubeadm",
                control_plane.display(),
                node.display()
            );
        }
        Ok((control_plane, node))
    })?;
    let kubeadm = node.join("kubeadm");
    let list = cmd(&kubeadm.display().to_string(), ["config", "images", "list", "--kubernetes-version"])
        .args([s.k8s_version.as_str(), "--image-repository", IMAGE_REPOSITORY])
        .output()?;
    let images = KubeadmImages::parse(&list, &s.k8s_version)?;
    tracing::info!("kubeadm {} images: {}", s.k8s_version, images.references().collect::<Vec<_>>().join(" "));
    let b = NodeBuild { s, d, go: Go::find(s)?, control_plane, node, images };

    let inputs = b.inputs_hash()?;
    let image = &s.node_image;
    if d.label(image, LABEL_VERSION).as_deref() == Some(s.k8s_version.as_str())
        && d.label(image, LABEL_INPUTS).as_deref() == Some(inputs.as_str())
    {
        tracing::info!("{image} is up to date ({})", d.size(image));
        return Ok(());
    }
    let version_dir = s.cache.join("kind").join(&s.k8s_version);
    std::fs::create_dir_all(&version_dir)?;
    let work = tempfile::Builder::new().prefix(".node-image.").tempdir_in(&version_dir)?;
    step(&format!("pause {} (static C)", b.images.pause_tag()?), || b.pause())?;
    step(BASE_IMAGE, || crate::rootfs::base_image(s, d))?;
    let iptables_base = format!("{IMAGE_REPOSITORY}/debian-iptables:{DEBIAN_SUITE}");
    step(&format!("{iptables_base} (kube-proxy's base)"), || b.iptables_base(&iptables_base))?;
    step("kubeadm images", || {
        let bins = Binaries { control_plane: &b.control_plane, node: &b.node };
        kubeadm::build_images(d, work.path(), &b.images, &bins, BASE_IMAGE, &iptables_base)
    })?;
    let rootfs_image = step("node root filesystem", || b.node_rootfs())?;
    step(&format!("node image {image}"), || b.commit(&rootfs_image, &inputs))?;
    prune_superseded_images(d, &rootfs_image);
    tracing::info!("{image} ready: {} (kind create cluster --image {image})", d.size(image));
    Ok(())
}

impl NodeBuild<'_> {
    /// Everything the image is made from: the code that makes it, the build scripts it runs, the binaries,
    /// kubeadm's image list.
    fn inputs_hash(&self) -> anyhow::Result<String> {
        let mut inputs = Inputs::default();
        inputs.code(CODE);
        for script in ["scripts/kind/k8s-ldflags.sh", "scripts/build-control-plane.sh"] {
            inputs.content(&self.s.repo.join(script))?;
        }
        for bin in ["etcd", "kube-apiserver", "kube-controller-manager", "kubectl"] {
            inputs.stat(&self.control_plane.join(bin))?;
        }
        for bin in ["kubeadm", "kubelet", "kube-proxy", "kube-scheduler", "crictl", "coredns"] {
            inputs.stat(&self.node.join(bin))?;
        }
        for reference in self.images.references() {
            inputs.add(reference);
        }
        Ok(inputs.hex(16))
    }

    /// pause, compiled static from the kubernetes module's source (what build/pause/Makefile does).
    fn pause(&self) -> anyhow::Result<()> {
        let tag = self.images.pause_tag()?;
        let src = self.go.kubernetes_dir(self.s)?.join("build/pause/linux/pause.c");
        if !src.is_file() {
            bail!(
                "pause.c not found at {} (is k8s.io/kubernetes {} in the module cache?)",
                src.display(),
                self.s.k8s_version
            );
        }
        let stamp = format!("{tag} {}", Inputs::default().content(&src)?.hex(16));
        if is_built(&self.node, "pause", &stamp) {
            tracing::info!("pause {tag} already built");
            return Ok(());
        }
        // gcc prints the full path of libc.a when a static libc is installed, and just the name when not.
        let static_libc = || cmd("gcc", ["-print-file-name=libc.a"]).output().is_ok_and(|p| p.starts_with('/'));
        if on_path("gcc").is_none() || !static_libc() {
            apt_install(&["gcc", "libc6-dev"], "compiling pause (static, so it needs a static libc)")?;
        }
        let tmp = self.node.join(".pause.tmp");
        cmd("gcc", ["-Os", "-Wall", "-Werror", "-static", "-s"])
            .arg(format!("-DVERSION=v{tag}-{}", self.s.k8s_version))
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
            .run_shown()
            .with_context(|| format!("compiling {} failed (see above)", src.display()))?;
        std::fs::rename(&tmp, self.node.join("pause"))?;
        std::fs::write(stamp_path(&self.node, "pause"), format!("{stamp}\n"))?;
        Ok(())
    }

    /// kube-proxy's base: a second debootstrap root filesystem, imported once per build of it (its directory's
    /// name, which carries its cache key, is the label that says the image is current).
    fn iptables_base(&self, image: &str) -> anyhow::Result<()> {
        let rootfs = make_rootfs(self.s, "debian-iptables", KUBE_PROXY_PACKAGES, None, "")?;
        let name = dir_name(&rootfs)?;
        if self.d.label(image, LABEL_ROOTFS).as_deref() == Some(name) {
            tracing::info!("{image} already imported");
            return Ok(());
        }
        let label = format!("LABEL {LABEL_ROOTFS}={name}");
        import_rootfs_image(self.d, &rootfs, image, &[label.as_str(), r#"CMD ["bash"]"#])
    }

    /// The node root filesystem, imported as fakecloud/kind-node-rootfs:<its cache key>; gives that image.
    fn node_rootfs(&self) -> anyhow::Result<String> {
        let stamp = stamp_path(&self.node, "kind");
        let kind_module = std::fs::read_to_string(&stamp)
            .with_context(|| format!("no {}; run fakecloud-kind node-binaries", stamp.display()))?;
        let kind_module = kind_module.trim_end();
        let kind_files = self.go.download(kind_module)?.join("images/base/files");
        if !kind_files.join("usr/local/bin/entrypoint").is_file() {
            bail!("{kind_module} has no images/base/files/usr/local/bin/entrypoint");
        }
        let pause_ref = self.images.reference("pause")?;
        let apply = |dir: &Path| node_rootfs::customize(dir, &kind_files, kind_module, pause_ref);
        let customization = Customization { code: node_rootfs::CODE, apply: &apply };
        let key = format!("{kind_module} {pause_ref}");
        let rootfs = make_rootfs(self.s, "kind-node", NODE_PACKAGES, Some(&customization), &key)?;
        let name = dir_name(&rootfs)?;
        let image = format!("{ROOTFS_IMAGE}:{}", name.rsplit('-').next().unwrap_or(name));
        if self.d.image_exists(&image) {
            tracing::info!("{image} already imported");
            return Ok(image);
        }
        let changes = [
            "ENV container=docker",
            "STOPSIGNAL SIGRTMIN+3",
            r#"ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]"#,
        ];
        import_rootfs_image(self.d, &rootfs, &image, &changes)?;
        tracing::info!("imported {image}");
        Ok(image)
    }

    /// The node image: a build container from `rootfs_image` with the binaries and the kubeadm images in its
    /// containerd, committed with kind's ENTRYPOINT and ENV and the labels.
    fn commit(&self, rootfs_image: &str, inputs: &str) -> anyhow::Result<()> {
        let c = BuildContainer::start(self.d, rootfs_image)?;
        // Where kind's own node image build puts them (its kubelet unit runs /usr/bin/kubelet).
        c.copy_in(&self.node.join("kubeadm"), "/usr/bin/kubeadm")?;
        c.copy_in(&self.node.join("kubelet"), "/usr/bin/kubelet")?;
        c.copy_in(&self.control_plane.join("kubectl"), "/usr/bin/kubectl")?;
        c.copy_in(&self.node.join("crictl"), "/usr/local/bin/crictl")?;
        c.exec(["sh", "-c", "cat >/kind/version"]).stdin(self.s.k8s_version.as_bytes()).run()?;

        // containerd as kind's build runs it: just long enough to import the images.
        c.exec(["bash", "-c", "nohup containerd >/tmp/containerd.log 2>&1 &"]).run()?;
        let started = "for _ in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && exec ctr version >/dev/null; \
                       sleep 0.2; done; exit 1";
        if c.exec(["bash", "-c", started]).run().is_err() {
            let log = c.exec(["tail", "-n", "5", "/tmp/containerd.log"]).output().unwrap_or_default();
            bail!("containerd did not start in the build container: {log}");
        }
        let references: Vec<&str> = self.images.references().collect();
        let save = self.d.command(["save"].into_iter().chain(references.iter().copied()));
        let import = self.d.command([
            "exec",
            "-i",
            &c.name,
            "ctr",
            "--namespace=k8s.io",
            "images",
            "import",
            "--label=io.cri-containerd.pinned=pinned",
            "--all-platforms",
            "--no-unpack",
            "--digests",
            "-",
        ]);
        pipe(save, import, "importing the kubeadm images into the node's containerd")?;
        let listed = c.exec(["ctr", "--namespace=k8s.io", "images", "ls", "-q"]).output()?;
        let missing = missing_images(&references, &listed);
        if !missing.is_empty() {
            bail!("the node's containerd lacks {} after the import", missing.join(" "));
        }
        c.exec(["pkill", "containerd"]).run()?;
        // Stopped means gone or a zombie: the container's PID 1 (sleep) never reaps it.
        let stopped =
            r#"for _ in $(seq 1 50); do ps -C containerd -o stat= | grep -qv "^Z" || exit 0; sleep 0.2; done; exit 1"#;
        c.exec(["bash", "-c", stopped]).run().context("containerd did not stop in the build container")?;
        c.exec(["bash", "-c", "rm -rf /tmp/* /var/tmp/* /run/containerd"]).run()?;

        let labels = format!("LABEL {LABEL_VERSION}={} {LABEL_INPUTS}={inputs}", self.s.k8s_version);
        self.d
            .cmd(["commit", "--change", r#"ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]"#])
            .args(["--change", "ENV container=docker", "--change", &labels, &c.name, &self.s.node_image])
            .run()
            .context("docker commit of the node image failed")
    }
}

/// The references `listed` (`ctr images ls -q`, one a line) lacks.
fn missing_images<'a>(references: &[&'a str], listed: &str) -> Vec<&'a str> {
    references.iter().copied().filter(|r| !listed.lines().any(|l| l.trim() == *r)).collect()
}

/// The container the node image is committed from; removed when dropped, whatever happened.
struct BuildContainer<'a> {
    d: &'a Docker,
    name: String,
}

impl<'a> BuildContainer<'a> {
    fn start(d: &'a Docker, image: &str) -> anyhow::Result<Self> {
        let name = format!("fakecloud-node-build-{}", std::process::id());
        let _ = d.cmd(["rm", "-f", "-v", &name]).run();
        d.cmd(["run", "-d", "--name", &name, "--network", "none", "--security-opt", "seccomp=unconfined"])
            .args(["--stop-signal", "SIGRTMIN+3", "--entrypoint", "sleep", image, "infinity"])
            .run()
            .with_context(|| format!("could not start a build container from {image}"))?;
        Ok(BuildContainer { d, name })
    }

    fn exec<const N: usize>(&self, args: [&str; N]) -> crate::run::Cmd {
        self.d.cmd(["exec", "-i", &self.name]).args(args)
    }

    fn copy_in(&self, file: &Path, to: &str) -> anyhow::Result<()> {
        self.d
            .cmd(["cp".as_ref(), file.as_os_str(), format!("{}:{to}", self.name).as_ref()])
            .run()
            .with_context(|| format!("docker cp of {} into the build container failed", file.display()))?;
        self.exec(["chown", "root:root", to]).run()?;
        self.exec(["chmod", "0755", to]).run()
    }
}

impl Drop for BuildContainer<'_> {
    fn drop(&mut self) {
        let _ = self.d.cmd(["rm", "-f", "-v", &self.name]).run();
    }
}

/// What earlier runs left: root filesystem images superseded by the current one, and the untagged remains of
/// images this build replaced (only those carrying its label, never anyone else's).
fn prune_superseded_images(d: &Docker, current: &str) {
    let listed = d.cmd(["image", "ls", "--format", "{{.Repository}}:{{.Tag}}", ROOTFS_IMAGE]).output();
    for image in listed.unwrap_or_default().lines().filter(|i| *i != current) {
        tracing::info!("removing the superseded {image}");
        let _ = d.cmd(["rmi", image]).run();
    }
    let _ = d.cmd(["image", "prune", "-f", "--filter", &format!("label={LABEL_INPUTS}")]).run();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_the_import_left_out_is_named() {
        let refs = ["fakecloud.local/pause:3.10.1", "fakecloud.local/etcd:3.6.6-0"];
        assert!(missing_images(&refs, "fakecloud.local/etcd:3.6.6-0\nfakecloud.local/pause:3.10.1\n").is_empty());
        assert_eq!(missing_images(&refs, "fakecloud.local/pause:3.10.1\n"), ["fakecloud.local/etcd:3.6.6-0"]);
        // A digest reference of the same image is not the tag kubeadm asks for.
        assert_eq!(missing_images(&refs[..1], "fakecloud.local/pause@sha256:abc\n"), ["fakecloud.local/pause:3.10.1"]);
    }
}

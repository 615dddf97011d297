//! Debian root filesystems made with `debootstrap --variant=minbase` from this machine's own apt mirror, cached
//! under $cache/kind/rootfs and imported into the engine as images; among them debian:bookworm-slim, the base
//! our Dockerfiles and the kind images build FROM, when no registry gives it. No registry and no mirror host is
//! named here: the mirror is whatever this machine's apt already uses (FAKECLOUD_DEBIAN_MIRROR overrides it).

mod files;
mod finish;

use std::fs::File;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use crate::docker::Docker;
use crate::host::{apt_install, env_setting, on_path, require_root};
use crate::inputs::Inputs;
use crate::pipe::pipe;
use crate::run::{cmd, step};
use crate::settings::Settings;

pub use self::files::{glob, in_rootfs, install, remove_glob, symlink_force};

pub const DEBIAN_SUITE: &str = "bookworm";
/// The base image of docker/*.Dockerfile and of the kubeadm images.
pub const BASE_IMAGE: &str = "debian:bookworm-slim";
const DEBOOTSTRAP_ARGS: [&str; 2] = ["--variant=minbase", "--components=main"];
const FINISH_SOURCE: &str = include_str!("rootfs/finish.rs");

/// Makes sure the engine has debian:bookworm-slim without needing a registry: present already, nothing to do;
/// else, off the private engine and unless FAKECLOUD_OFFLINE=1, a `docker pull` bounded by
/// FAKECLOUD_PULL_TIMEOUT (where a registry answers, users get the real one); else debootstrap and `docker
/// import` under that name, so the same Dockerfiles build offline and online. Needs root for debootstrap.
pub fn base_image(s: &Settings, d: &Docker) -> anyhow::Result<()> {
    if d.image_exists(BASE_IMAGE) {
        tracing::info!("{BASE_IMAGE} is already in the engine");
        return Ok(());
    }
    // The private engine is offline by design (its containers reach nothing outside): never pull there.
    let private = d.host.as_deref() == Some(s.private_docker_host().as_str());
    if env_setting("FAKECLOUD_OFFLINE").as_deref() != Some("1") && !private {
        let timeout = env_setting("FAKECLOUD_PULL_TIMEOUT").unwrap_or_else(|| "30".into());
        if timeout.parse::<u32>().is_err() {
            bail!("FAKECLOUD_PULL_TIMEOUT must be a number of seconds, not '{timeout}'");
        }
        tracing::info!("pulling {BASE_IMAGE} (at most {timeout}s; FAKECLOUD_OFFLINE=1 skips this)");
        let pull = cmd("timeout", [timeout.as_str(), "docker", "pull", "-q", BASE_IMAGE]);
        if pull.envs(d.host.as_deref().map(|h| ("DOCKER_HOST", h))).succeeds() {
            tracing::info!("pulled {BASE_IMAGE}");
            return Ok(());
        }
        tracing::info!("no registry answered; building {BASE_IMAGE} from the Debian mirror instead");
    }
    let rootfs = step(&format!("debootstrap {BASE_IMAGE} root filesystem"), || {
        make_rootfs(s, "debian-bookworm-slim", &[], None, "")
    })?;
    step(&format!("import {BASE_IMAGE}"), || import_rootfs_image(d, &rootfs, BASE_IMAGE, &[r#"CMD ["bash"]"#]))?;
    tracing::info!("{BASE_IMAGE} ready ({})", d.size(BASE_IMAGE));
    Ok(())
}

/// The first http(s) URI this machine's apt sources use for DEBIAN_SUITE itself (not -updates or -security),
/// from one-line .list files, else deb822 .sources files; FAKECLOUD_DEBIAN_MIRROR when set.
pub fn apt_mirror() -> anyhow::Result<String> {
    if let Some(mirror) = env_setting("FAKECLOUD_DEBIAN_MIRROR") {
        return Ok(mirror);
    }
    let parts = Path::new("/etc/apt/sources.list.d");
    let lists = std::iter::once(PathBuf::from("/etc/apt/sources.list")).chain(glob(parts, "*.list")?);
    let in_lists = lists.filter_map(|f| std::fs::read_to_string(f).ok()).find_map(|t| mirror_in_list(&t, DEBIAN_SUITE));
    if let Some(mirror) = in_lists {
        return Ok(mirror);
    }
    let sources = glob(parts, "*.sources")?;
    let in_sources = sources
        .into_iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|t| mirror_in_sources(&t, DEBIAN_SUITE));
    in_sources.with_context(|| {
        format!(
            "found no http(s) Debian mirror for '{DEBIAN_SUITE}' in /etc/apt/sources.list or \
             /etc/apt/sources.list.d/*.{{list,sources}}.\nAdd the mirror this machine installs packages from there, \
             or set FAKECLOUD_DEBIAN_MIRROR to its URL."
        )
    })
}

fn is_http(uri: &str) -> bool {
    uri.starts_with("http://") || uri.starts_with("https://")
}

/// The mirror of `suite` in a one-line sources.list: `deb [options] URI suite components...`.
fn mirror_in_list(text: &str, suite: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"deb") {
            return None;
        }
        let mut i = 1;
        if words.get(i)?.starts_with('[') {
            // The options run to the word that ends with ']'.
            while i < words.len() && !words[i].ends_with(']') {
                i += 1;
            }
            i += 1;
        }
        let (uri, its_suite) = (*words.get(i)?, *words.get(i + 1)?);
        (its_suite == suite && is_http(uri)).then(|| uri.to_string())
    })
}

/// The mirror of `suite` in deb822 .sources: paragraphs of `Field: value` lines (a value may continue on
/// indented lines); a paragraph with `Enabled: no` is skipped.
fn mirror_in_sources(text: &str, suite: &str) -> Option<String> {
    text.lines().collect::<Vec<_>>().split(|line| line.trim().is_empty()).find_map(|paragraph| {
        let mut fields: Vec<(String, String)> = Vec::new();
        for line in paragraph.iter().filter(|l| !l.starts_with('#')) {
            if line.starts_with([' ', '\t']) {
                if let Some((_, value)) = fields.last_mut() {
                    value.push(' ');
                    value.push_str(line.trim());
                }
            } else if let Some((key, value)) = line.split_once(':') {
                fields.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
        let field = |name: &str| fields.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str());
        let has = |name: &str, word: &str| field(name).split_whitespace().any(|w| w == word);
        if field("enabled").eq_ignore_ascii_case("no") || !has("types", "deb") || !has("suites", suite) {
            return None;
        }
        field("uris").split_whitespace().find(|u| is_http(u)).map(str::to_string)
    })
}

/// Installs debootstrap when it is missing.
fn ensure_debootstrap() -> anyhow::Result<()> {
    if on_path("debootstrap").is_some() {
        return Ok(());
    }
    apt_install(&["debootstrap"], "building a root filesystem")
}

/// The mount points at or below `dir` in a /proc/self/mounts text, deepest first (the order to unmount them
/// in). The kernel writes a space in a path as \040.
fn mounts_below(mounts: &str, dir: &Path) -> Vec<PathBuf> {
    let dir = format!("{}/", dir.display().to_string().trim_end_matches('/'));
    let mut below: Vec<String> = mounts
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(unescape_mount_path)
        .filter(|target| format!("{target}/").starts_with(&dir))
        .collect();
    // Reverse order puts a mount's submounts (longer paths with it as prefix) before it.
    below.sort_unstable_by(|a, b| b.cmp(a));
    below.into_iter().map(PathBuf::from).collect()
}

fn unescape_mount_path(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Unmounts whatever is still mounted below `dir` (an interrupted debootstrap leaves /proc and /sys mounted in
/// its target), deepest first, so removing the directory never reaches into them.
fn unmount_below(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return };
    for target in mounts_below(&mounts, dir) {
        // Lazily: a mount still busy is detached now and goes when its last user does.
        let _ = cmd("umount", ["-l".as_ref(), target.as_os_str()]).run();
    }
}

/// Removes a root filesystem (or a leftover of one), never crossing into a mount below it.
fn remove_tree(dir: &Path) {
    unmount_below(dir);
    let _ = cmd("rm", ["-rf".as_ref(), "--one-file-system".as_ref(), dir.as_os_str()]).run();
}

/// The code that customizes a root filesystem after debootstrap: `apply` runs on its directory.
pub struct Customization<'a> {
    /// The source files the code lives in (`include_str!`), in the cache key: editing them rebuilds.
    pub code: &'a [&'static str],
    pub apply: &'a dyn Fn(&Path) -> anyhow::Result<()>,
}

/// The cache key of a root filesystem: the suite, debootstrap's arguments, the packages, the customization's
/// code, finish_rootfs's code and the caller's `key` (what else the customization reads).
fn cache_key(packages: &[&str], code: &[&str], key: &str) -> String {
    Inputs::default()
        .add(DEBIAN_SUITE)
        .add(DEBOOTSTRAP_ARGS.join(" "))
        .add(packages.join(","))
        .add(key)
        .code(code)
        .code(&[FINISH_SOURCE])
        .hex(12)
}

/// Whether `entry` (a name in the rootfs cache) is another build of root filesystem `name` than `current`:
/// `NAME-<12 hex>` or its `.complete` marker.
fn is_older_build(entry: &str, name: &str, current: &str) -> bool {
    let Some(hash) = entry.strip_prefix(name).and_then(|r| r.strip_prefix('-')) else { return false };
    let hash = hash.strip_suffix(".complete").unwrap_or(hash);
    hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()) && !entry.starts_with(current)
}

/// The process that made scratch directory `entry` (`.NAME.<pid>.<random>`) for root filesystem `name`.
fn scratch_owner(entry: &str, name: &str) -> Option<u32> {
    let rest = entry.strip_prefix('.')?.strip_prefix(name)?.strip_prefix('.')?;
    rest.split_once('.')?.0.parse().ok()
}

/// A root filesystem being made: removed (with what is mounted below it) unless it is kept. Its name carries
/// our process ID: one left by a run that was killed (no destructor ran) is removed by the next run.
struct Scratch {
    dir: PathBuf,
    kept: bool,
}

impl Scratch {
    fn new(cache: &Path, name: &str) -> anyhow::Result<Self> {
        for entry in std::fs::read_dir(cache)?.filter_map(Result::ok) {
            let owner = scratch_owner(&entry.file_name().to_string_lossy(), name);
            if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                tracing::info!("removing what an interrupted run left: {}", entry.path().display());
                remove_tree(&entry.path());
            }
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{name}.{}.", std::process::id()))
            .tempdir_in(cache)
            .with_context(|| format!("creating a directory in {}", cache.display()))?
            .keep();
        // It becomes the image's /.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        Ok(Scratch { dir, kept: false })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.kept {
            remove_tree(&self.dir);
        }
    }
}

/// The directory of a minbase DEBIAN_SUITE root filesystem with `packages` and their dependencies, after
/// `customize` and finish_rootfs ran on it. Cached as $cache/kind/rootfs/NAME-<12 hex of cache_key> with a
/// NAME-<hash>.complete marker beside it; older NAME-* are removed. Needs root.
pub fn make_rootfs(
    s: &Settings,
    name: &str,
    packages: &[&str],
    customize: Option<&Customization<'_>>,
    key: &str,
) -> anyhow::Result<PathBuf> {
    require_root("building a root filesystem with debootstrap")?;
    let cache = s.cache.join("kind/rootfs");
    let current = format!("{name}-{}", cache_key(packages, customize.map_or(&[], |c| c.code), key));
    let dir = cache.join(&current);
    let complete = cache.join(format!("{current}.complete"));
    if complete.exists() {
        tracing::info!("root filesystem {name} already built: {}", dir.display());
        return Ok(dir);
    }
    ensure_debootstrap()?;
    let mirror = apt_mirror()?;
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    // Not a TempDir: removing it must unmount what debootstrap left mounted below it first.
    let mut scratch = Scratch::new(&cache, name)?;
    let tmp = scratch.dir.clone();

    let log = cache.join(format!("{name}.debootstrap.log"));
    let with = if packages.is_empty() { String::new() } else { format!("(with {}) ", packages.join(",")) };
    tracing::info!("debootstrap --variant=minbase {DEBIAN_SUITE} {with}from {mirror} (log: {})", log.display());
    let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut debootstrap = Command::new("debootstrap");
    debootstrap.args(DEBOOTSTRAP_ARGS);
    if !packages.is_empty() {
        debootstrap.arg(format!("--include={}", packages.join(",")));
    }
    let status = debootstrap
        .arg(DEBIAN_SUITE)
        .arg(&tmp)
        .arg(&mirror)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .context("cannot run debootstrap")?;
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("{}", lines[lines.len().saturating_sub(20)..].join("\n"));
        bail!(
            "debootstrap failed (last lines above; all of it in {}). Check that {mirror} answers (apt-get update) \
             and that the packages exist in {DEBIAN_SUITE}.",
            log.display()
        );
    }
    if let Some(c) = customize {
        (c.apply)(&tmp).with_context(|| format!("customizing the root filesystem {name}"))?;
    }
    finish::finish_rootfs(&tmp).with_context(|| format!("finishing the root filesystem {name}"))?;

    for entry in std::fs::read_dir(&cache)?.filter_map(Result::ok) {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        if is_older_build(&entry_name, name, &current) {
            tracing::info!("removing an older root filesystem: {}", entry.path().display());
            remove_tree(&entry.path());
        }
    }
    // An unfinished one of the same hash (a run stopped between the rename and the marker) is replaced.
    if dir.exists() {
        remove_tree(&dir);
    }
    std::fs::rename(&tmp, &dir).with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))?;
    scratch.kept = true;
    File::create(&complete).with_context(|| format!("creating {}", complete.display()))?;
    let size = cmd("du", ["-sh".as_ref(), dir.as_os_str()]).output().unwrap_or_default();
    let size = size.split_whitespace().next().unwrap_or("?");
    tracing::info!("root filesystem {name} ready: {} ({size})", dir.display());
    Ok(dir)
}

/// The name of a root filesystem's directory (NAME-<hash>): its images' label says which one they hold.
pub fn dir_name(dir: &Path) -> anyhow::Result<&str> {
    dir.file_name().and_then(|n| n.to_str()).with_context(|| format!("{} has no name", dir.display()))
}

/// Imports a root filesystem as image `tag`, with `docker import --change` for each of `changes`; tar feeds
/// docker directly.
pub fn import_rootfs_image(d: &Docker, dir: &Path, tag: &str, changes: &[&str]) -> anyhow::Result<()> {
    let mut tar = Command::new("tar");
    tar.args(["--numeric-owner", "-C"]).arg(dir).args(["-c", "."]);
    let mut import = d.command(["import"]);
    for change in changes {
        import.args(["--change", change]);
    }
    import.args(["-", tag]);
    pipe(tar, import, &format!("docker import of {} as {tag}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_of_the_suite_is_read_from_a_one_line_list() {
        let list = "# deb http://commented.example/debian bookworm main\n\
                    deb http://deb.example/debian bookworm-updates main\n\
                    deb-src http://src.example/debian bookworm main\n\
                    deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://deb.example/debian bookworm main contrib\n\
                    deb http://other.example/debian bookworm main\n";
        assert_eq!(mirror_in_list(list, "bookworm").as_deref(), Some("http://deb.example/debian"));
        // One-word options, and a mirror that is not http(s).
        let list =
            "deb [trusted=yes] file:///srv/mirror bookworm main\ndeb [trusted=yes] https://m.example/d bookworm main\n";
        assert_eq!(mirror_in_list(list, "bookworm").as_deref(), Some("https://m.example/d"));
        assert_eq!(mirror_in_list("deb http://m.example/d bookworm-security main\n", "bookworm"), None);
        assert_eq!(mirror_in_list("deb [broken\n", "bookworm"), None);
    }

    #[test]
    fn the_mirror_of_the_suite_is_read_from_deb822_sources() {
        let sources = "Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nEnabled: no\n\n\
                       # the updates\nTypes: deb\nURIs: http://updates.example/debian\nSuites: bookworm-updates\n\n\
                       Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n\
                       Types: deb deb-src\nURIs: file:///srv/mirror\n  https://deb.example/debian\n\
                       Suites: bookworm bookworm-updates\nComponents: main\n\
                       Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";
        assert_eq!(mirror_in_sources(sources, "bookworm").as_deref(), Some("https://deb.example/debian"));
        let enabled = "types: deb\nuris: http://m.example/d\nsuites: bookworm\nenabled: Yes\n";
        assert_eq!(mirror_in_sources(enabled, "bookworm").as_deref(), Some("http://m.example/d"));
        assert_eq!(mirror_in_sources("Types: deb\nURIs: http://m.example/d\nSuites: trixie\n", "bookworm"), None);
    }

    #[test]
    fn what_is_mounted_below_a_directory_is_unmounted_deepest_first() {
        let mounts = "proc /proc proc rw 0 0\n\
                      /dev/sda1 /cache/kind/rootfs ext4 rw 0 0\n\
                      proc /cache/kind/rootfs/.node.x1/proc proc rw 0 0\n\
                      sysfs /cache/kind/rootfs/.node.x1/sys sysfs rw 0 0\n\
                      binfmt /cache/kind/rootfs/.node.x1/proc/sys/fs/binfmt_misc binfmt_misc rw 0 0\n\
                      proc /cache/kind/rootfs/.node.x10/proc proc rw 0 0\n\
                      tmpfs /cache/kind/rootfs/.node.x1/with\\040space tmpfs rw 0 0\n";
        let dir = Path::new("/cache/kind/rootfs/.node.x1");
        let want = [
            "/cache/kind/rootfs/.node.x1/with space",
            "/cache/kind/rootfs/.node.x1/sys",
            "/cache/kind/rootfs/.node.x1/proc/sys/fs/binfmt_misc",
            "/cache/kind/rootfs/.node.x1/proc",
        ];
        assert_eq!(mounts_below(mounts, dir), want.map(PathBuf::from));
        // The directory itself counts; a trailing slash changes nothing.
        let own = mounts_below("tmpfs /t/d tmpfs rw 0 0\n", Path::new("/t/d/"));
        assert_eq!(own, [PathBuf::from("/t/d")]);
        assert_eq!(unescape_mount_path(r"a\134b\040c\0"), r"a\b c\0");
    }

    #[test]
    fn the_cache_key_covers_every_input() {
        let base = cache_key(&["curl"], &["fn customize() {}\n"], "v1");
        assert_eq!(base, cache_key(&["curl"], &["fn customize() {}\n"], "v1"));
        assert_eq!(base.len(), 12);
        assert_ne!(base, cache_key(&["curl", "wget"], &["fn customize() {}\n"], "v1"));
        assert_ne!(base, cache_key(&["curl"], &["fn customize() { edited(); }\n"], "v1"));
        assert_ne!(base, cache_key(&["curl"], &["fn customize() {}\n"], "v2"));
        assert_ne!(base, cache_key(&["curl"], &[], "v1"));
        // A test beside the customization is not part of it.
        assert_eq!(base, cache_key(&["curl"], &["fn customize() {}\n#[cfg(test)]\nmod tests {}\n"], "v1"));
    }

    #[test]
    fn only_other_builds_of_the_same_root_filesystem_are_older() {
        let current = "kind-node-0123456789ab";
        assert!(is_older_build("kind-node-ba9876543210", "kind-node", current));
        assert!(is_older_build("kind-node-ba9876543210.complete", "kind-node", current));
        assert!(!is_older_build(current, "kind-node", current));
        assert!(!is_older_build("kind-node-0123456789ab.complete", "kind-node", current));
        assert!(!is_older_build("kind-node.debootstrap.log", "kind-node", current));
        assert!(!is_older_build(".kind-node.AbC123", "kind-node", current));
        // Another root filesystem whose name starts the same.
        assert!(!is_older_build("kind-node-extra-0123456789ab", "kind-node", current));
        assert!(!is_older_build("debian-iptables-0123456789ab", "debian", "debian-ba9876543210"));
    }

    #[test]
    fn a_scratch_directory_names_the_process_that_made_it() {
        assert_eq!(scratch_owner(".kind-node.4242.AbC123", "kind-node"), Some(4242));
        assert_eq!(scratch_owner(".kind-node.AbC123", "kind-node"), None, "no process ID");
        assert_eq!(scratch_owner(".kind-node-extra.4242.AbC123", "kind-node"), None);
        assert_eq!(scratch_owner("kind-node-0123456789ab", "kind-node"), None);
    }
}

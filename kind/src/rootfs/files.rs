//! Files in a root filesystem as the shell handles them: a command run in it (chroot), `rm -rf DIR/PATTERN`,
//! `install -D`, `ln -sf`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::run::{Cmd, cmd};

/// A command run inside the root filesystem `dir`, with a clean environment.
pub fn in_rootfs<I, S>(dir: &Path, args: I) -> Cmd
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    cmd("chroot", [dir.as_os_str()])
        .args([
            "/usr/bin/env",
            "-i",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME=/root",
            "LANG=C.UTF-8",
            "DEBIAN_FRONTEND=noninteractive",
        ])
        .args(args)
}

/// Whether a file name matches a shell pattern whose only wildcard is `*`; like the shell, `*` does not match a
/// leading dot.
fn glob_match(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else { return rest.is_empty() };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The entries of `dir` matching `pattern` (see glob_match), sorted; none when `dir` is missing.
pub fn glob(dir: &Path, pattern: &str) -> anyhow::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| glob_match(pattern, &e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

/// `rm -rf DIR/PATTERN` (see glob_match). A symbolic link is removed, never followed.
pub fn remove_glob(dir: &Path, pattern: &str) -> anyhow::Result<()> {
    for path in glob(dir, pattern)? {
        let is_dir = path.symlink_metadata().is_ok_and(|m| m.is_dir());
        let removed = if is_dir { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        removed.with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

/// `install -D -m MODE FROM TO`: a fresh file, its directories made (never written through a link already
/// there, which could point out of the root filesystem).
pub fn install(from: &Path, to: &Path, mode: u32) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    if to.symlink_metadata().is_ok() {
        std::fs::remove_file(to).with_context(|| format!("removing {}", to.display()))?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// `ln -sf TARGET LINK`.
pub fn symlink_force(target: &str, link: &Path) -> anyhow::Result<()> {
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(link).with_context(|| format!("removing {}", link.display()))?;
    }
    std::os::unix::fs::symlink(target, link).with_context(|| format!("linking {} to {target}", link.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_the_shell_matches_them() {
        assert!(glob_match("*", "lists"));
        assert!(!glob_match("*", ".hidden"));
        assert!(glob_match("*.bin", "pkgcache.bin"));
        assert!(!glob_match("*.bin", "pkgcache.bin.old"));
        assert!(glob_match("*-old", "config.dat-old"));
        assert!(glob_match("*udev*", "systemd-udevd-control.socket"));
        assert!(!glob_match("*udev*", "systemd-journald.socket"));
        assert!(glob_match("*.wants", "multi-user.target.wants"));
        assert!(glob_match("exact", "exact") && !glob_match("exact", "exactly"));
        assert!(!glob_match("a*a", "a"));
    }

    #[test]
    fn a_glob_is_removed_and_links_are_not_followed() {
        let root = tempfile::tempdir().expect("a temporary directory");
        let (dir, outside) = (root.path().join("wants"), root.path().join("outside"));
        std::fs::create_dir_all(dir.join("sub")).expect("created");
        std::fs::create_dir_all(&outside).expect("created");
        std::fs::write(outside.join("kept"), "").expect("written");
        std::fs::write(dir.join("a.service"), "").expect("written");
        std::fs::write(dir.join(".keep"), "").expect("written");
        std::os::unix::fs::symlink(&outside, dir.join("link")).expect("linked");
        remove_glob(&dir, "*").expect("removed");
        let left: Vec<_> = std::fs::read_dir(&dir).expect("there").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(left, [".keep"]);
        assert!(outside.join("kept").exists());
        remove_glob(&root.path().join("missing"), "*").expect("nothing to remove");
    }

    #[test]
    fn an_installed_file_replaces_a_link_and_never_writes_through_it() {
        let root = tempfile::tempdir().expect("a temporary directory");
        let (from, elsewhere) = (root.path().join("from"), root.path().join("elsewhere"));
        std::fs::write(&from, "new").expect("written");
        std::fs::write(&elsewhere, "kept").expect("written");
        let to = root.path().join("rootfs/usr/local/bin/tool");
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("created");
        std::os::unix::fs::symlink(&elsewhere, &to).expect("linked");
        install(&from, &to, 0o755).expect("installed");
        assert_eq!(std::fs::read_to_string(&elsewhere).expect("there"), "kept");
        assert_eq!(std::fs::read_to_string(&to).expect("there"), "new");
        assert_eq!(to.metadata().expect("there").permissions().mode() & 0o777, 0o755);
        install(&from, &root.path().join("fresh/dir/file"), 0o644).expect("its directories made");
        symlink_force("/usr/bin/containerd", &to).expect("linked");
        symlink_force("/usr/bin/containerd", &to).expect("linked again");
        assert_eq!(std::fs::read_link(&to).expect("a link"), Path::new("/usr/bin/containerd"));
    }
}

//! The last step of every root filesystem (its code is in each one's cache key): what debian:*-slim leaves
//! out, and nothing of the build machine: its resolv.conf and host name (Docker provides both at run time),
//! apt's downloaded lists, logs, docs and the device nodes debootstrap made.

use std::path::Path;

use anyhow::Context as _;

use super::files::{in_rootfs, remove_glob};

pub fn finish_rootfs(dir: &Path) -> anyhow::Result<()> {
    in_rootfs(dir, ["apt-get", "clean"]).run()?;
    for (parent, pattern) in [
        ("var/lib/apt/lists", "*"),
        ("var/cache/apt", "*.bin"),
        ("var/cache/debconf", "*-old"),
        ("var/log", "*"),
        ("tmp", "*"),
        ("var/tmp", "*"),
        ("usr/share/doc", "*"),
        ("usr/share/man", "*"),
        ("usr/share/info", "*"),
        ("dev", "*"),
    ] {
        remove_glob(&dir.join(parent), pattern)?;
    }
    for file in ["etc/hostname", "var/lib/dbus/machine-id"] {
        match std::fs::remove_file(dir.join(file)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", dir.join(file).display()));
            }
            _ => {}
        }
    }
    // Empty: systemd and others expect /etc/machine-id to exist (empty = generate at first boot).
    for file in ["etc/resolv.conf", "etc/machine-id"] {
        let path = dir.join(file);
        std::fs::write(&path, "").with_context(|| format!("emptying {}", path.display()))?;
    }
    Ok(())
}

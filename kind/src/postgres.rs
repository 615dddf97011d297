//! fakecloud/postgres:dev, the shared cloud's database on the offline kind path (deploy/farm/kind, `make
//! farm-kind`): PostgreSQL 15 from Debian's packages, debootstrapped from this machine's apt mirror like the base
//! image (cached, keyed by its packages, this file's code and the entrypoint), with
//! docker/postgres-entrypoint.sh, which keeps the official image's POSTGRES_* contract. Where a registry
//! answers, deploy/farm/base uses the official postgres:15-bookworm instead. Needs root (debootstrap).

use std::path::Path;

use anyhow::Context as _;

use crate::docker::Docker;
use crate::inputs::Inputs;
use crate::rootfs::{Customization, import_rootfs_image, install, make_rootfs};
use crate::run::step;
use crate::settings::Settings;

const IMAGE: &str = "fakecloud/postgres:dev";

/// Debian's package made a cluster of its own when it was installed; the entrypoint makes the farm's.
fn customize(dir: &Path, entrypoint: &Path) -> anyhow::Result<()> {
    for cluster in ["var/lib/postgresql/15/main", "etc/postgresql/15/main"] {
        let path = dir.join(cluster);
        if path.exists() {
            std::fs::remove_dir_all(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    install(entrypoint, &dir.join("usr/local/bin/postgres-entrypoint"), 0o755)
}

/// Makes sure the engine has fakecloud/postgres:dev.
pub fn image(s: &Settings, d: &Docker) -> anyhow::Result<()> {
    if d.image_exists(IMAGE) {
        tracing::info!("{IMAGE} is already in the engine");
        return Ok(());
    }
    let entrypoint = s.repo.join("docker/postgres-entrypoint.sh");
    let key = Inputs::default().content(&entrypoint)?.hex(64);
    let apply = |dir: &Path| customize(dir, &entrypoint);
    let customization = Customization { code: &[include_str!("postgres.rs")], apply: &apply };
    let rootfs = step("debootstrap a PostgreSQL 15 root filesystem", || {
        make_rootfs(s, "fakecloud-postgres", &["postgresql-15"], Some(&customization), &key)
    })?;
    step(&format!("import {IMAGE}"), || {
        import_rootfs_image(
            d,
            &rootfs,
            IMAGE,
            &[
                r#"ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]"#,
                "ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "EXPOSE 5432",
            ],
        )
    })?;
    tracing::info!("{IMAGE} ready ({})", d.size(IMAGE));
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn debians_own_cluster_goes_and_the_entrypoint_comes() {
        let root = tempfile::tempdir().expect("a temporary directory");
        let dir = root.path().join("rootfs");
        for cluster in ["var/lib/postgresql/15/main", "etc/postgresql/15/main"] {
            std::fs::create_dir_all(dir.join(cluster)).expect("created");
            std::fs::write(dir.join(cluster).join("PG_VERSION"), "15").expect("written");
        }
        let entrypoint = root.path().join("postgres-entrypoint.sh");
        std::fs::write(&entrypoint, "#!/bin/sh\n").expect("written");
        customize(&dir, &entrypoint).expect("customized");
        assert!(!dir.join("var/lib/postgresql/15/main").exists() && !dir.join("etc/postgresql/15/main").exists());
        assert!(dir.join("var/lib/postgresql/15").is_dir(), "only the cluster goes");
        let installed = dir.join("usr/local/bin/postgres-entrypoint");
        assert_eq!(installed.metadata().expect("installed").permissions().mode() & 0o777, 0o755);
        // Again, on a root filesystem without Debian's cluster.
        customize(&dir, &entrypoint).expect("customized again");
    }
}

//! Snapshots: consistent copies of the database (`VACUUM INTO`), written only as plain new files in one
//! directory. The admin token can write files on the emulator's machine through this call, so what it may
//! write is narrow: a file name (no path), never through a symlink, never over an existing file, mode 0600.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use fakecloud_api::codes;

use crate::db::{Backend, Db};
use crate::error::{ApiError, Result};
use crate::validate::SNAPSHOT_NAME;

/// The field a snapshot's name arrives in.
const FIELD: &str = "name";

/// The file `requested` names in `dir`, if it is an acceptable snapshot name. For compatibility a full path is
/// accepted when it names a file directly in `dir` (which must be canonical).
pub fn target(dir: &Path, requested: &str) -> Result<PathBuf> {
    let name = match requested.rsplit_once('/') {
        None => requested,
        Some((parent, name)) if !parent.is_empty() && std::fs::canonicalize(parent).is_ok_and(|p| p == dir) => name,
        Some(_) => {
            return Err(ApiError::invalid(
                FIELD,
                format!(
                    "{requested:?}: give a file name, not a path; snapshots are written to the snapshot directory {} \
                     (fakecloud serve --snapshot-dir)",
                    dir.display()
                ),
            ));
        }
    };
    let max = SNAPSHOT_NAME.max_chars;
    let problem = if name.is_empty() {
        "must not be empty".to_string()
    } else if name.starts_with('.') {
        "must not start with '.'".to_string()
    } else if name.chars().count() > max {
        format!("must be at most {max} characters (got {})", name.chars().count())
    } else {
        // The rule itself, as the OpenAPI document states it; the cases above only say more precisely why.
        return SNAPSHOT_NAME.check(FIELD, name).map(|()| dir.join(name));
    };
    Err(ApiError::invalid(FIELD, problem))
}

fn exists(target: &Path) -> ApiError {
    ApiError::conflict(codes::SNAPSHOT_EXISTS, format!("{} already exists; choose a new name", target.display()))
}

/// Write a snapshot to `target` (from [`target`]); returns its size. Written to a temporary name first and
/// then linked into place, so a failed snapshot leaves nothing behind and an existing name is never touched.
pub async fn write(db: &Db, target: &Path) -> Result<u64> {
    if db.backend() == Backend::Postgres {
        return Err(ApiError::bad_request(
            codes::INVALID_PARAMETER,
            "this emulator's store is PostgreSQL: a snapshot copies a SQLite file; back PostgreSQL up with pg_dump",
        ));
    }
    // `symlink_metadata`: a symlink is an existing name even when it dangles; it is never followed.
    if std::fs::symlink_metadata(target).is_ok() {
        return Err(exists(target));
    }
    let (dir, name) = match (target.parent(), target.file_name()) {
        (Some(d), Some(n)) => (d, n.to_string_lossy()),
        _ => return Err(ApiError::internal(format!("{} is not a file in a directory", target.display()))),
    };
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    // create_new is O_CREAT|O_EXCL, which fails on any existing name, symlinks included; VACUUM INTO accepts
    // the empty file and keeps its mode.
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(|e| {
        ApiError::internal(format!("cannot create a file in the snapshot directory {}: {e}", dir.display()))
    })?;
    let written = copy_into(db, &tmp, target).await;
    if let Err(e) = std::fs::remove_file(&tmp) {
        tracing::warn!(file = %tmp.display(), error = %e, "cannot remove a snapshot's temporary file");
    }
    written
}

async fn copy_into(db: &Db, tmp: &Path, target: &Path) -> Result<u64> {
    let tmp_str = tmp.to_str().ok_or_else(|| ApiError::internal("the snapshot directory's path is not UTF-8"))?;
    db.copy_into(tmp_str).await.map_err(|e| {
        tracing::warn!(error = %e, file = %target.display(), "snapshot failed");
        ApiError::internal(format!("cannot write the snapshot: {e}"))
    })?;
    // A hard link never replaces an existing name (unlike rename), so a name taken meanwhile is left alone.
    std::fs::hard_link(tmp, target).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => exists(target),
        _ => ApiError::internal(format!("cannot name the snapshot {}: {e}", target.display())),
    })?;
    Ok(std::fs::metadata(target).map(|m| m.len()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_file_names_in_the_directory() {
        let dir = Path::new("/srv/snaps");
        assert_eq!(target(dir, "a-1_b.db").unwrap(), dir.join("a-1_b.db"));
        for bad in ["", ".", "..", "../x", "x/y", "/etc/passwd", "a\0b", "é.db", ".x"] {
            assert_eq!(target(dir, bad).unwrap_err().code, codes::INVALID_PARAMETER, "{bad:?}");
        }
    }
}

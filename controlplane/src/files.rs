//! Files created with their mode from the start: a key, a kubeconfig or a token is never readable by others,
//! not even between its creation and a chmod.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{IoContext, Result};

/// Writes `contents` to `path` (created or truncated) with `mode`.
pub fn write(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .io_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents).io_context(|| format!("writing {}", path.display()))
}

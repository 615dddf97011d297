// TEMPORARY until kind-images merges.
use std::path::PathBuf;
pub fn build(s: &crate::settings::Settings) -> anyhow::Result<PathBuf> {
    let out = crate::run::cmd("bash", [s.repo.join("scripts/kind/build-node-binaries.sh")]).output()?;
    Ok(PathBuf::from(out.lines().last().unwrap_or_default()))
}

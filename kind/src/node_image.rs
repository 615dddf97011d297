// TEMPORARY until kind-images merges.
pub fn ensure(s: &crate::settings::Settings) -> anyhow::Result<()> {
    crate::run::cmd("bash", [s.repo.join("scripts/kind/node-image.sh")])
        .envs(crate::docker::Docker::choose(s).host.as_deref().map(|h| ("DOCKER_HOST", h)))
        .run_shown()
}

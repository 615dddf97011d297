// TEMPORARY until kind-images merges.
pub fn build(s: &crate::settings::Settings) -> anyhow::Result<()> {
    crate::run::cmd("bash", [s.repo.join("scripts/kind/images.sh")])
        .envs(crate::docker::Docker::choose(s).host.as_deref().map(|h| ("DOCKER_HOST", h)))
        .run_shown()
}

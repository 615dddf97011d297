//! `make kind-down`: deletes what `make kind-up` created (the kind cluster, the emulator container and its
//! volume, the kind network) and stops the private engine if one runs and nothing else is left in it (a user's
//! own engine is left running). Afterwards no process, iptables rule, bridge or sysctl change of ours is left.

use super::tools::Tools;
use crate::docker::Docker;
use crate::engine::Engine;
use crate::settings::Settings;

/// Without a cluster named (`all`), every other cluster kind-up made from this checkout goes too (make
/// e2e-kind-both's second, make test-kind's), each with a run directory of its own; the named one goes last, as
/// the private engine stops with the last.
pub fn down(s: &Settings, all: bool) -> anyhow::Result<()> {
    if all {
        for name in other_clusters(s) {
            down(&s.for_cluster(&name), false)?;
        }
    }
    let c = &s.cluster;
    let engine = Engine::of(s);
    let docker = engine.docker();
    if docker.answers() {
        let tools = Tools::new(s, docker.clone(), &[]);
        if tools.cluster_exists(&c.name) {
            crate::run::step(&format!("deleting kind cluster {}", c.name), || {
                tools.kind(["delete", "cluster", "--name", &c.name]).run()
            })?;
        }
        let _ = docker.cmd(["rm", "-f", &c.emulator]).succeeds();
        let _ = docker.cmd(["volume", "rm", &format!("{}-data", c.emulator)]).succeeds();
        // kind leaves its network behind; with no container left on it, it goes too.
        let on_network = docker.cmd(["ps", "-aq", "--filter", &format!("network={}", c.network)]).output();
        if on_network.is_ok_and(|ids| ids.is_empty()) {
            let _ = docker.cmd(["network", "rm", &c.network]).succeeds();
        }
    } else {
        tracing::info!("no container engine answers: there is no cluster or emulator container to delete");
    }
    // The private engine may carry another cluster still (make e2e-kind-both): it stops with the last container.
    let private = Docker::at(s.private_docker_host());
    let others = private.cmd(["ps", "-aq"]).output().map(|ids| ids.lines().count()).unwrap_or(0);
    let engine_state = if others == 0 {
        engine.stop()?;
        "the private engine is stopped".to_string()
    } else {
        format!("the private engine keeps running for the {others} container(s) left in it (another kind cluster?)")
    };
    for f in [c.kubeconfig(), c.credentials(), c.config_copy(), c.ccm_file()] {
        let _ = std::fs::remove_file(f);
    }
    if c.name != "fakecloud" {
        // Only if empty: a user's files there stay.
        let _ = std::fs::remove_dir(&c.run_root);
    }
    tracing::info!("done: kind cluster {} and its emulator container are gone; {engine_state}", c.name);
    Ok(())
}

/// The clusters other than this one that kind-up made from this checkout: a run directory under .run/ with
/// the kind config kind-up keeps.
fn other_clusters(s: &Settings) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(s.repo.join(".run"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("kind-config.yaml").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| *n != s.cluster.name)
        .collect();
    names.sort();
    names
}

//! The Docker engine a step talks to, and the questions it asks of images.

use anyhow::bail;

use crate::run::{Cmd, cmd};
use crate::settings::Settings;

/// A client of one engine: DOCKER_HOST's, the private engine's, or the default socket's.
#[derive(Debug, Clone)]
pub struct Docker {
    /// DOCKER_HOST for its commands; `None`: the client's default.
    pub host: Option<String>,
}

impl Docker {
    /// The engine to use: DOCKER_HOST if set, else the private engine when its socket is there, else the
    /// default.
    pub fn choose(s: &Settings) -> Self {
        let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
        let host = host.or_else(|| s.engine_socket.exists().then(|| s.private_docker_host()));
        Docker { host }
    }

    /// The engine DOCKER_HOST (or the default socket) names, as a user's shell has it.
    pub fn from_env() -> Self {
        Docker { host: std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) }
    }

    pub fn at(host: String) -> Self {
        Docker { host: Some(host) }
    }

    /// DOCKER_HOST for a client of this engine, if it is not the default.
    fn host_env(&self) -> Option<(&'static str, &str)> {
        self.host.as_deref().map(|h| ("DOCKER_HOST", h))
    }

    /// `docker ARGS` against this engine.
    pub fn cmd<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        cmd("docker", args).envs(self.host_env())
    }

    /// The same as a bare process, for a pipe between two tools (`crate::pipe`).
    pub fn command<I, S>(&self, args: I) -> std::process::Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut c = std::process::Command::new("docker");
        c.args(args).envs(self.host_env());
        c
    }

    /// Whether the engine answers (within 10 s).
    pub fn answers(&self) -> bool {
        cmd("timeout", ["10", "docker", "info"]).envs(self.host_env()).succeeds()
    }

    /// Where it is, for messages.
    pub fn shown(&self) -> &str {
        self.host.as_deref().unwrap_or("the default socket")
    }

    /// The engine, or an error saying how to get one.
    pub fn require(s: &Settings) -> anyhow::Result<Self> {
        let d = Self::choose(s);
        if !d.answers() {
            bail!(
                "no Docker engine answers at {}.\nStart the project's private engine and point docker at it:\n  \
                 fakecloud-kind engine start && export DOCKER_HOST={}",
                d.shown(),
                s.private_docker_host()
            );
        }
        Ok(d)
    }

    pub fn image_exists(&self, image: &str) -> bool {
        self.cmd(["image", "inspect", image]).succeeds()
    }

    /// The value of `label` on `image`; `None` when the image or the label is missing.
    pub fn label(&self, image: &str, label: &str) -> Option<String> {
        let format = format!("{{{{ index .Config.Labels \"{label}\" }}}}");
        let v = self.cmd(["image", "inspect", "-f", &format, image]).output().ok()?;
        (!v.is_empty() && v != "<no value>").then_some(v)
    }

    /// The image's size, for the logs ("1.3G").
    pub fn size(&self, image: &str) -> String {
        self.cmd(["image", "inspect", "-f", "{{.Size}}", image])
            .output()
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or_else(|| "?".into(), human)
    }
}

/// `bytes` as numfmt --to=iec shows them.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes}") } else { format!("{v:.1}{}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_numfmt_prints_them() {
        assert_eq!(super::human(512), "512");
        assert_eq!(super::human(1_363_148_800), "1.3G");
    }
}

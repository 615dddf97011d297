//! Running the tools the kind path drives (docker, kind, kubectl, iptables, go, debootstrap): each failure
//! names the command and ends with what it printed, and every wait has a bound.

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A command to run, and how it reads in a log or an error.
pub struct Cmd {
    inner: Command,
    shown: String,
    stdin: Option<Vec<u8>>,
}

/// `program` with `args`.
pub fn cmd<I, S>(program: &str, args: I) -> Cmd
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut inner = Command::new(program);
    let mut shown = program.to_string();
    for a in args {
        shown.push(' ');
        shown.push_str(&a.as_ref().to_string_lossy());
        inner.arg(a);
    }
    Cmd { inner, shown, stdin: None }
}

/// The last lines of a tool's output: what an error message carries.
fn tail(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Cmd {
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.shown.push(' ');
        self.shown.push_str(&a.as_ref().to_string_lossy());
        self.inner.arg(a);
        self
    }
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self = self.arg(a);
        }
        self
    }
    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Self {
        self.inner.env(k, v);
        self
    }
    pub fn envs<'a>(mut self, vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        self.inner.envs(vars);
        self
    }
    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.inner.current_dir(dir);
        self
    }
    /// Feed `bytes` to its standard input.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    fn spawn_output(mut self, inherit_stderr: bool) -> anyhow::Result<(std::process::Output, String)> {
        self.inner.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        self.inner.stdout(Stdio::piped());
        self.inner.stderr(if inherit_stderr { Stdio::inherit() } else { Stdio::piped() });
        let mut child = self.inner.spawn().with_context(|| format!("cannot run `{}`", self.shown))?;
        if let (Some(bytes), Some(mut pipe)) = (self.stdin.take(), child.stdin.take()) {
            // A writer thread: a tool that answers before it has read all its input must not deadlock us.
            std::thread::spawn(move || pipe.write_all(&bytes));
        }
        let out = child.wait_with_output().with_context(|| format!("waiting for `{}`", self.shown))?;
        Ok((out, self.shown))
    }

    /// Its standard output, trimmed; an error with its exit status and the end of its standard error when it
    /// fails.
    pub fn output(self) -> anyhow::Result<String> {
        let (out, shown) = self.spawn_output(false)?;
        if !out.status.success() {
            bail!("`{shown}` failed ({}):\n{}", out.status, tail(&out.stderr, 15));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
    }

    /// Run it quietly: an error with the end of what it printed when it fails.
    pub fn run(self) -> anyhow::Result<()> {
        let (out, shown) = self.spawn_output(false)?;
        if !out.status.success() {
            let mut both = out.stdout;
            both.extend_from_slice(&out.stderr);
            bail!("`{shown}` failed ({}):\n{}", out.status, tail(&both, 20));
        }
        Ok(())
    }

    /// Run it with its output shown (a long build's progress), as the user would see it run by hand.
    pub fn run_shown(mut self) -> anyhow::Result<()> {
        // Its standard output goes to our standard error: ours carries only what a caller reads.
        self.inner.stdin(Stdio::null()).stdout(std::io::stderr()).stderr(Stdio::inherit());
        let status = self.inner.status().with_context(|| format!("cannot run `{}`", self.shown))?;
        if !status.success() {
            bail!("`{}` failed ({status}); its output is above", self.shown);
        }
        Ok(())
    }

    /// Whether it succeeds, its output discarded: a question asked of a tool.
    pub fn succeeds(self) -> bool {
        self.spawn_output(false).is_ok_and(|(out, _)| out.status.success())
    }
}

/// A named step, logged when it starts and with how long it took.
pub fn step<T>(what: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let start = Instant::now();
    tracing::info!("{what} ...");
    let t = f().with_context(|| format!("{what}: failed"))?;
    tracing::info!("{what}: done in {}s", start.elapsed().as_secs());
    Ok(t)
}

/// Poll `check` every `every` until it gives `Some`, for at most `bound`; `None` when the bound passed.
pub fn wait_for<T>(bound: Duration, every: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(t) = check() {
            return Some(t);
        }
        if start.elapsed() >= bound {
            return None;
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_command_and_ends_with_what_it_said() {
        let err = cmd("sh", ["-c", "echo one; echo two >&2; exit 3"]).output().unwrap_err().to_string();
        assert!(err.contains("`sh -c echo one; echo two >&2; exit 3` failed"), "{err}");
        assert!(err.contains("two") && err.contains("exit status: 3"), "{err}");
        let err = cmd("sh", ["-c", "echo out; echo err >&2; false"]).run().unwrap_err().to_string();
        assert!(err.contains("out") && err.contains("err"), "{err}");
        let err = cmd("/nonexistent/tool", [""; 0]).output().unwrap_err().to_string();
        assert!(err.contains("cannot run `/nonexistent/tool`"), "{err}");
    }

    #[test]
    fn output_is_trimmed_and_stdin_is_fed() {
        assert_eq!(cmd("cat", [""; 0]).stdin("a\nb\n").output().unwrap(), "a\nb");
        assert!(cmd("true", [""; 0]).succeeds());
        assert!(!cmd("false", [""; 0]).succeeds());
    }

    #[test]
    fn a_wait_ends_at_its_bound_or_at_the_answer() {
        let mut n = 0;
        assert_eq!(
            wait_for(Duration::from_secs(5), Duration::ZERO, || {
                n += 1;
                (n == 3).then_some(n)
            }),
            Some(3)
        );
        assert_eq!(wait_for(Duration::ZERO, Duration::ZERO, || None::<()>), None);
    }
}

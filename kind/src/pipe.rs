//! One tool's output fed to another's input without a shell between them: `tar -c . | docker import -` and
//! `docker save | ctr images import -`.

use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

fn shown(c: &Command) -> String {
    std::iter::once(c.get_program()).chain(c.get_args()).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// Runs `from | into`; `what` names the whole in an error. `from`'s errors go straight to our stderr (it has
/// nothing else to say); `into`'s end the error message.
pub fn pipe(mut from: Command, into: Command, what: &str) -> anyhow::Result<()> {
    let (from_shown, into_shown) = (shown(&from), shown(&into));
    let mut producer = from
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("{what}: cannot run `{from_shown}`"))?;
    let feed = producer.stdout.take().context("the producer's stdout is piped")?;
    // The consumer's Command is dropped as soon as it is spawned: it holds the pipe's read end, and while we
    // hold it a consumer that died early would leave the producer blocked on a full pipe instead of stopped by
    // SIGPIPE.
    let consumer = { into }.stdin(feed).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let consumer = match consumer {
        Ok(c) => c,
        Err(e) => {
            // Nobody reads what it writes: stop it rather than leave it blocked.
            let _ = producer.kill();
            let _ = producer.wait();
            return Err(e).with_context(|| format!("{what}: cannot run `{into_shown}`"));
        }
    };
    let out = consumer.wait_with_output().with_context(|| format!("{what}: waiting for `{into_shown}`"))?;
    let produced = producer.wait().with_context(|| format!("{what}: waiting for `{from_shown}`"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        bail!("{what} failed: `{into_shown}` ({}) said:\n{}", out.status, said.trim_end());
    }
    if !produced.success() {
        bail!("{what} failed: `{from_shown}` ({produced}); its errors are above");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn the_output_of_one_is_the_input_of_the_other() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("got");
        let into = sh(&format!("cat > {}", file.display()));
        pipe(sh("printf 'a\\nb\\n'"), into, "copying").expect("the pipe runs");
        assert_eq!(std::fs::read_to_string(&file).expect("written"), "a\nb\n");
    }

    #[test]
    fn either_side_failing_fails_the_pipe_with_its_name() {
        let err = pipe(sh("echo x"), sh("cat >/dev/null; echo refused >&2; exit 2"), "importing").unwrap_err();
        let err = err.to_string();
        assert!(err.starts_with("importing failed") && err.contains("refused"), "{err}");
        let err = pipe(sh("exit 3"), sh("cat >/dev/null"), "importing").unwrap_err().to_string();
        assert!(err.contains("`sh -c exit 3`") && err.contains("errors are above"), "{err}");
        let err = pipe(sh("echo x"), Command::new("/nonexistent/tool"), "importing").unwrap_err();
        assert!(format!("{err:#}").contains("cannot run `/nonexistent/tool`"), "{err:#}");
    }

    #[test]
    fn a_consumer_that_dies_early_stops_the_producer_instead_of_hanging() {
        // `yes` writes forever: only SIGPIPE ends it, and only once no one holds the pipe's read end.
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(pipe(sh("exec yes"), sh("exit 1"), "importing").is_err()));
        let failed = result.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(failed, Ok(true), "the pipe must fail, not hang");
    }
}

//! `fakecloud-kind up` refuses a taken port at once, before it starts or builds anything.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

#[test]
fn kind_up_refuses_a_taken_port_before_starting_anything() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let run_dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fakecloud-kind"))
        .arg("up")
        .env("FAKECLOUD_PORT", port.to_string())
        .env("FAKECLOUD_RUN_DIR", run_dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("port {port}")) && err.contains("FAKECLOUD_PORT"),
        "names the port and the way out: {err}"
    );
    // Only a hang takes this long; "at once" is what the checks below say: nothing started, nothing written.
    assert!(started.elapsed() < Duration::from_secs(60), "stops at once");
    assert!(!err.contains("engine"), "nothing was started: {err}");
    assert_eq!(std::fs::read_dir(run_dir.path()).unwrap().count(), 0, "nothing was written");
}

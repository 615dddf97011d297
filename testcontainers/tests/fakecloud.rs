//! The module against a real engine (`DOCKER_HOST`, or the default socket) holding the emulator's image that
//! `make kind-up` builds: started, ready, both clients working, removed on drop. Without an engine it is
//! skipped, unless `FAKECLOUD_TESTCONTAINERS=1` (`make test-kind` sets it), where that is a failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use fakecloud_api::{CreateInstanceRequest, QuotaName};
use fakecloud_testcontainers::FakeCloud;

/// Long enough only for a hang: a busy CI machine removes a container in seconds.
const HANG: Duration = Duration::from_secs(60);

fn docker(args: &[&str]) -> bool {
    Command::new("docker").args(args).output().is_ok_and(|o| o.status.success())
}

#[tokio::test]
async fn the_emulator_starts_answers_both_tokens_and_is_removed_on_drop() {
    if !docker(&["info"]) {
        assert!(std::env::var_os("FAKECLOUD_TESTCONTAINERS").is_none(), "no container engine answers (docker info)");
        eprintln!("skipping: no container engine answers (docker info); make test-kind runs this");
        return;
    }
    let cloud = FakeCloud::default().with_serve_args(["--boot-delay", "0s"]).run().await.unwrap();
    let req = CreateInstanceRequest { name: "node-a".into(), ..Default::default() };
    let created = cloud.user().create_instance(&req, None).await.unwrap();
    assert_eq!(cloud.admin().get_instance(&created.id).await.unwrap().name, "node-a");
    // The tokens are the two roles: the customer's cannot change a quota, the admin's can.
    assert!(cloud.user().set_quota(QuotaName::Instances, 5).await.is_err());
    assert_eq!(cloud.admin().set_quota(QuotaName::Instances, 5).await.unwrap().limit, 5);

    let id = cloud.container().id().to_string();
    assert!(docker(&["inspect", &id]));
    // Published on loopback only: its console and metrics need no token.
    assert!(cloud.endpoint().starts_with("http://127.0.0.1:"), "{}", cloud.endpoint());
    let published = Command::new("docker").args(["port", &id, "8787/tcp"]).output().unwrap();
    let published = String::from_utf8_lossy(&published.stdout);
    assert!(
        !published.trim().is_empty() && published.lines().all(|l| l.starts_with("127.0.0.1:")),
        "published as {published:?}"
    );
    drop(cloud);
    let start = Instant::now();
    while docker(&["inspect", &id]) {
        assert!(start.elapsed() < HANG, "container {id} still there {HANG:?} after its handle was dropped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

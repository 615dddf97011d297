//! What the binary does at start without a cluster: wrong flags, a missing or bad cloud config, an unreachable
//! emulator each end it with exit 1 and a message that says what to fix; `--leader-elect=false` starts the
//! controllers at once, and `--secure-port=0` serves nothing.
#![allow(clippy::unwrap_used)]

use fakecloud_e2e::{HANG, poll, until};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::server::Server;

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

/// Run the CCM to its end (at most 20 s): exit code and stderr.
fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(CCM).args(args).env("KUBECONFIG", "/nonexistent/kubeconfig").output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    // An apiserver that is not there: the CCM does not need one to start with --leader-elect=false.
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .unwrap();
    path
}

/// Start the CCM with `args` (plus the cloud config and a kubeconfig of an apiserver that is not there), its
/// stderr in `dir/<log>`; returns once it says "starting controllers" (at most 20 s), with the log's path.
async fn start_ccm(
    dir: &std::path::Path,
    cloud_config: &std::path::Path,
    args: &[&str],
    log: &str,
) -> (tokio::process::Child, std::path::PathBuf) {
    let log = dir.join(log);
    let ccm = tokio::process::Command::new(CCM)
        .args(args)
        .arg(format!("--cloud-config={}", cloud_config.display()))
        .arg(format!("--kubeconfig={}", kubeconfig(dir).display()))
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    until(HANG, "controllers started", async || {
        std::fs::read_to_string(&log).unwrap().contains("starting controllers").then_some(())
    })
    .await;
    (ccm, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_starts_say_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cloud.yaml");
    let cfg_arg = format!("--cloud-config={}", cfg.display());
    std::fs::write(&cfg, "endpoint: http://127.0.0.1:1\ntoken: t\n").unwrap();
    for (args, says) in [
        (vec!["--cloud-config=/x"], "--cloud-provider cannot be empty"),
        (vec!["--cloud-provider=aws", "--cloud-config=/x"], "\"aws\" is not known"),
        (vec!["--cloud-provider=fakecloud"], "--cloud-config is required"),
        (vec!["--cloud-provider=fakecloud", "--cloud-config=/nonexistent.yaml"], "cannot read it"),
        (
            vec!["--cloud-provider=fakecloud", &cfg_arg, "--controllers=*,nodes"],
            "\"nodes\" is not in the list of known controllers",
        ),
        (vec!["--cloud-provider=fakecloud", &cfg_arg, "--cluster-cidr="], "--cluster-cidr"),
        (vec!["--cloud-provider=fakecloud", &cfg_arg, "--leader-elect-renew-deadline=20s"], "must be greater than"),
        (vec!["--cloud-provider=fakecloud", &cfg_arg, "--node-monitor-period=5"], "invalid duration"),
        (
            vec!["--cloud-provider=fakecloud", &cfg_arg, "--cluster-cidr=10.244.0.0/16"],
            "cannot reach the fakecloud emulator at http://127.0.0.1:1",
        ),
    ] {
        let (code, stderr) = run(&args);
        assert_ne!(code, Some(0), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: expected {says:?} in {stderr}");
    }
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "endpoint: http://x\ntoken: t\nendpiont: typo\n").unwrap();
    let (code, stderr) = run(&["--cloud-provider=fakecloud", &format!("--cloud-config={}", bad.display())]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("endpiont"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leader_election_controllers_start_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens { user: "u-0123456789abcdef".into(), admin: "a-0123456789abcdef".into() };
    let cfg = Config { timings: Timings::instant(), ..Config::default() };
    let server = Server::start("127.0.0.1:0", &DbLocation::File(dir.path().join("fc.db")), cfg, tokens).await.unwrap();
    let cloud_config = dir.path().join("cloud.yaml");
    std::fs::write(&cloud_config, format!("endpoint: {}\ntoken: u-0123456789abcdef\nregion: local-1\n", server.url()))
        .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let secure_port = format!("--secure-port={port}");
    let args = ["--cloud-provider=fakecloud", "--leader-elect=false", "--controllers=cloud-node,cloud-node-lifecycle"];
    let args = [&args[..], &["--bind-address=127.0.0.1", &secure_port]].concat();
    let (mut ccm, _) = start_ccm(dir.path(), &cloud_config, &args, "ccm.log").await;
    let get = |path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-sk", "--max-time", "5"])
            .arg(format!("https://127.0.0.1:{port}{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The controllers' checks join once all have started, a moment after the log says they start: until then
    // /healthz has only its ping (on a loaded CI machine that moment was long enough for a poll to land in it).
    let want = "[+]cloud-node-controller ok\n[+]cloud-node-lifecycle-controller ok\nhealthz check passed\n";
    let mut last = String::new();
    let listed = poll(HANG, async || {
        last = get("/healthz?verbose");
        (last == want).then_some(())
    })
    .await;
    assert!(listed.is_some(), "/healthz never listed both controllers; it said {last:?}");
    assert!(!get("/metrics").contains("leader_election_master_status{"), "no lease, no leader metric");
    assert!(ccm.try_wait().unwrap().is_none(), "still running without an apiserver");
    ccm.kill().await.unwrap();

    // --secure-port=0: nothing listens.
    let quiet_args =
        ["--cloud-provider=fakecloud", "--leader-elect=false", "--secure-port=0", "--controllers=cloud-node"];
    let (mut quiet, log) = start_ccm(dir.path(), &cloud_config, &quiet_args, "quiet.log").await;
    let log = std::fs::read_to_string(log).unwrap();
    assert!(!log.contains("serving /healthz"), "{log}");
    quiet.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_that_throttles_at_start_is_waited_out_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens { user: "u-0123456789abcdef".into(), admin: "a-0123456789abcdef".into() };
    let cfg = Config { timings: Timings::instant(), ..Config::default() };
    let server = Server::start("127.0.0.1:0", &DbLocation::File(dir.path().join("fc.db")), cfg, tokens).await.unwrap();
    // One call per 5 s, and that one taken: the CCM's first call is told to wait.
    let admin = fakecloud_api::Client::new(&server.url(), "a-0123456789abcdef").unwrap();
    let limit = fakecloud_api::SetRateLimitRequest { capacity: 1, refill_per_second: Some(0.2), ..Default::default() };
    admin.set_rate_limit("start", &limit).await.unwrap();
    let user = fakecloud_api::Client::new(&server.url(), "u-0123456789abcdef").unwrap();
    user.region().await.unwrap();
    let cloud_config = dir.path().join("cloud.yaml");
    std::fs::write(&cloud_config, format!("endpoint: {}\ntoken: u-0123456789abcdef\n", server.url())).unwrap();
    let args = ["--cloud-provider=fakecloud", "--leader-elect=false", "--secure-port=0", "--controllers=cloud-node"];
    let (mut ccm, log) = start_ccm(dir.path(), &cloud_config, &args, "ccm.log").await;
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("the cloud says wait"), "the 429 was waited out: {log}");
    assert!(ccm.try_wait().unwrap().is_none(), "still running");
    ccm.kill().await.unwrap();
}

/// The stack's command lines (`stack up`'s and this suite's, written once in the composition) are read by the
/// binaries' own flag definitions as meant, and the cloud config written beside them is one the CCM accepts.
#[test]
fn the_stacks_command_lines_are_the_binaries_flags() {
    use clap::Parser as _;
    use fakecloud_controlplane::composition;

    let dir = tempfile::tempdir().unwrap();
    let (cloud_config, kubeconfig, db) =
        (dir.path().join("cloud config.yaml"), kubeconfig(dir.path()), dir.path().join("fc.db"));
    fakecloud_api::CloudConfig::with_token("http://127.0.0.1:8787", "t").write(&cloud_config).unwrap();
    let ccm = composition::Ccm {
        cloud_config: &cloud_config,
        kubeconfig: &kubeconfig,
        cluster_cidr: "10.244.0.0/16",
        port: 10258,
    };
    let args =
        fakecloud_ccm::config::Args::try_parse_from(std::iter::once("fakecloud-ccm".to_string()).chain(ccm.args()))
            .unwrap();
    assert_eq!(
        (args.cloud_config.as_deref(), args.kubeconfig.as_deref(), args.cluster_cidr.as_str(), args.secure_port),
        (Some(cloud_config.as_path()), Some(kubeconfig.as_path()), "10.244.0.0/16", 10258)
    );
    assert_eq!(args.bind_address.to_string(), "127.0.0.1");
    assert_eq!(args.validate().unwrap().cloud.token(), "t");

    let emulator =
        composition::Emulator { listen: "127.0.0.1:8788", db: &db, tokens: Some(("user", "admin")), dns_listen: None };
    let cli =
        fakecloud_cli::Cli::try_parse_from(std::iter::once("fakecloud".to_string()).chain(emulator.args())).unwrap();
    let fakecloud_cli::Command::Serve(serve) = cli.command else { panic!("not `serve`: {:?}", cli.command) };
    assert_eq!(
        (serve.listen.as_str(), serve.db.as_str(), serve.user_token.as_deref(), serve.admin_token.as_deref()),
        ("127.0.0.1:8788", db.to_str().unwrap(), Some("user"), Some("admin"))
    );
}

//! Test harness: a real emulator on an ephemeral loopback port with a real SQLite file in a temp dir, or a
//! database of its own on a real PostgreSQL server when `FAKECLOUD_TEST_STORE=postgres` (`make test-postgres`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod postgres;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fakecloud_api::{Client, CreateInstanceRequest, Instance, InstanceState};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::server::Server;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const USER: &str = "user-token-0123456789abcdef";
pub const ADMIN: &str = "admin-token-0123456789abcdef";

/// How long a test waits for something that must happen before it calls it a hang. A hang detector, never a
/// speed claim: CI runs on a busy 2-core machine where a write can wait seconds behind disk I/O, so only a hang
/// takes this long.
pub const HANG: Duration = Duration::from_secs(60);

pub struct Emu {
    pub server: Option<Server>,
    pub dir: tempfile::TempDir,
    pub user: Client,
    pub admin: Client,
    pub cfg: Config,
    /// Its database.
    pub db: DbLocation,
}

/// A new database for an emulator: a SQLite file in `dir`, or a database on the tests' PostgreSQL server.
pub async fn new_store(dir: &std::path::Path) -> DbLocation {
    if std::env::var("FAKECLOUD_TEST_STORE").as_deref() == Ok("postgres") {
        DbLocation::Postgres(postgres::shared().new_database().await)
    } else {
        DbLocation::File(dir.join("fc.db"))
    }
}

/// The in-process emulator's log, shown with a failing test's output (`RUST_LOG` chooses; errors by default).
pub fn log_to_test() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "error".into()))
        .with_test_writer()
        .try_init();
}

pub fn tokens() -> Tokens {
    Tokens { user: USER.into(), admin: ADMIN.into() }
}

impl Emu {
    /// Every transition immediate.
    pub async fn start() -> Self {
        Self::with_timings(Timings::instant()).await
    }

    pub async fn with_timings(timings: Timings) -> Self {
        let cfg = Config { timings, ..Config::default() };
        Self::with_config(cfg).await
    }

    /// Every transition immediate, and machines of a kind network ([`KIND_NETWORKS`]) adopted as instances.
    pub async fn adopting() -> Self {
        Self::with_config(kind_config()).await
    }

    pub async fn with_config(cfg: Config) -> Self {
        log_to_test();
        let dir = tempfile::tempdir().unwrap();
        let db = new_store(dir.path()).await;
        let server = Server::start("127.0.0.1:0", &db, cfg.clone(), tokens()).await.unwrap();
        let url = server.url();
        Self {
            server: Some(server),
            dir,
            user: Client::new(&url, USER).unwrap(),
            admin: Client::new(&url, ADMIN).unwrap(),
            cfg,
            db,
        }
    }

    /// Whether account `id`'s store is there: its SQLite file beside the emulator's, or its PostgreSQL schema.
    pub async fn account_store_exists(&self, id: &str) -> bool {
        match &self.db {
            DbLocation::Postgres(url) => {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                let schema = fakecloud_emulator::accounts::schema(id);
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                    .bind(schema)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
            }
            _ => self.dir.path().join("fc.accounts").join(format!("{id}.db")).exists(),
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("fc.db")
    }

    pub fn url(&self) -> String {
        self.user.endpoint().to_string()
    }

    /// Stop the server and start a new one on the same database (and a new port).
    pub async fn restart(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
        let server = Server::start("127.0.0.1:0", &self.db, self.cfg.clone(), tokens()).await.unwrap();
        let url = server.url();
        self.user = Client::new(&url, USER).unwrap();
        self.admin = Client::new(&url, ADMIN).unwrap();
        self.server = Some(server);
    }

    pub async fn instance(&self, name: &str) -> Instance {
        self.user
            .create_instance(&CreateInstanceRequest { name: name.into(), ..Default::default() }, None)
            .await
            .unwrap()
    }

    /// A raw request, for what the typed client cannot send (bad JSON, wrong headers).
    pub async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, &str)>,
    ) -> (u16, serde_json::Value) {
        let mut req = reqwest::Client::new().request(method, format!("{}{}", self.url(), path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some((ct, b)) = body {
            req = req.header("content-type", ct).body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
    }
}

/// A kind network's subnets, as `make kind-up` gives them to `serve --adopt-networks`.
pub const KIND_NETWORKS: [&str; 2] = ["172.18.0.0/16", "fc00:f853:ccd:e793::/64"];

/// Every transition immediate, and machines of [`KIND_NETWORKS`] adopted.
pub fn kind_config() -> Config {
    Config {
        timings: Timings::instant(),
        adopt_networks: KIND_NETWORKS.iter().map(|n| n.parse().unwrap()).collect(),
        ..Config::default()
    }
}

/// Poll `f` until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn wait_state(c: &Client, id: &str, state: InstanceState) -> Instance {
    eventually(HANG, &format!("{id} to be {state}"), || async {
        let i = c.get_instance(id).await.unwrap();
        (i.state == state).then_some(i)
    })
    .await
}

/// The emulator as a process of its own, for the cases that kill it, restart it or cap its open files: on
/// `db` (a file or a database URL), returning it and its URL (read from its first line of output).
pub async fn spawn_emulator(db: impl AsRef<std::ffi::OsStr>) -> (Child, String, Arc<Mutex<String>>) {
    spawn_emulator_with(db, &[], None).await
}

/// Where [`spawn_emulator_with`] hands `fakecloud serve`'s flags to [`serve_as_a_process`], as a JSON list.
const SERVE_FLAGS: &str = "FAKECLOUD_TEST_SERVE_FLAGS";

/// The process of [`spawn_emulator_with`]: the `fakecloud` binary lives in the CLI crate, above this one, so
/// this test binary plays it, re-run with only this case selected, and serves as `fakecloud serve` would.
#[test]
#[ignore = "the emulator process of spawn_emulator_with; it serves only when that sets FAKECLOUD_TEST_SERVE_FLAGS"]
fn serve_as_a_process() {
    let Ok(flags) = std::env::var(SERVE_FLAGS) else { return };
    let flags: Vec<String> = serde_json::from_str(&flags).unwrap();
    fakecloud_emulator::serve::run_from_args(flags).unwrap();
}

/// [`spawn_emulator`] with more flags, and with its open-file limit (soft and hard) set to `fd_limit`.
pub async fn spawn_emulator_with(
    db: impl AsRef<std::ffi::OsStr>,
    flags: &[&str],
    fd_limit: Option<u32>,
) -> (Child, String, Arc<Mutex<String>>) {
    let this = std::env::current_exe().unwrap();
    let mut command = match fd_limit {
        Some(n) => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")]).arg(this);
            c
        }
        None => Command::new(this),
    };
    let mut serve: Vec<String> = ["--listen", "127.0.0.1:0", "--boot-delay", "0s"].map(String::from).into();
    serve.extend(flags.iter().map(|f| f.to_string()));
    serve.extend(["--db".to_string(), db.as_ref().to_str().unwrap().to_string()]);
    let mut child = command
        .args(["--exact", "common::serve_as_a_process", "--ignored", "--nocapture", "--quiet"])
        .env(SERVE_FLAGS, serde_json::to_string(&serve).unwrap())
        .env("FAKECLOUD_USER_TOKEN", USER)
        .env("FAKECLOUD_ADMIN_TOKEN", ADMIN)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log = Arc::new(Mutex::new(String::new()));
    let url = loop {
        let line = tokio::time::timeout(HANG, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap_or_else(|| panic!("the emulator exited; its log:\n{}", log.lock().unwrap()));
        log.lock().unwrap().push_str(&format!("{line}\n"));
        if let Some(rest) = line.strip_prefix("fakecloud: serving ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let sink = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().push_str(&format!("{line}\n"));
        }
    });
    (child, url, log)
}

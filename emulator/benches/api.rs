//! `make bench`: latency and throughput of the emulator's API, measured against the emulator as a process of
//! its own, release-built, on loopback with a real SQLite file. Prints a Markdown table (the source of
//! BENCHMARKS.md). The `fakecloud` binary lives in the CLI crate, above this one, so this benchmark's own binary
//! plays it: run as `api serve FLAGS…`, it is `fakecloud serve FLAGS…`.
//!
//! Sequential: one client, one call at a time (p50/p99). Concurrent: 32 in-flight calls from one process
//! (requests per second). Walk: 10,000 instances, 1,000 per page.
//!
//! `-- --creates` runs only the create rows (write throughput). `-- --stores` measures writes on each store
//! (issue #28): a SQLite file, PostgreSQL with one emulator, three emulators on one PostgreSQL database, and
//! those three with the writes spread over 8 accounts (issue #47).
//! `-- --farm` measures what a farm on PostgreSQL holds and how it fails (issue #47): the connections a replica
//! holds per account, the accounts that fit a server's `max_connections`, and how soon a call is answered with
//! the database away. `-- --dataplane` measures the load balancer data plane instead (see `dataplane.rs`), and
//! `-- --aws-face` what the AWS face adds to native calls (see `aws_face.rs`). `FAKECLOUD_BENCH_BIN` serves with
//! another build instead of this one (a `fakecloud` binary, e.g. a saved copy of the previous commit's, to compare
//! the two back to back).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "api/aws_face.rs"]
mod aws_face;
#[path = "api/dataplane.rs"]
mod dataplane;
// The tests' PostgreSQL server (`initdb` into a temp dir, stopped when dropped); the bench needs no TLS.
#[allow(dead_code)]
#[path = "../tests/it/common/postgres.rs"]
mod postgres;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fakecloud_api::{
    Client, CreateFaultRuleRequest, CreateInstanceRequest, CreateLoadBalancerRequest, CreateRouteRequest, FaultAction,
    FaultMatch, ListInstancesQuery, Listener, Protocol, QuotaName, Scheme,
};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

const TOKEN: &str = "bench-admin-token-0123456789";
const ZONES: [&str; 3] = ["local-1a", "local-1b", "local-1c"];

struct Stats {
    p50_ms: f64,
    p99_ms: f64,
    rps: f64,
}

fn summarize(mut samples: Vec<Duration>, wall: Duration) -> Stats {
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1000.0;
    Stats { p50_ms: pct(0.5), p99_ms: pct(0.99), rps: samples.len() as f64 / wall.as_secs_f64() }
}

fn instance(n: usize) -> CreateInstanceRequest {
    CreateInstanceRequest { name: format!("bench-{n}"), zone: Some(ZONES[n % 3].into()), ..Default::default() }
}

fn route(n: usize, target: &str) -> CreateRouteRequest {
    let dest = format!("100.{}.{}.{}/32", 64 + n / 65536, (n / 256) % 256, n % 256);
    CreateRouteRequest { name: format!("r{n}"), destination: dest, target_instance: target.into() }
}

fn lb(n: usize) -> CreateLoadBalancerRequest {
    CreateLoadBalancerRequest {
        name: format!("lb-{n}"),
        scheme: Scheme::Internal,
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 30080 }],
        ..Default::default()
    }
}

fn print_table(rows: &[(impl AsRef<str>, Stats)]) {
    println!("| operation | p50 ms | p99 ms | req/s |");
    println!("|---|---:|---:|---:|");
    for (name, s) in rows {
        println!("| {} | {:.3} | {:.3} | {:.0} |", name.as_ref(), s.p50_ms, s.p99_ms, s.rps);
    }
}

/// Run `op(i)` for i in `range`, `concurrency` at a time; returns per-call latencies and the wall time.
async fn run<F, Fut>(range: std::ops::Range<usize>, concurrency: usize, op: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    let samples: Vec<Duration> = futures::stream::iter(range)
        .map(|i| {
            let fut = op(i);
            async move {
                let t = Instant::now();
                fut.await;
                t.elapsed()
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    (samples, start.elapsed())
}

/// Start `serve` (this binary's, or `FAKECLOUD_BENCH_BIN`'s) on a fresh database in `dir`, with no
/// provisioning delays and `extra` arguments; the process and an admin client of it.
async fn start_emulator(dir: &Path, extra: &[&str]) -> (tokio::process::Child, Client) {
    serve_on(dir.join("bench.db").as_os_str(), extra).await
}

/// [`start_emulator`] on the database `db`: a file, or a PostgreSQL URL.
async fn serve_on(db: &std::ffi::OsStr, extra: &[&str]) -> (tokio::process::Child, Client) {
    let bin = std::env::var_os("FAKECLOUD_BENCH_BIN").map_or_else(|| std::env::current_exe().unwrap(), Into::into);
    let mut child = tokio::process::Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--boot-delay", "0s", "--lb-provision-delay", "0s"])
        .args(extra)
        .arg("--db")
        .arg(db)
        .env("FAKECLOUD_USER_TOKEN", TOKEN)
        .env("FAKECLOUD_ADMIN_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the fakecloud binary");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next_line().await.unwrap().expect("emulator exited");
        if let Some(rest) = line.strip_prefix("fakecloud: serving ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep reading its log, so a full pipe never stalls it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, Client::new(&url, TOKEN).unwrap())
}

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("serve") {
        if let Err(e) = fakecloud_emulator::serve::run_from_args(args) {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(bench());
}

async fn bench() {
    let quick = std::env::args().any(|a| a == "--quick");
    let creates_only = std::env::args().any(|a| a == "--creates");
    let (seq_n, conc_n) = if quick { (300, 2000) } else { (2000, 20000) };
    let dir = tempfile::tempdir().unwrap();
    if std::env::args().any(|a| a == "--dataplane") {
        dataplane::run_bench(dir.path()).await;
        return;
    }
    if std::env::args().any(|a| a == "--aws-face") {
        aws_face::run_bench(dir.path()).await;
        return;
    }
    if std::env::args().any(|a| a == "--farm") {
        farm().await;
        return;
    }
    if std::env::args().any(|a| a == "--stores") {
        stores(dir.path(), seq_n / 2, conc_n / 4).await;
        return;
    }
    let (mut child, c) = start_emulator(dir.path(), &[]).await;
    for q in [QuotaName::Instances, QuotaName::LoadBalancers, QuotaName::RoutesPerRouteTable] {
        c.set_quota(q, 1_000_000).await.unwrap();
    }
    let target = c
        .create_instance(&CreateInstanceRequest { name: "target".into(), ..Default::default() }, None)
        .await
        .unwrap()
        .id;
    let mut rows = Vec::new();
    let conc = 32;

    // Sequential, then concurrent, per operation. Indices never repeat, so every create is a real create.
    let (s, w) = run(0..seq_n, 1, |i| {
        let c = c.clone();
        async move {
            c.create_instance(&instance(i), None).await.unwrap();
        }
    })
    .await;
    rows.push(("create-instance", summarize(s, w)));
    let (s, w) = run(seq_n..seq_n + conc_n, conc, |i| {
        let c = c.clone();
        async move {
            c.create_instance(&instance(i), None).await.unwrap();
        }
    })
    .await;
    rows.push(("create-instance (32 in flight)", summarize(s, w)));

    if !creates_only {
        let (s, w) = run(0..seq_n, 1, |_| {
            let (c, t) = (c.clone(), target.clone());
            async move {
                c.get_instance(&t).await.unwrap();
            }
        })
        .await;
        rows.push(("get-instance", summarize(s, w)));
        let (s, w) = run(0..conc_n, conc, |_| {
            let (c, t) = (c.clone(), target.clone());
            async move {
                c.get_instance(&t).await.unwrap();
            }
        })
        .await;
        rows.push(("get-instance (32 in flight)", summarize(s, w)));
    }

    let (s, w) = run(0..seq_n, 1, |i| {
        let (c, t) = (c.clone(), target.clone());
        async move {
            c.create_route("main", &route(i, &t), None).await.unwrap();
        }
    })
    .await;
    rows.push(("create-route", summarize(s, w)));
    let (s, w) = run(seq_n..seq_n + conc_n, conc, |i| {
        let (c, t) = (c.clone(), target.clone());
        async move {
            c.create_route("main", &route(i, &t), None).await.unwrap();
        }
    })
    .await;
    rows.push(("create-route (32 in flight)", summarize(s, w)));

    let lb_conc_n = conc_n.min(12_000);
    let (s, w) = run(0..seq_n, 1, |i| {
        let c = c.clone();
        async move {
            c.create_load_balancer(&lb(i), None).await.unwrap();
        }
    })
    .await;
    rows.push(("create-lb", summarize(s, w)));
    let (s, w) = run(seq_n..seq_n + lb_conc_n, conc, |i| {
        let c = c.clone();
        async move {
            c.create_load_balancer(&lb(i), None).await.unwrap();
        }
    })
    .await;
    rows.push(("create-lb (32 in flight)", summarize(s, w)));

    if creates_only {
        print_table(&rows);
        let _ = child.start_kill();
        return;
    }
    // Walk 10,000 instances, 1,000 per page (top up first if the quick run made fewer).
    let have = seq_n + conc_n + 1;
    if have < 10_000 {
        run(have..10_001, conc, |i| {
            let c = c.clone();
            async move {
                c.create_instance(&instance(i), None).await.unwrap();
            }
        })
        .await;
    }
    let mut pages = Vec::new();
    let mut walked = 0;
    let wall = Instant::now();
    let mut q = ListInstancesQuery { page_size: Some(1000), ..Default::default() };
    while walked < 10_000 {
        let t = Instant::now();
        let page = c.list_instances(&q).await.unwrap();
        pages.push(t.elapsed());
        walked += page.items.len();
        q.page_token = page.next_page_token;
    }
    let walk_wall = wall.elapsed();
    rows.push(("list-instances page of 1,000", summarize(pages, walk_wall)));

    // Fault-engine overhead: the same concurrent reads with no rules, then with 100 rules that every call is
    // checked against (they match GetInstance but name another resource, so none fires).
    let get = |_| {
        let (c, t) = (c.clone(), target.clone());
        async move {
            c.get_instance(&t).await.unwrap();
        }
    };
    let (s, w) = run(0..conc_n, conc, get).await;
    let without = summarize(s, w);
    for n in 0..100 {
        let rule = CreateFaultRuleRequest {
            id: None,
            matcher: FaultMatch {
                operations: vec!["Get*".into()],
                resource_ids: vec![format!("i-other-{n}")],
                ..Default::default()
            },
            action: FaultAction::Error {
                status: 500,
                code: "InternalError".into(),
                message: None,
                headers: Default::default(),
            },
            trigger: Default::default(),
            position: None,
        };
        c.add_fault(&rule).await.unwrap();
    }
    let (s, w) = run(0..conc_n, conc, get).await;
    let with = summarize(s, w);
    rows.push(("get-instance (32 in flight), no fault rules", without));
    let loss = 100.0 * (1.0 - with.rps / rows.last().map(|r| r.1.rps).unwrap_or(with.rps));
    rows.push(("get-instance (32 in flight), 100 fault rules", with));

    print_table(&rows);
    println!("\nwalk of {walked} instances: {:.1} ms total", walk_wall.as_secs_f64() * 1000.0);
    println!("fault engine with 100 rules: {loss:.1} % fewer requests per second than with none");
    let _ = child.start_kill();
}

/// Writes on each store: create-instance one at a time and 32 in flight, on a SQLite file, on PostgreSQL (a
/// server of its own, `initdb` in a temp dir, on loopback) with one emulator, and with three emulators on one
/// database called in turn (as a Service in front of replicas spreads calls). Each on a fresh database.
async fn stores(dir: &Path, seq_n: usize, conc_n: usize) {
    let pg = postgres::Postgres::start();
    let (one, shared) = (pg.database("one").await, pg.database("shared").await);
    let file = dir.join("stores.db");
    let setups: [(&str, Vec<&std::ffi::OsStr>); 3] = [
        ("SQLite file", vec![file.as_os_str()]),
        ("PostgreSQL, 1 emulator", vec![one.as_ref()]),
        ("PostgreSQL, 3 emulators", vec![shared.as_ref(); 3]),
    ];
    let mut rows = Vec::new();
    for (store, dbs) in setups {
        let mut children = Vec::new();
        let mut clients = Vec::new();
        for db in dbs {
            let (child, c) = serve_on(db, &["--vpc-cidr", "10.0.0.0/12"]).await;
            children.push(child);
            clients.push(c);
        }
        clients[0].set_quota(QuotaName::Instances, 1_000_000).await.unwrap();
        let create = |i: usize| {
            let c = clients[i % clients.len()].clone();
            async move {
                c.create_instance(&instance(i), None).await.unwrap();
            }
        };
        let (s, w) = run(0..seq_n, 1, create).await;
        rows.push((format!("create-instance, {store}"), summarize(s, w)));
        let (s, w) = run(seq_n..seq_n + conc_n, 32, create).await;
        rows.push((format!("create-instance (32 in flight), {store}"), summarize(s, w)));
        for mut child in children {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    // Accounts' writes add up: each account's cloud has a writer lock of its own (issue #47).
    let url = pg.database("accounts").await;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(serve_on(url.as_ref(), &["--vpc-cidr", "10.0.0.0/12"]).await);
    }
    // Each account's calls go through every replica in turn: clients[replica][account].
    let mut clients: Vec<Vec<Client>> = vec![Vec::new(); replicas.len()];
    for n in 0..ACCOUNTS {
        let made = replicas[0].1.create_account(&format!("bench-{n}")).await.unwrap();
        Client::new(replicas[0].1.endpoint(), &made.admin_token)
            .unwrap()
            .set_quota(QuotaName::Instances, 1_000_000)
            .await
            .unwrap();
        for (replica, (_, c)) in replicas.iter().enumerate() {
            clients[replica].push(Client::new(c.endpoint(), &made.user_token).unwrap());
        }
    }
    // One account alone with its share of the calls in flight, then every account with its share at once.
    let per_account = 32 / ACCOUNTS;
    for accounts in [1, ACCOUNTS] {
        let create = |i: usize| {
            let c = clients[i % replicas.len()][i % accounts].clone();
            async move {
                c.create_instance(&instance(i), None).await.unwrap();
            }
        };
        // (Names not taken in the run before.)
        let (s, w) =
            run(conc_n * accounts..conc_n * accounts + conc_n * accounts / ACCOUNTS, per_account * accounts, create)
                .await;
        let row = match accounts {
            1 => format!("create-instance ({per_account} in flight), PostgreSQL, 3 emulators, 1 account"),
            n => format!(
                "create-instance ({} in flight), PostgreSQL, 3 emulators, {n} accounts ({per_account} in flight each)",
                per_account * n
            ),
        };
        rows.push((row, summarize(s, w)));
    }
    for (mut child, _) in replicas {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    print_table(&rows);
}

/// How many accounts the last row of `--stores` spreads its writes over.
const ACCOUNTS: usize = 8;

/// What a farm on PostgreSQL holds and how it fails (issue #47), on a server with PostgreSQL's default
/// `max_connections` (100, 3 of them for superusers):
/// - the connections one replica holds, idle, with 0 accounts and after each new account (an account's pools
///   are opened when it is created, or by the first call through another replica);
/// - with three replicas, accounts created through the first until the server is full, each called once through
///   every replica: how many every replica serves, and how the rest are answered (503, never 401);
/// - the database stopped under one replica: how long `/healthz`, `/readyz` and a create take to answer, and
///   how long after the database is back the first create succeeds.
async fn farm() {
    use sqlx::Connection;
    let pg = postgres::Postgres::start_with_max_connections(100);
    // Connected first: once the emulators have filled the server, no other connection is let in.
    let counter = tokio::sync::Mutex::new(sqlx::PgConnection::connect(&pg.url("postgres")).await.unwrap());
    let held = |db: &'static str| {
        let counter = &counter;
        async move {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1")
                .bind(db)
                .fetch_one(&mut *counter.lock().await)
                .await
                .unwrap()
        }
    };
    // Long enough for an idle pool's connections to be closed (idle 30 s, looked for every 30 s).
    let settle = || tokio::time::sleep(Duration::from_secs(65));

    let url = pg.database("one").await;
    let (mut one, c) = serve_on(url.as_ref(), &[]).await;
    settle().await;
    let base = held("one").await;
    for n in 1..=8 {
        c.create_account(&format!("job-{n}")).await.unwrap();
    }
    settle().await;
    let eight = held("one").await;
    println!("one replica, idle: {base} connections with no account, {eight} with 8 accounts");
    println!("  per account: {:.1}", (eight - base) as f64 / 8.0);
    let _ = one.start_kill();
    let _ = one.wait().await;

    let url = pg.database("three").await;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(serve_on(url.as_ref(), &[]).await);
    }
    let (mut served_by_all, mut refused, mut other) = (0, 0, Vec::new());
    for n in 0..fakecloud_api::limits::ACCOUNTS_MAX {
        let made = match replicas[0].1.create_account(&format!("job-{n}")).await {
            Ok(made) => made,
            Err(e) if e.status() == Some(503) => {
                refused += 1;
                break;
            }
            Err(e) => panic!("creating account {n}: {e}"),
        };
        let mut all = true;
        for (_, c) in &replicas {
            let user = Client::new(c.endpoint(), &made.user_token).unwrap();
            match user.list_instances(&ListInstancesQuery::default()).await {
                Ok(_) => {}
                Err(e) if e.status() == Some(503) => all = false,
                Err(e) => other.push(e.to_string()),
            }
        }
        if !all {
            refused += 1;
            break;
        }
        served_by_all += 1;
    }
    let busy = held("three").await;
    settle().await;
    println!(
        "three replicas, max_connections=100: {served_by_all} accounts served by all three; the next answered 503 \
         ({refused}); other answers: {other:?}; {busy} connections held, {} once idle",
        held("three").await
    );
    for (mut child, _) in replicas {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }

    let url = pg.database("away").await;
    let (mut child, c) = serve_on(url.as_ref(), &[]).await;
    c.create_instance(&instance(0), None).await.unwrap();
    let http = reqwest::Client::new();
    let timed = |path: &'static str| {
        let (http, base) = (http.clone(), c.endpoint().to_string());
        async move {
            let t = Instant::now();
            let status = http.get(format!("{base}{path}")).send().await.unwrap().status().as_u16();
            (status, t.elapsed())
        }
    };
    pg.stop();
    let (health, health_took) = timed("/healthz").await;
    let (ready, ready_took) = timed("/readyz").await;
    let mut creates = Vec::new();
    for n in 1..=5 {
        let t = Instant::now();
        let status = c.create_instance(&instance(n), None).await.map_or_else(|e| e.status().unwrap_or(0), |_| 200);
        creates.push((status, t.elapsed()));
    }
    let back = Instant::now();
    pg.start_again();
    let started = back.elapsed();
    let mut n = 100;
    while c.create_instance(&instance(n), None).await.is_err() {
        n += 1;
    }
    println!("PostgreSQL stopped: /healthz {health} in {health_took:.1?}, /readyz {ready} in {ready_took:.1?}");
    println!("  creates: {creates:.1?}");
    println!(
        "PostgreSQL started again ({started:.1?}): the first create succeeded {:.1?} after the start, {} tries",
        back.elapsed() - started,
        n - 99
    );
    let _ = child.start_kill();
}

//! A farm on PostgreSQL fails safe (issue #47): accounts whose long IDs begin alike keep schemas of their own; a
//! session that holds a lock and goes quiet (a replica paused while it writes) stalls no call past the bounds,
//! and the server ends it; PostgreSQL away, a call is answered 503 within a bound and `/readyz` says why while
//! `/healthz` stays alive; a replica that cannot open an account for want of connections says 503, never 401; a
//! lease's wipe killed part way never hands the old holder's data to the next; two replicas' fault edits at once
//! are one after the other; an account deleted through one replica gives another's calls 401, not 500. Every
//! server here is a real PostgreSQL and every call a real HTTP call.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fakecloud_api::{
    Client, CreateFaultRuleRequest, CreateInstanceRequest, FaultAction, FaultMatch, FaultTrigger, LeaseRequest,
    ListInstancesQuery, RateLimitPreset, codes,
};
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::server::Server;
use futures::future::join_all;
use sqlx::{Connection, PgConnection};

use crate::common::postgres::{self, Postgres};
use crate::common::{ADMIN, HANG, USER, eventually, log_to_test, spawn_emulator, tokens};

/// The longest a call may take while a lock it needs is held elsewhere or the database is away: the lock wait
/// (5 s), a pool's wait for a connection (5 s), twice over for a call that reads before it writes, with room for
/// a busy machine. A hang detector for the bounds, not a speed claim.
const BOUND: Duration = Duration::from_secs(30);

async fn serve(url: &str) -> Server {
    log_to_test();
    let cfg = Config { timings: Timings::instant(), ..Config::default() };
    Server::start("127.0.0.1:0", &DbLocation::Postgres(url.to_string()), cfg, tokens()).await.unwrap()
}

fn client(url: &str, token: &str) -> Client {
    Client::new(url, token).unwrap().with_timeout(BOUND).unwrap()
}

fn node(name: &str) -> CreateInstanceRequest {
    CreateInstanceRequest { name: name.into(), ..Default::default() }
}

async fn names(c: &Client) -> Vec<String> {
    let mut names: Vec<String> =
        c.list_all_instances(&ListInstancesQuery::default()).await.unwrap().into_iter().map(|i| i.name).collect();
    names.sort();
    names
}

/// A fault rule named `id` on an operation no test here calls: an edit of the faults that changes no answer.
fn idle_rule(id: String) -> CreateFaultRuleRequest {
    CreateFaultRuleRequest {
        id: Some(id),
        matcher: FaultMatch { operations: vec!["DeleteRouteTable".into()], ..Default::default() },
        action: FaultAction::Error {
            status: 503,
            code: "ServiceUnavailable".into(),
            message: None,
            headers: Default::default(),
        },
        trigger: FaultTrigger::default(),
        position: None,
    }
}

/// The schema an account had before issue #47: `account_<id>`, cut by PostgreSQL to 63 bytes.
fn cut_schema(id: &str) -> String {
    let mut name = format!("account_{}", id.replace('-', "_"));
    name.truncate(63);
    name
}

async fn sql(url: &str, statement: &str) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_string())).execute(&mut conn).await.unwrap();
}

/// Two IDs of 60 characters that share their first 56: `account_<id>` would be the same 63 bytes for both.
fn long_ids() -> (String, String) {
    let stem = "x".repeat(56);
    (format!("{stem}-one"), format!("{stem}-two"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_account_ids_that_begin_alike_keep_their_own_schemas() {
    let url = postgres::shared().new_database().await;
    let server = serve(&url).await;
    let admin = client(&server.url(), ADMIN);
    let (a, b) = long_ids();
    let ta = admin.create_account(&a).await.unwrap();
    let ua = client(&server.url(), &ta.user_token);
    ua.create_instance(&node("a-node"), None).await.unwrap();
    let tb = admin.create_account(&b).await.unwrap();
    let ub = client(&server.url(), &tb.user_token);
    assert_eq!(names(&ua).await, ["a-node"], "creating {b} left {a}'s instance alone");
    assert_eq!(names(&ub).await, Vec::<String>::new(), "{b} starts empty");
    ub.create_instance(&node("b-node"), None).await.unwrap();
    assert_eq!(names(&ua).await, ["a-node"], "{a} does not see {b}'s instance");
    admin.delete_account(&a).await.unwrap();
    assert_eq!(names(&ub).await, ["b-node"], "deleting {a} left {b} whole");
    let e = ua.list_instances(&ListInstancesQuery::default()).await.unwrap_err();
    assert_eq!(e.status(), Some(401), "{a}'s token after its deletion: {e}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_cut_by_an_earlier_fakecloud_is_renamed_or_refused_with_what_to_do() {
    let url = postgres::shared().new_database().await;
    let (a, b) = long_ids();
    let server = serve(&url).await;
    let made = client(&server.url(), ADMIN).create_account(&a).await.unwrap();
    client(&server.url(), &made.user_token).create_instance(&node("kept"), None).await.unwrap();
    server.shutdown().await;

    // As an earlier fakecloud left it: the account's schema under the cut name.
    let new = fakecloud_emulator::accounts::schema(&a);
    assert!(new.len() <= 63, "{new}");
    sql(&url, &format!("ALTER SCHEMA \"{new}\" RENAME TO \"{}\"", cut_schema(&a))).await;
    let server = serve(&url).await;
    assert_eq!(names(&client(&server.url(), &made.user_token)).await, ["kept"], "renamed, its data kept");
    server.shutdown().await;

    // Two accounts on one cut name: their data cannot be told apart, and the emulator says what to do.
    sql(&url, &format!("ALTER SCHEMA \"{new}\" RENAME TO \"{}\"", cut_schema(&a))).await;
    sql(
        &url,
        &format!("INSERT INTO accounts (id, user_token, admin_token, created_at) VALUES ('{b}', 'u-{b}', 'a-{b}', 0)"),
    )
    .await;
    let cfg = Config { timings: Timings::instant(), ..Config::default() };
    let refused = Server::start("127.0.0.1:0", &DbLocation::Postgres(url.clone()), cfg, tokens()).await.err().unwrap();
    let said = refused.to_string();
    assert!(said.contains(&a) && said.contains(&b) && said.contains("DROP SCHEMA"), "{said}");
    sql(&url, &format!("DROP SCHEMA \"{}\" CASCADE", cut_schema(&a))).await;
    let server = serve(&url).await;
    assert_eq!(names(&client(&server.url(), &made.user_token)).await, Vec::<String>::new(), "{a} starts empty");
    server.shutdown().await;
}

/// A session that took the emulator's locks and went quiet, as a replica paused mid-write looks to the server:
/// the accounts' lock and the emulator's own cloud's writer lock, in a transaction left open. With `bounded`,
/// the session has the emulator's own bounds, so the server ends it.
async fn quiet_holder(url: &str, bounded: bool) -> PgConnection {
    let mut conn = PgConnection::connect(url).await.unwrap();
    if bounded {
        for statements in fakecloud_emulator::db::postgres::SESSION_BOUNDS {
            sqlx::raw_sql(*statements).execute(&mut conn).await.unwrap();
        }
    }
    sqlx::raw_sql("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(fakecloud_emulator::db::postgres::ACCOUNTS_LOCK)
        .execute(&mut conn)
        .await
        .unwrap();
    let cloud_lock: i64 =
        sqlx::query_scalar(fakecloud_emulator::db::postgres::CLOUD_LOCK).fetch_one(&mut conn).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(cloud_lock).execute(&mut conn).await.unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_session_holding_the_locks_stalls_no_call_past_its_bound() {
    let url = postgres::shared().new_database().await;
    let server = serve(&url).await;
    let (admin, user) = (client(&server.url(), ADMIN), client(&server.url(), USER));
    let ci = admin.create_account("ci").await.unwrap();
    let ci = client(&server.url(), &ci.user_token);
    let mut holder = quiet_holder(&url, false).await;

    // `/healthz` does not wait for the accounts' lock; writes to the held cloud and account changes are
    // answered 503 with Retry-After; another account's cloud writes as ever.
    let started = Instant::now();
    let health = reqwest::Client::new().get(format!("{}/healthz", server.url())).timeout(BOUND).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(5), "/healthz took {:?}", started.elapsed());
    let e = user.create_instance(&node("held"), None).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(503), Some(codes::SERVICE_UNAVAILABLE)), "{e}");
    assert!(e.to_string().contains("held by another replica"), "{e}");
    let e = admin.create_account("another").await.unwrap_err();
    assert_eq!(e.status(), Some(503), "{e}");
    ci.create_instance(&node("other-cloud"), None).await.unwrap();

    // Released, the cloud writes again and nothing was half done.
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    user.create_instance(&node("held"), None).await.unwrap();
    admin.create_account("another").await.unwrap();
    assert_eq!(names(&user).await, ["held"]);

    // A session with the emulator's bounds that goes quiet is ended by the server: the cloud writes again
    // without anyone letting go, and the quiet session finds itself gone.
    let mut holder = quiet_holder(&url, true).await;
    eventually(HANG, "a write once the server ended the quiet session", || async {
        user.create_instance(&node("after"), None).await.ok()
    })
    .await;
    assert!(sqlx::query("SELECT 1").execute(&mut holder).await.is_err(), "the quiet session was ended");
    server.shutdown().await;
}

/// Pause the replica `pid` (SIGSTOP) at a moment it holds a transaction open on the database at `url` (as a
/// replica paused mid-write does), trying again a bounded number of times: paused, a session of the database
/// stays idle in its transaction. The others' transactions last milliseconds.
async fn pause_holding(pid: nix::unistd::Pid, url: &str) {
    use nix::sys::signal::{Signal, kill};
    let mut conn = PgConnection::connect(url).await.unwrap();
    for _ in 0..200 {
        kill(pid, Signal::SIGSTOP).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in \
             transaction' AND state_change < now() - interval '250 milliseconds'",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if idle > 0 {
            return;
        }
        kill(pid, Signal::SIGCONT).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the replica never held a transaction open when paused: is the load running?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_stalls_the_others_no_longer_than_the_bounds() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let url = postgres::shared().new_database().await;
    let (mut a, a_url, _) = spawn_emulator(&url).await;
    let (_b, b_url, _) = spawn_emulator(&url).await;
    let (ua, ub) = (client(&a_url, USER), client(&b_url, USER));
    // A writing hard, so that it is likely to hold the writer's lock when it is paused.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let ua = ua.clone();
            tokio::spawn(async move {
                for n in 0..200 {
                    if ua.create_instance(&node(&format!("a{w}-{n}")), None).await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    eventually(HANG, "A writing", || async { (names(&ub).await.len() >= 20).then_some(()) }).await;
    let pid = Pid::from_raw(a.id().unwrap() as i32);
    pause_holding(pid, &url).await;
    // Every call through B is answered (the client's timeout is BOUND), and B writes again within the bounds.
    let paused = Instant::now();
    let mut answered = 0;
    let written = loop {
        match ub.create_instance(&node(&format!("b-{answered}")), None).await {
            Ok(i) => break i,
            Err(e) => assert_eq!(e.status(), Some(503), "B while A is paused: {e}"),
        }
        answered += 1;
        assert!(paused.elapsed() < HANG, "B has not written for {:?} with A paused", paused.elapsed());
    };
    kill(pid, Signal::SIGCONT).unwrap();
    for w in writers {
        w.await.unwrap();
    }
    // A, woken, serves again; what B wrote is there through A.
    eventually(HANG, "A serving again", || async { ua.get_instance(&written.id).await.ok() }).await;
    a.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_away_a_call_is_answered_503_within_a_bound_and_readyz_says_why() {
    let pg = Postgres::start();
    let url = pg.database("cloud").await;
    let server = serve(&url).await;
    let user = client(&server.url(), USER);
    let kept = user.create_instance(&node("kept"), None).await.unwrap();
    let http = reqwest::Client::new();
    let get = |path: &str| http.get(format!("{}{path}", server.url())).timeout(BOUND).send();
    assert_eq!(get("/readyz").await.unwrap().status(), 200);

    pg.stop();
    let health = get("/healthz").await.unwrap();
    assert_eq!(health.status(), 200, "alive while the database is away");
    let ready = get("/readyz").await.unwrap();
    assert_eq!(ready.status(), 503);
    let body = ready.text().await.unwrap();
    assert!(body.contains("the store is unreachable"), "{body}");
    for attempt in 0..3 {
        let e = user.create_instance(&node(&format!("lost-{attempt}")), None).await.unwrap_err();
        assert_eq!((e.status(), e.code()), (Some(503), Some(codes::SERVICE_UNAVAILABLE)), "{e}");
    }
    let e = user.get_instance(&kept.id).await.unwrap_err();
    assert_eq!(e.status(), Some(503), "{e}");

    // Back without a restart of the emulator; nothing acknowledged lost.
    pg.start_again();
    eventually(HANG, "a write once the database is back", || async {
        user.create_instance(&node("back"), None).await.ok()
    })
    .await;
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    assert_eq!(names(&user).await, ["back", "kept"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_out_of_connections_is_a_503_never_a_401_for_a_valid_token() {
    // 40 connections, 3 of them for superusers: two replicas' own, and far fewer accounts than 12 on both.
    let pg = Postgres::start_with_max_connections(40);
    let url = pg.database("cloud").await;
    let (_one, one_url, _) = spawn_emulator(&url).await;
    let (_two, two_url, _) = spawn_emulator(&url).await;
    let admin = client(&one_url, ADMIN);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut accounts = Vec::new();
    for n in 0..12 {
        match admin.create_account(&format!("job-{n}")).await {
            Ok(made) => accounts.push(made.user_token),
            Err(e) => {
                assert_eq!(e.status(), Some(503), "creating an account with the database full: {e}");
                *statuses.entry(503).or_default() += 1;
            }
        }
    }
    assert!(!accounts.is_empty());
    for token in &accounts {
        for replica in [&one_url, &two_url] {
            let status = match client(replica, token).list_instances(&ListInstancesQuery::default()).await {
                Ok(_) => 200,
                Err(e) => {
                    assert_eq!(e.status(), Some(503), "a valid token through {replica}: {e}");
                    503
                }
            };
            *statuses.entry(status).or_default() += 1;
        }
    }
    assert!(statuses.contains_key(&200) && statuses.contains_key(&503), "the database was not filled: {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wipe_killed_part_way_never_hands_the_old_holders_data_to_the_next() {
    let url = postgres::shared().new_database().await;
    let (mut a, a_url, _) = spawn_emulator(&url).await;
    let operator = client(&a_url, ADMIN);
    operator.create_account("pool-1").await.unwrap();
    let lease =
        |holder: &str| LeaseRequest { holder: holder.into(), ttl_seconds: 600.0, account: Some("pool-1".into()) };
    let job1 = operator.take_lease(&lease("job-1")).await.unwrap();
    let job1_user = client(&a_url, &job1.user_token);
    job1_user.create_instance(&node("job-1-data"), None).await.unwrap();

    // The account's tables locked elsewhere: its schema cannot be dropped, so the release is refused (503), the
    // lease and the data stay as they were.
    let schema = fakecloud_emulator::accounts::schema("pool-1");
    let mut locker = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut locker).await.unwrap();
    let lock = format!("LOCK TABLE \"{schema}\".instances IN ACCESS SHARE MODE");
    sqlx::raw_sql(sqlx::AssertSqlSafe(lock.clone())).execute(&mut locker).await.unwrap();
    let e = operator.release_lease("pool-1").await.unwrap_err();
    assert_eq!(e.status(), Some(503), "{e}");
    assert_eq!(names(&job1_user).await, ["job-1-data"], "the refused wipe left the holder's data and tokens");

    // The emulator killed while its wipe waits to drop the data: the next holder still gets an empty account.
    let releasing = tokio::spawn({
        let operator = operator.clone();
        async move { operator.release_lease("pool-1").await }
    });
    eventually(HANG, "the wipe waiting to drop the account's schema", || {
        let url = url.clone();
        async move {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'DROP SCHEMA%' AND wait_event_type = 'Lock'",
            )
            .fetch_one(&mut conn)
            .await
            .unwrap();
            (waiting > 0).then_some(())
        }
    })
    .await;
    a.kill().await.unwrap();
    let _ = releasing.await;
    sqlx::raw_sql("ROLLBACK").execute(&mut locker).await.unwrap();

    let (_b, b_url, _) = spawn_emulator(&url).await;
    let operator = client(&b_url, ADMIN);
    operator.release_lease("pool-1").await.unwrap();
    let job2 = operator.take_lease(&lease("job-2")).await.unwrap();
    assert_eq!(names(&client(&b_url, &job2.user_token)).await, Vec::<String>::new(), "job-2 sees nothing of job-1's");
    let e = client(&b_url, &job1.user_token).list_instances(&ListInstancesQuery::default()).await.unwrap_err();
    assert_eq!(e.status(), Some(401), "job-1's token after the wipe: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_edits_through_two_replicas_at_once_are_one_after_the_other() {
    let url = postgres::shared().new_database().await;
    let (_a, a_url, _) = spawn_emulator(&url).await;
    let (_b, b_url, _) = spawn_emulator(&url).await;
    let admins = [client(&a_url, ADMIN), client(&b_url, ADMIN)];
    for round in 0..10 {
        let rule = idle_rule(format!("rule-{round}"));
        let added = join_all(admins.iter().map(|admin| admin.add_fault(&rule))).await;
        let mut outcomes: Vec<Option<u16>> = added.iter().map(|r| r.as_ref().err().and_then(|e| e.status())).collect();
        outcomes.sort();
        assert_eq!(outcomes, [None, Some(409)], "round {round}: one rule named rule-{round}, the other refused");

        let (first, second) = match round % 2 {
            0 => (RateLimitPreset::AwsEc2, RateLimitPreset::GcpCompute),
            _ => (RateLimitPreset::GcpCompute, RateLimitPreset::AwsEc2),
        };
        let (x, y) =
            tokio::join!(admins[0].install_rate_limit_preset(first), admins[1].install_rate_limit_preset(second));
        let installed = [x.unwrap(), y.unwrap()].map(|limits| {
            let mut ids: Vec<String> = limits.items.into_iter().map(|l| l.id).collect();
            ids.sort();
            ids
        });
        for admin in &admins {
            let mut listed: Vec<String> =
                admin.list_rate_limits().await.unwrap().items.into_iter().map(|l| l.id).collect();
            listed.sort();
            assert!(installed.contains(&listed), "round {round}: in force {listed:?}, installed {installed:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_deleted_through_one_replica_gives_the_others_calls_401_not_500() {
    let url = postgres::shared().new_database().await;
    let (_a, a_url, _) = spawn_emulator(&url).await;
    let (_b, b_url, _) = spawn_emulator(&url).await;
    for round in 0..5 {
        let id = format!("gone-{round}");
        let made = client(&a_url, ADMIN).create_account(&id).await.unwrap();
        let through_b = client(&b_url, &made.user_token);
        through_b.create_instance(&node("n"), None).await.unwrap();
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let c = through_b.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for _ in 0..200 {
                        match c.list_instances(&ListInstancesQuery::default()).await {
                            Ok(_) => seen.push(200),
                            Err(e) => {
                                let status = e.status().unwrap_or(0);
                                assert!(matches!(status, 401 | 404), "a call of a deleted account: {e}");
                                seen.push(status);
                                if seen.iter().filter(|s| **s != 200).count() > 3 {
                                    break;
                                }
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        client(&a_url, ADMIN).delete_account(&id).await.unwrap();
        for caller in callers {
            caller.await.unwrap();
        }
        let e = through_b.list_instances(&ListInstancesQuery::default()).await.unwrap_err();
        assert_eq!(e.status(), Some(401), "{e}");
    }
}

/// One replica of the chaos test: its address while it runs, and an epoch that moves whenever it is frozen,
/// thawed, killed or started, so a call that spanned a change is not held to the healthy replicas' promise.
struct Slot {
    url: String,
    healthy: bool,
    epoch: u64,
    /// The replica's log (see `spawn_emulator`), shown when a call to it went unanswered.
    log: Arc<Mutex<String>>,
}

/// What the chaos test's load saw.
#[derive(Default)]
struct Seen {
    /// Creates answered 2xx: (account, instance ID).
    created: Vec<(usize, String)>,
    /// Terminates answered 2xx, and those that may have been applied: no answer (the replica killed, the
    /// database restarted after the commit), or a 5xx. A terminate refused 4xx was not.
    terminated: std::collections::HashSet<String>,
    maybe_terminated: std::collections::HashSet<String>,
    /// Calls to a replica healthy from start to end that got no answer within [`BOUND`], with the replica.
    unanswered: Vec<(String, usize)>,
    /// What the farm is going through, for the unanswered calls' story.
    phase: String,
    /// A leased account that showed what its holder did not make.
    leaked: Vec<String>,
    calls: usize,
}

/// The farm under a bounded mixed load (creates, terminates and fault edits in two accounts and the emulator's
/// own cloud, and an account leased, used and released over and over) while one replica is frozen and thawed,
/// one killed and started again, and PostgreSQL itself restarted: no acknowledged write lost, no leased account
/// showing another holder's data, every call to a healthy replica answered within its bound, and the farm
/// serving again within [`BOUND`] of each fault's end. `FAKECLOUD_CHAOS_ROUNDS` repeats the faults (`make chaos`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_farm_under_load_through_a_freeze_a_kill_and_a_database_restart() {
    use std::sync::atomic::{AtomicBool, Ordering};

    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let rounds: usize = std::env::var("FAKECLOUD_CHAOS_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(1);
    let pg = Postgres::start();
    let url = pg.database("farm").await;
    let mut processes = Vec::new();
    let mut slots = Vec::new();
    for _ in 0..3 {
        let (process, replica, log) = spawn_emulator(&url).await;
        processes.push(process);
        slots.push(Slot { url: replica, healthy: true, epoch: 0, log });
    }
    let slots = Arc::new(Mutex::new(slots));
    let operator = client(&slots.lock().unwrap()[0].url, ADMIN);
    // Tokens by account: the emulator's own cloud, then two accounts.
    let mut tokens = vec![(USER.to_string(), ADMIN.to_string())];
    for id in ["team-a", "team-b"] {
        let made = operator.create_account(id).await.unwrap();
        tokens.push((made.user_token, made.admin_token));
    }
    operator.create_account("pool-1").await.unwrap();
    let tokens = Arc::new(tokens);
    let seen = Arc::new(Mutex::new(Seen { phase: "the load starting".into(), ..Seen::default() }));
    let stop = Arc::new(AtomicBool::new(false));

    /// A call through one replica: its outcome, and whether the replica was healthy throughout.
    struct Through<T> {
        outcome: Result<T, fakecloud_api::ClientError>,
        replica: usize,
        held_to_it: bool,
        took: Duration,
    }
    // A call through replica `n % 3`.
    async fn through<T>(
        slots: &Mutex<Vec<Slot>>,
        n: usize,
        token: &str,
        call: impl AsyncFnOnce(Client) -> Result<T, fakecloud_api::ClientError>,
    ) -> Through<T> {
        let replica = n % 3;
        let (url, epoch, healthy) = {
            let s = &slots.lock().unwrap()[replica];
            (s.url.clone(), s.epoch, s.healthy)
        };
        let started = Instant::now();
        let outcome = call(client(&url, token)).await;
        let s = &slots.lock().unwrap()[replica];
        Through { outcome, replica, held_to_it: healthy && s.healthy && s.epoch == epoch, took: started.elapsed() }
    }
    // Count the call, keep it if it went unanswered, and hand its outcome on.
    fn note<T>(seen: &Mutex<Seen>, what: &str, call: Through<T>) -> Result<T, fakecloud_api::ClientError> {
        let mut seen = seen.lock().unwrap();
        seen.calls += 1;
        if let Err(e) = &call.outcome
            && call.held_to_it
            && e.status().is_none()
        {
            // (How long it took says whether it was a hang.)
            let said = format!(
                "{what} through replica {}, noted during {}, after {:?}: {e}",
                call.replica, seen.phase, call.took
            );
            seen.unanswered.push((said, call.replica));
        }
        call.outcome
    }

    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (slots, tokens, seen, stop) = (slots.clone(), tokens.clone(), seen.clone(), stop.clone());
            tokio::spawn(async move {
                let mut mine: Vec<(usize, String)> = Vec::new();
                for n in 0..5_000 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let account = (w + n) % tokens.len();
                    let (user, admin) = &tokens[account];
                    match n % 10 {
                        // A fault edit: a rule added and deleted, on an operation the load does not call.
                        9 => {
                            let rule = idle_rule(format!("chaos-{w}-{n}"));
                            let added = note(
                                &seen,
                                "add a fault rule",
                                through(&slots, n, admin, async |c| c.add_fault(&rule).await).await,
                            );
                            if let Ok(rule) = added {
                                let gone = through(&slots, n + 1, admin, async |c| c.delete_fault(&rule.id).await);
                                note(&seen, "delete a fault rule", gone.await).ok();
                            }
                        }
                        // A terminate of one this worker made.
                        4 if !mine.is_empty() => {
                            let (of, id) = mine.swap_remove(n % mine.len());
                            let done = note(
                                &seen,
                                "terminate",
                                through(&slots, n, &tokens[of].0, async |c| c.terminate_instance(&id).await).await,
                            );
                            match done.map_err(|e| e.status()) {
                                Ok(_) => seen.lock().unwrap().terminated.insert(id),
                                Err(Some(400..500)) => false,
                                Err(_) => seen.lock().unwrap().maybe_terminated.insert(id),
                            };
                        }
                        _ => {
                            let name = format!("w{w}-{n}");
                            let made = note(
                                &seen,
                                "create",
                                through(&slots, n, user, async |c| c.create_instance(&node(&name), None).await).await,
                            );
                            if let Ok(i) = made {
                                mine.push((account, i.id.clone()));
                                seen.lock().unwrap().created.push((account, i.id));
                            }
                        }
                    }
                }
            })
        })
        .collect();
    // Leases: take pool-1, make an instance with its tokens, see only that, release; over and over.
    let leaser = {
        let (slots, seen, stop) = (slots.clone(), seen.clone(), stop.clone());
        tokio::spawn(async move {
            for n in 0..2_000 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let req =
                    LeaseRequest { holder: format!("job-{n}"), ttl_seconds: 60.0, account: Some("pool-1".into()) };
                let lease =
                    note(&seen, "take a lease", through(&slots, n, ADMIN, async |c| c.take_lease(&req).await).await);
                let Ok(lease) = lease else { continue };
                let name = format!("job-{n}");
                let made =
                    through(&slots, n + 1, &lease.user_token, async |c| c.create_instance(&node(&name), None).await)
                        .await;
                note(&seen, "create in a lease", made).ok();
                let listed = through(&slots, n + 2, &lease.user_token, async |c| {
                    c.list_all_instances(&ListInstancesQuery::default()).await
                })
                .await;
                let listed = note(&seen, "list in a lease", listed);
                if let Ok(listed) = listed {
                    let foreign: Vec<String> = listed.into_iter().map(|i| i.name).filter(|m| *m != name).collect();
                    if !foreign.is_empty() {
                        seen.lock().unwrap().leaked.push(format!("job-{n} saw {foreign:?}"));
                    }
                }
                // Until released: a lease left held would keep the next job out for its TTL.
                loop {
                    let released = note(
                        &seen,
                        "release a lease",
                        through(&slots, n, ADMIN, async |c| c.release_lease("pool-1").await).await,
                    );
                    if released.is_ok() || stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
        })
    };

    let acked = || seen.lock().unwrap().created.len();
    let phase = |now: String| seen.lock().unwrap().phase = now;
    let set = |n: usize, healthy: bool, url: Option<String>| {
        let mut slots = slots.lock().unwrap();
        let slot = &mut slots[n];
        slot.healthy = healthy;
        slot.epoch += 1;
        if let Some(url) = url {
            slot.url = url;
        }
    };
    // The farm serves again: a create through every replica, each within BOUND of the fault's end.
    let serving = async || {
        let urls: Vec<String> = slots.lock().unwrap().iter().map(|s| s.url.clone()).collect();
        for url in urls {
            let started = Instant::now();
            loop {
                let name = format!("probe-{}", seen.lock().unwrap().calls);
                match client(&url, USER).create_instance(&node(&name), None).await {
                    Ok(i) => {
                        let mut seen = seen.lock().unwrap();
                        seen.calls += 1;
                        seen.created.push((0, i.id));
                        break;
                    }
                    Err(e) => assert!(started.elapsed() < BOUND, "{url} not serving {:?} after a fault: {e}", BOUND),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    for round in 0..rounds {
        let before = acked();
        eventually(HANG, "the load under way", || async { (acked() >= before + 100).then_some(()) }).await;

        let frozen = Pid::from_raw(processes[0].id().unwrap() as i32);
        set(0, false, None);
        phase(format!("round {round}: replica 0 frozen"));
        pause_holding(frozen, &url).await;
        // Longer than a call's bound: without the database's bounds, the calls it holds locks for would wait it out.
        tokio::time::sleep(BOUND + Duration::from_secs(5)).await;
        kill(frozen, Signal::SIGCONT).unwrap();
        set(0, true, None);
        phase(format!("round {round}: replica 0 thawed"));
        serving().await;

        set(1, false, None);
        phase(format!("round {round}: replica 1 killed"));
        processes[1].kill().await.unwrap();
        let (process, replica, log) = spawn_emulator(&url).await;
        processes[1] = process;
        slots.lock().unwrap()[1].log = log;
        set(1, true, Some(replica));
        phase(format!("round {round}: replica 1 started again"));
        serving().await;

        phase(format!("round {round}: PostgreSQL stopped"));
        pg.stop();
        tokio::time::sleep(Duration::from_secs(3)).await;
        pg.start_again();
        phase(format!("round {round}: PostgreSQL started again"));
        serving().await;
        phase(format!("round {round}: after the faults"));
        eprintln!("chaos round {round}: {} creates acknowledged", acked());
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    leaser.await.unwrap();

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    if let Some((_, replica)) = seen.unanswered.first() {
        eprintln!("replica {replica}'s log:\n{}", slots.lock().unwrap()[*replica].log.lock().unwrap());
    }
    assert!(
        seen.unanswered.is_empty(),
        "{} of {} calls to healthy replicas unanswered (the first one's replica's log is above): {:#?}",
        seen.unanswered.len(),
        seen.calls,
        seen.unanswered.iter().map(|(said, _)| said).collect::<Vec<_>>()
    );
    assert!(seen.leaked.is_empty(), "a leased account showed another holder's data: {:?}", seen.leaked);
    let urls: Vec<String> = slots.lock().unwrap().iter().map(|s| s.url.clone()).collect();
    for (account, (user, _)) in tokens.iter().enumerate() {
        for url in &urls {
            let listed: std::collections::HashMap<String, fakecloud_api::InstanceState> = client(url, user)
                .list_all_instances(&ListInstancesQuery::default())
                .await
                .unwrap()
                .into_iter()
                .map(|i| (i.id, i.state))
                .collect();
            for (of, id) in &seen.created {
                if *of != account {
                    assert!(!listed.contains_key(id), "account {account} through {url} lists account {of}'s {id}");
                    continue;
                }
                let state = listed.get(id);
                let terminated = seen.terminated.contains(id) || seen.maybe_terminated.contains(id);
                assert!(state.is_some() || terminated, "{id} acknowledged, then lost ({url})");
                if !terminated {
                    assert_ne!(state, Some(&fakecloud_api::InstanceState::Terminated), "{id} terminated by no one");
                }
            }
        }
    }
    eprintln!("chaos: {} calls, {} creates acknowledged", seen.calls, seen.created.len());
}

//! Several emulators on one PostgreSQL database serve one cloud (issue #28): three `fakecloud serve` processes,
//! called in turn (round-robin, as a Service's load balancing would), hold a quota exactly between them — every
//! write takes the cloud's advisory lock, so three writers are one — and one of them killed with `kill -9`
//! mid-burst loses nothing it acknowledged: the others, and a replica started after, see every write and its
//! audit entry. A fault set through one replica holds on every other — with one count for a rule's `skip` and
//! `times` and a limit's refusals, one eventual-consistency lag and one random spot reclamation — and so does
//! an account: created, leased, wiped or deleted through one, at once the same through the others. The load
//! balancers' data plane, served by one replica, shows the same through every other.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fakecloud_api::{
    AuditQuery, Client, CreateFaultRuleRequest, CreateInstanceRequest, CreateLoadBalancerRequest, FaultAction,
    FaultMatch, FaultTrigger, LeaseRequest, ListInstancesQuery, Listener, ListenerState, Market, OutageScope, Protocol,
    QuotaName, RateLimitKind, SetRateLimitRequest, SpotRandomRequest, StartOutageRequest, codes,
};
use futures::future::join_all;
use tokio::process::Child;

use crate::common::postgres::Postgres;
use crate::common::{ADMIN, HANG, USER, eventually, spawn_emulator_with};

/// One `fakecloud serve` on the test's database, with a client for each of its tokens.
struct Replica {
    process: Child,
    url: String,
    log: Arc<Mutex<String>>,
    user: Client,
    admin: Client,
}

impl Replica {
    async fn start(db: &str, flags: &[&str]) -> Self {
        let (process, url, log) = spawn_emulator_with(db, flags, None).await;
        let (user, admin) = (Client::new(&url, USER).unwrap(), Client::new(&url, ADMIN).unwrap());
        Self { process, url, log, user, admin }
    }

    /// `kill -9`, and wait for it to be gone.
    async fn kill(&mut self) {
        self.process.start_kill().unwrap();
        self.process.wait().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_hold_a_quota_exactly_and_a_killed_one_loses_nothing() {
    let pg = Postgres::start();
    let url = pg.database("cloud").await;
    // Started at once: the first migrates the database, the others wait on the migrator's lock and find it done.
    let mut replicas = join_all((0..3).map(|_| Replica::start(&url, &[]))).await;
    let users: Vec<Client> = replicas.iter().map(|r| r.user.clone()).collect();
    let admins: Vec<Client> = replicas.iter().map(|r| r.admin.clone()).collect();

    // A quota set on one replica holds on all: 200 creates at once, in turn, against 50.
    admins[0].set_quota(QuotaName::Instances, 50).await.unwrap();
    let creates = (0..200).map(|n| {
        let (c, req) =
            (users[n % 3].clone(), CreateInstanceRequest { name: format!("node-{n}"), ..Default::default() });
        tokio::spawn(async move { c.create_instance(&req, None).await })
    });
    let (mut created, mut refused) = (HashSet::new(), 0);
    for outcome in join_all(creates).await {
        match outcome.unwrap() {
            Ok(i) => _ = created.insert(i.id),
            Err(e) => {
                assert_eq!((e.status(), e.code()), (Some(422), Some(codes::INSTANCE_LIMIT_EXCEEDED)), "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!((created.len(), refused), (50, 150), "three replicas, one quota of 50");
    for (n, user) in users.iter().enumerate() {
        let listed: HashSet<String> =
            user.list_all_instances(&ListInstancesQuery::default()).await.unwrap().into_iter().map(|i| i.id).collect();
        assert_eq!(listed, created, "replica {n} lists what the three created");
        assert_eq!(user.get_quota(QuotaName::Instances).await.unwrap().usage, Some(50), "replica {n}'s usage");
    }

    // Writers on every replica, each through its own; one replica killed mid-burst.
    admins[0].set_quota(QuotaName::Instances, 100_000).await.unwrap();
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..6)
        .map(|w| {
            // A timeout must mean a hang, not a write queued behind the database's.
            let (c, acked, stop) = (users[w % 3].clone().with_timeout(HANG).unwrap(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                for n in 0..2_000 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let req = CreateInstanceRequest { name: format!("w{w}-{n}"), ..Default::default() };
                    match c.create_instance(&req, None).await {
                        Ok(i) => acked.lock().unwrap().push(i.id),
                        // The killed replica's writers stop at their first failed call.
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    eventually(HANG, "300 acknowledged writes", || async { (acked.lock().unwrap().len() >= 300).then_some(()) }).await;
    replicas[1].kill().await;
    let at_kill = acked.lock().unwrap().len();
    eventually(HANG, "more writes through the two left", || async {
        (acked.lock().unwrap().len() >= at_kill + 100).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acked: HashSet<String> = acked.lock().unwrap().iter().cloned().collect();

    // A replica started now sees every acknowledged write, and each has its audit entry (written in the
    // create's own transaction).
    let late = Replica::start(&url, &[]).await;
    let present: HashSet<String> = late
        .user
        .list_all_instances(&ListInstancesQuery { page_size: Some(1000), ..Default::default() })
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    let lost: Vec<&String> = acked.difference(&present).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged creates lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    let admin = late.admin;
    let mut audited = HashSet::new();
    let mut query = AuditQuery { operation: Some("CreateInstance".into()), limit: Some(10_000), ..Default::default() };
    loop {
        let page = admin.audit(&query).await.unwrap().items;
        let Some(last) = page.last() else { break };
        query.after = Some(last.seq);
        audited.extend(page.into_iter().filter(|e| e.status == 201).filter_map(|e| e.resource_id));
    }
    let unaudited: Vec<&String> = acked.difference(&audited).collect();
    assert!(unaudited.is_empty(), "{} acknowledged creates without their audit entry", unaudited.len());
}

#[tokio::test]
async fn a_fault_set_through_one_replica_holds_on_the_others() {
    let pg = Postgres::start();
    let url = pg.database("cloud").await;
    let (a, b) = (Replica::start(&url, &[]).await, Replica::start(&url, &[]).await);
    let (a_user, a_admin, b_user, b_admin) = (&a.user, &a.admin, &b.user, &b.admin);
    let create = |name: &str| CreateInstanceRequest { name: name.into(), ..Default::default() };

    let rule_on = |operation: &str, action: FaultAction, trigger: FaultTrigger| CreateFaultRuleRequest {
        id: None,
        matcher: FaultMatch { operations: vec![operation.into()], ..Default::default() },
        action,
        trigger,
        position: None,
    };
    let unavailable = FaultAction::Error {
        status: 503,
        code: "ServiceUnavailable".into(),
        message: None,
        headers: Default::default(),
    };
    let per_call = |user: &Client| {
        let user = user.clone();
        async move { user.region().await.map_err(|e| (e.status(), e.code().map(str::to_string))) }
    };

    // A rule added through A fails the very next create through B; deleted through B, A's creates pass again.
    let rule =
        a_admin.add_fault(&rule_on("CreateInstance", unavailable.clone(), FaultTrigger::default())).await.unwrap();
    let refused = b_user.create_instance(&create("through-b"), None).await.unwrap_err();
    assert_eq!((refused.status(), refused.code()), (Some(503), Some("ServiceUnavailable")), "{refused}");
    let listed: Vec<String> = b_admin.list_faults().await.unwrap().items.into_iter().map(|r| r.id).collect();
    assert_eq!(listed, std::slice::from_ref(&rule.id));
    b_admin.delete_fault(&rule.id).await.unwrap();
    a_user.create_instance(&create("through-a"), None).await.unwrap();

    // An outage started through B takes A's API down; stopped through A, B answers.
    let down = StartOutageRequest { scope: OutageScope::Api, service: None, zone: None, duration_seconds: Some(600.0) };
    let outage = b_admin.start_outage(&down).await.unwrap();
    let refused = a_user.region().await.unwrap_err();
    assert_eq!((refused.status(), refused.code()), (Some(503), Some(codes::SERVICE_UNAVAILABLE)), "{refused}");
    a_admin.stop_outage(&outage.id).await.unwrap();
    b_user.region().await.unwrap();

    // A rule's skip and times count every replica's calls: of ten calls in turn, the 2nd and 3rd fail (counted
    // per replica, four would), and either replica shows the one count.
    let twice = FaultTrigger { skip: 1, times: Some(2), ..Default::default() };
    let twice = a_admin.add_fault(&rule_on("GetRegion", unavailable, twice)).await.unwrap();
    let mut failed = Vec::new();
    for n in 0..10 {
        if per_call(if n % 2 == 0 { a_user } else { b_user }).await.is_err() {
            failed.push(n);
        }
    }
    assert_eq!(failed, [1, 2], "the calls that failed");
    for admin in [a_admin, b_admin] {
        let listed = admin.list_faults().await.unwrap().items;
        assert_eq!((listed[0].matched, listed[0].injected), (10, 2), "{listed:?}");
    }
    let deleted = b_admin.delete_fault(&twice.id).await.unwrap();
    assert_eq!((deleted.matched, deleted.injected), (10, 2), "{deleted:?}");

    // A rate limit set through A is B's too, and both draw from one bucket: of ten calls in turn, five pass
    // (a bucket each would pass all ten), and the five refusals are counted once. The same for a fixed window.
    for (id, limit) in [
        ("bucket", SetRateLimitRequest { capacity: 5, refill_per_second: Some(0.001), ..Default::default() }),
        (
            "window",
            SetRateLimitRequest {
                kind: RateLimitKind::FixedWindow,
                capacity: 5,
                window_seconds: Some(86_400),
                refill_per_second: None,
                ..Default::default()
            },
        ),
    ] {
        a_admin.set_rate_limit(id, &limit).await.unwrap();
        let mut passed = 0;
        for n in 0..10 {
            match per_call(if n % 2 == 0 { a_user } else { b_user }).await {
                Ok(_) => passed += 1,
                Err(refused) => assert_eq!(refused, (Some(429), Some(codes::REQUEST_LIMIT_EXCEEDED.into()))),
            }
        }
        assert_eq!(passed, 5, "{id}: one bucket of 5 for both replicas");
        let limits = b_admin.list_rate_limits().await.unwrap().items;
        assert_eq!(limits.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(), [id]);
        let tokens = limits[0].buckets.iter().map(|b| (b.key.as_str(), b.tokens.floor())).collect::<Vec<_>>();
        assert_eq!(tokens, [("all", 0.0)], "{id}: B shows the bucket both drew from");
        assert_eq!(limits[0].refused, 5, "{id}: B counts A's refusals too");
        a_admin.delete_rate_limit(id).await.unwrap();
        b_user.region().await.unwrap();
    }

    // Eventual consistency lags on every replica: an instance created through A is not there yet through
    // either (as a real cloud's other front ends would not have it), though the cloud's own view has it.
    let lagging = FaultAction::EventualConsistency { seconds: 600.0 };
    a_admin.add_fault(&rule_on("CreateInstance", lagging, FaultTrigger::default())).await.unwrap();
    let made = a_user.create_instance(&create("lagging"), None).await.unwrap();
    for user in [a_user, b_user] {
        let unseen = user.get_instance(&made.id).await.unwrap_err();
        assert_eq!((unseen.status(), unseen.code()), (Some(404), Some("InstanceNotFound")), "{unseen}");
        let listed = user.list_all_instances(&ListInstancesQuery::default()).await.unwrap();
        assert!(listed.iter().all(|i| i.id != made.id), "listed while it lags");
    }
    b_admin.get_instance(&made.id).await.unwrap();
}

#[tokio::test]
async fn an_account_changed_through_one_replica_is_the_same_through_the_others() {
    let pg = Postgres::start();
    let url = pg.database("cloud").await;
    let (a, b) = (Replica::start(&url, &[]).await, Replica::start(&url, &[]).await);
    let (a_url, a_admin, b_url, b_admin) = (&a.url, &a.admin, &b.url, &b.admin);
    let create = |name: &str| CreateInstanceRequest { name: name.into(), ..Default::default() };
    let names = |c: Client| async move {
        let all = c.list_all_instances(&ListInstancesQuery::default()).await.unwrap();
        all.into_iter().map(|i| i.name).collect::<Vec<_>>()
    };

    // Created through A: its tokens work through B at once, in its cloud.
    let team = a_admin.create_account("team-a").await.unwrap();
    let through_b = Client::new(b_url, &team.user_token).unwrap();
    through_b.create_instance(&create("made-through-b"), None).await.unwrap();
    assert_eq!(names(Client::new(a_url, &team.user_token).unwrap()).await, ["made-through-b"]);
    assert!(names(Client::new(a_url, USER).unwrap()).await.is_empty(), "not in the emulator's own cloud");

    // Leased through B for a second: it lapses, is wiped once, and its old tokens stop on both.
    let lease = LeaseRequest { holder: "job-1".into(), ttl_seconds: 1.0, account: Some("team-a".into()) };
    let leased = b_admin.take_lease(&lease).await.unwrap();
    for url in [a_url, b_url] {
        let old = Client::new(url, &leased.user_token).unwrap();
        eventually(HANG, "the lapsed lease's tokens refused", || async {
            (old.region().await.err()?.status() == Some(401)).then_some(())
        })
        .await;
    }
    let again = LeaseRequest { holder: "job-2".into(), ttl_seconds: 600.0, account: Some("team-a".into()) };
    let fresh = a_admin.take_lease(&again).await.unwrap();
    assert!(names(Client::new(b_url, &fresh.user_token).unwrap()).await.is_empty(), "wiped: an empty cloud");
    // Both janitors saw the lease lapse; one wiped it.
    let wipes = [&a.log, &b.log].map(|log| log.lock().unwrap().matches("account wiped").count());
    assert_eq!(wipes.iter().sum::<usize>(), 1, "wipes by A and B: {wipes:?}");

    // Deleted through B: gone through A.
    b_admin.delete_account("team-a").await.unwrap();
    let refused = Client::new(a_url, &fresh.user_token).unwrap().region().await.unwrap_err();
    assert_eq!(refused.status(), Some(401), "{refused}");
    assert!(a_admin.list_accounts().await.unwrap().items.is_empty());
}

#[tokio::test]
async fn random_spot_reclamation_draws_once_a_second_between_replicas_and_outlives_its_starter() {
    let pg = Postgres::start();
    let url = pg.database("cloud").await;
    let (mut a, b) = (Replica::start(&url, &[]).await, Replica::start(&url, &[]).await);
    for n in 0..40 {
        let spot = CreateInstanceRequest { name: format!("spot-{n}"), market: Market::Spot, ..Default::default() };
        b.user.create_instance(&spot, None).await.unwrap();
    }
    // Counted in the database itself: a call to B would bring B up to date, and B must follow on its own.
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    let reclaimed = || async {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE interruption_at IS NOT NULL")
            .fetch_one(&db)
            .await
            .unwrap();
        n as u64
    };

    // 60 a minute: every second's draw reclaims one. Each second is drawn by one replica, so in the seconds it
    // ran there are at most as many reclamations as seconds it spanned (each replica drawing would make two).
    let started = std::time::Instant::now();
    let every_second =
        SpotRandomRequest { rate_per_minute: 60.0, notice_seconds: Some(3_600.0), duration_seconds: None };
    a.admin.start_spot_random(&every_second).await.unwrap();
    eventually(HANG, "eight reclaimed", || async { (reclaimed().await >= 8).then_some(()) }).await;
    let (n, spanned) = (reclaimed().await, started.elapsed().as_secs() + 2);
    assert!(n <= spanned, "{n} reclaimed in at most {spanned} whole seconds: more than one draw a second");

    // The replica that started it killed: the other, called by no one, goes on drawing.
    a.kill().await;
    let at_kill = reclaimed().await;
    eventually(HANG, "reclaimed after the starter died", || async { (reclaimed().await >= at_kill + 3).then_some(()) })
        .await;
    b.admin.stop_spot_random().await.unwrap();
}

#[tokio::test]
async fn the_data_plane_one_replica_serves_shows_the_same_through_the_others() {
    let pg = Postgres::start();
    let url = pg.database("cloud").await;
    let cloud = ["--loopback-instances", "--public-pool", "127.77.40.0/24", "--lb-provision-delay", "0s"];
    let serving = [&["--serve-load-balancers"][..], &cloud].concat();
    let (mut a, b) = (Replica::start(&url, &serving).await, Replica::start(&url, &cloud).await);
    let (a_user, b_user) = (a.user.clone(), b.user.clone());
    let backend = CreateInstanceRequest {
        name: "web-1".into(),
        private_ip: Some("127.78.40.1".parse().unwrap()),
        ..Default::default()
    };
    let backend = b_user.create_instance(&backend, None).await.unwrap();
    let lb = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 18040, backend_port: 8080 }],
        backends: vec![backend.id],
        ..Default::default()
    };
    let lb = b_user.create_load_balancer(&lb, None).await.unwrap();

    // Served by A, created through B: B shows what A shows, its listener listening.
    let through_b = eventually(HANG, "B to show A's data plane", || async {
        let through_a = a_user.get_load_balancer(&lb.id).await.unwrap();
        let through_b = b_user.get_load_balancer(&lb.id).await.unwrap();
        let same = (&through_a.listener_status, &through_a.backend_health, &through_a.data_plane)
            == (&through_b.listener_status, &through_b.backend_health, &through_b.data_plane);
        (same && through_b.data_plane.is_some()).then_some(through_b)
    })
    .await;
    assert_eq!(through_b.listener_status.len(), 1);
    assert_eq!(through_b.listener_status[0].state, ListenerState::Listening, "{through_b:?}");
    let listed = b_user.list_load_balancers(&Default::default()).await.unwrap().items;
    assert_eq!(listed[0].listener_status, through_b.listener_status, "listed as got");

    // The serving replica gone: B soon shows no data plane rather than what it last said.
    a.kill().await;
    eventually(HANG, "B to stop showing a dead data plane", || async {
        let through_b = b_user.get_load_balancer(&lb.id).await.unwrap();
        (through_b.data_plane.is_none() && through_b.listener_status.is_empty()).then_some(())
    })
    .await;
}

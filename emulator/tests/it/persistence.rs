//! State survives restarts and `kill -9`; snapshots and reset.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use crate::common::{ADMIN, Emu, USER};
use fakecloud_api::{
    AuditQuery, Client, CreateInstanceRequest, CreateLoadBalancerRequest, CreateRouteRequest, ListInstancesQuery,
    Listener, Protocol, QuotaName,
};

#[tokio::test]
async fn a_restart_on_the_same_file_keeps_everything() {
    let mut emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    let route =
        CreateRouteRequest { name: "r".into(), destination: "10.244.0.0/24".into(), target_instance: node.id.clone() };
    emu.user.create_route("main", &route, None).await.unwrap();
    let lb = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 1 }],
        ..Default::default()
    };
    let lb = emu.user.create_load_balancer(&lb, Some("key-1")).await.unwrap();
    emu.admin.set_quota(QuotaName::RoutesPerRouteTable, 7).await.unwrap();

    emu.restart().await;
    assert_eq!(emu.user.get_instance(&node.id).await.unwrap(), node);
    assert_eq!(emu.user.list_routes("main").await.unwrap().items.len(), 1);
    assert_eq!(emu.user.get_load_balancer(&lb.id).await.unwrap().address, lb.address);
    assert_eq!(emu.user.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit, 7);
    // Idempotency keys survive too: a retry after the restart still finds the original.
    let again = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 1 }],
        ..Default::default()
    };
    assert_eq!(emu.user.create_load_balancer(&again, Some("key-1")).await.unwrap().id, lb.id);
    // And the audit log: the calls before the restart are still there.
    let audit = emu.admin.audit(&Default::default()).await.unwrap().items;
    assert!(audit.iter().any(|e| e.operation == "CreateRoute" && e.status == 201));
}

#[tokio::test]
async fn kill_9_during_a_burst_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("burst.db");
    let (mut child, url, log) = crate::common::spawn_emulator(&db).await;
    // A writer stops at its first error: a timeout must mean a hang, not a write behind disk I/O.
    let client = Client::new(&url, USER).unwrap().with_timeout(crate::common::HANG).unwrap();
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    // Refused creates (a name in use) are answered changes too; their audit entry is written before the answer.
    let refused = Arc::new(Mutex::new(Vec::<String>::new()));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (c, acked, refused) = (client.clone(), acked.clone(), refused.clone());
            tokio::spawn(async move {
                for n in 0.. {
                    let name = if n % 10 == 9 { format!("w{w}-n{}", n - 1) } else { format!("w{w}-n{n}") };
                    let req = CreateInstanceRequest { name, ..Default::default() };
                    match c.create_instance(&req, None).await {
                        Ok(i) => acked.lock().unwrap().push(i.id),
                        Err(fakecloud_api::ClientError::Api(e)) if e.status == 409 => {
                            refused.lock().unwrap().push(e.request_id)
                        }
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    // Let a few hundred writes through, then pull the plug.
    crate::common::eventually(crate::common::HANG, "200 acknowledged writes", || async {
        (acked.lock().unwrap().len() >= 200).then_some(())
    })
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let first_log = log.lock().unwrap().clone();
    assert!(!first_log.contains(USER) && !first_log.contains(ADMIN), "tokens must never be logged");

    let (_child, url, _) = crate::common::spawn_emulator(&db).await;
    let client = Client::new(&url, USER).unwrap();
    let all =
        client.list_all_instances(&ListInstancesQuery { page_size: Some(1000), ..Default::default() }).await.unwrap();
    let present: std::collections::HashSet<String> = all.into_iter().map(|i| i.id).collect();
    let lost: Vec<&String> = acked.iter().filter(|id| !present.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged instances lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    // Every answered create has its audit entry too: a create's is written in its own transaction, a refused
    // one's before it is answered.
    let admin = Client::new(&url, ADMIN).unwrap();
    let (mut created, mut refusals) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    let mut query = AuditQuery { operation: Some("CreateInstance".into()), limit: Some(10_000), ..Default::default() };
    loop {
        let page = admin.audit(&query).await.unwrap().items;
        let Some(last) = page.last() else { break };
        query.after = Some(last.seq);
        for e in page {
            match e.status {
                201 => created.extend(e.resource_id),
                409 => _ = refusals.insert(e.request_id),
                _ => {}
            }
        }
    }
    let refused = refused.lock().unwrap().clone();
    let unaudited: Vec<&String> = acked.iter().filter(|id| !created.contains(*id)).collect();
    let unaudited_refusals: Vec<&String> = refused.iter().filter(|id| !refusals.contains(*id)).collect();
    assert!(
        unaudited.is_empty() && unaudited_refusals.is_empty() && !refused.is_empty(),
        "{} of {} acknowledged creates and {} of {} refused ones have no audit entry: {:?} {:?}",
        unaudited.len(),
        acked.len(),
        unaudited_refusals.len(),
        refused.len(),
        &unaudited[..unaudited.len().min(5)],
        &unaudited_refusals[..unaudited_refusals.len().min(5)]
    );
}

#[tokio::test]
async fn snapshots_are_consistent_copies_an_emulator_can_start_from() {
    let mut emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    let snap = emu.dir.path().join("snap.db");
    let resp = emu.admin.snapshot(snap.to_str().unwrap()).await.unwrap();
    assert!(resp.bytes > 0);
    let err = emu.admin.snapshot(snap.to_str().unwrap()).await.unwrap_err();
    assert_eq!(err.code(), Some(fakecloud_api::codes::SNAPSHOT_EXISTS));
    let err = emu.admin.snapshot("/no/such/dir/x.db").await.unwrap_err();
    assert_eq!(err.status(), Some(400));

    emu.instance("node-2").await;
    // Start from the snapshot: it has node-1 only.
    if let Some(s) = emu.server.take() {
        s.shutdown().await;
    }
    std::fs::copy(&snap, emu.db_path()).unwrap();
    emu.restart().await;
    let names: Vec<String> =
        emu.user.list_all_instances(&Default::default()).await.unwrap().into_iter().map(|i| i.name).collect();
    assert_eq!(names, vec![node.name]);
}

#[tokio::test]
async fn reset_empties_everything_and_restores_defaults() {
    let emu = Emu::start().await;
    emu.instance("node-1").await;
    emu.admin.set_quota(QuotaName::Instances, 3).await.unwrap();
    emu.admin.reset().await.unwrap();
    assert!(emu.user.list_all_instances(&Default::default()).await.unwrap().is_empty());
    assert_eq!(emu.user.get_quota(QuotaName::Instances).await.unwrap().limit, 1000);
    assert_eq!(emu.user.list_route_tables().await.unwrap().items.len(), 1, "the main table is back");
    // Usage counts start from zero again: a quota of 1 admits exactly one instance.
    emu.admin.set_quota(QuotaName::Instances, 1).await.unwrap();
    emu.instance("node-1").await;
    let err = emu
        .user
        .create_instance(&CreateInstanceRequest { name: "node-2".into(), ..Default::default() }, None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(fakecloud_api::codes::INSTANCE_LIMIT_EXCEEDED));
}

/// A snapshot is a file name in the snapshot directory (beside the database by default): nothing else, never
/// through a symlink, never over an existing file, and nothing left behind when it is refused.
#[tokio::test]
async fn snapshots_are_confined_to_the_snapshot_directory() {
    use std::os::unix::fs::PermissionsExt;

    let emu = Emu::start().await;
    let dir = emu.dir.path();
    let outside = tempfile::tempdir().unwrap();
    let escape = outside.path().join("escape.db");
    for (name, rule) in [
        (escape.to_str().unwrap(), "not a path"),
        ("../escape.db", "not a path"),
        ("sub/x.db", "not a path"),
        ("..", "must not start with '.'"),
        (".hidden.db", "must not start with '.'"),
        ("a b.db", "letters, digits"),
        ("nul\0.db", "a NUL character"),
        ("", "must not be empty"),
        (&"x".repeat(129), "at most 128"),
    ] {
        let err = emu.admin.snapshot(name).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(fakecloud_api::codes::INVALID_PARAMETER)), "{name:?}");
        assert!(err.to_string().contains(rule), "{name:?}: {rule:?} not in {err}");
    }
    // A symlink in the directory is an existing name, even when it dangles: it is not followed.
    std::os::unix::fs::symlink(&escape, dir.join("link.db")).unwrap();
    std::fs::write(dir.join("taken.db"), b"keep me").unwrap();
    for name in ["link.db", "taken.db"] {
        let err = emu.admin.snapshot(name).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(409), Some(fakecloud_api::codes::SNAPSHOT_EXISTS)), "{name}");
    }
    assert!(!escape.exists(), "nothing was written outside the snapshot directory");
    assert_eq!(std::fs::read(dir.join("taken.db")).unwrap(), b"keep me");

    let done = emu.admin.snapshot("snap-1.db").await.unwrap();
    assert_eq!(done.path, dir.join("snap-1.db").to_str().unwrap());
    let meta = std::fs::metadata(dir.join("snap-1.db")).unwrap();
    assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (done.bytes, 0o600));
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.retain(|n| !n.starts_with("fc.db"));
    names.sort();
    assert_eq!(names, ["link.db", "snap-1.db", "taken.db"], "no temporary or empty files are left");
}

/// The database (and its WAL and shared-memory files) is created readable by its owner only: it holds the
/// audit log and everything a test did.
#[tokio::test]
async fn the_database_is_created_private() {
    use std::os::unix::fs::PermissionsExt;

    let emu = Emu::start().await;
    emu.instance("node-1").await;
    for file in ["fc.db", "fc.db-wal", "fc.db-shm"] {
        let mode = std::fs::metadata(emu.dir.path().join(file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
}

/// A file that is not a fakecloud database, a directory, or a database a newer fakecloud wrote: each refused at
/// start with what to do, and the file left as it was.
#[tokio::test]
async fn a_database_it_cannot_use_is_refused_at_start_and_left_alone() {
    use fakecloud_emulator::config::{Config, DbLocation};
    use fakecloud_emulator::server::Server;

    let start = async |path: &std::path::Path| {
        let db = DbLocation::File(path.to_path_buf());
        match Server::start("127.0.0.1:0", &db, Config::default(), crate::common::tokens()).await {
            Ok(_) => panic!("{} was taken", path.display()),
            Err(e) => e.to_string(),
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&junk, &bytes).unwrap();
    let said = start(&junk).await;
    assert!(said.contains("junk.db") && said.contains("not a SQLite database"), "{said}");
    assert_eq!(std::fs::read(&junk).unwrap(), bytes, "left as it was");

    let said = start(dir.path()).await;
    assert!(said.contains("cannot be opened as a file"), "{said}");

    // A schema from the future: refused before any migration runs.
    let mut emu = Emu::start().await;
    emu.instance("node-1").await;
    emu.server.take().unwrap().shutdown().await;
    let path = emu.db_path();
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(&path);
    let conn = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, installed_on, success, checksum, execution_time) \
         VALUES (9999, 'from a newer fakecloud', CURRENT_TIMESTAMP, 1, x'00', 0)",
    )
    .execute(&conn)
    .await
    .unwrap();
    let applied = async || -> Vec<i64> {
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version").fetch_all(&conn).await.unwrap()
    };
    let before = applied().await;
    let said = start(&path).await;
    assert!(said.contains("newer fakecloud") && said.contains("9999") && said.contains("new file"), "{said}");
    assert_eq!(applied().await, before, "nothing migrated");
}

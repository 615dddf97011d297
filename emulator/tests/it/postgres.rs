//! The store's schema on a real PostgreSQL server (issue #28): the same tables, columns, keys, indexes and
//! triggers as SQLite's (issue #48), the same usage counters kept by its triggers, and a database that cannot be
//! used refused in plain words.

use fakecloud_emulator::config::DbLocation;
use fakecloud_emulator::db;
use sqlx::{Connection, Row};

use crate::common::postgres::Postgres;

/// What a schema is made of, one line per part, as each dialect can tell it (issue #48: a migration written for
/// one backend only, or the two translated apart, fails here): each column with its type as the other dialect
/// maps it, whether it may be NULL and its default; each primary key, index (its columns, unique, its condition)
/// and foreign key; and which changes of which table fire a trigger (the counters the triggers keep are compared
/// by what they count, in `usage_counters_follow_the_rows_on_both_backends`: SQLite's have no functions).
/// A column the database numbers itself (PostgreSQL's identity, SQLite's `INTEGER PRIMARY KEY`) says so.
const PG_SHAPE: &str = "\
     SELECT 'column ' || c.table_name || '.' || c.column_name || ' ' || c.data_type \
       || CASE WHEN c.is_nullable = 'NO' THEN ' NOT NULL' ELSE '' END \
       || CASE WHEN c.is_identity = 'YES' THEN ' DEFAULT numbered' \
               WHEN c.column_default IS NOT NULL THEN ' DEFAULT ' || c.column_default ELSE '' END \
       FROM information_schema.columns c WHERE c.table_schema = 'public' AND c.table_name <> '_sqlx_migrations' \
     UNION ALL \
     SELECT CASE WHEN i.indisprimary THEN 'primary key ' || t.relname \
                 ELSE 'index ' || CASE WHEN EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid) \
                                       THEN '(of a constraint)' ELSE ic.relname END \
                      || ' on ' || t.relname || CASE WHEN i.indisunique THEN ' UNIQUE' ELSE '' END END \
       || ' (' || (SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) \
                   JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum) || ')' \
       || COALESCE(' WHERE ' || pg_get_expr(i.indpred, i.indrelid), '') \
       FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid \
       JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'public' AND t.relname <> '_sqlx_migrations' \
     UNION ALL \
     SELECT 'foreign key ' || t.relname || ' (' \
       || (SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) \
           JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum) || ') -> ' || r.relname || ' (' \
       || (SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, n) \
           JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum = k.attnum) || ') ON DELETE ' \
       || CASE c.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT' \
                             WHEN 'r' THEN 'RESTRICT' ELSE 'NO ACTION' END \
       FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_class r ON r.oid = c.confrelid \
       JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'public' AND c.contype = 'f' \
     UNION ALL \
     SELECT DISTINCT 'trigger ' || action_timing || ' ' || event_manipulation || ' on ' || event_object_table \
       FROM information_schema.triggers WHERE trigger_schema = 'public'";
const SQLITE_SHAPE: &str = "\
     SELECT 'column ' || m.name || '.' || p.name || ' ' \
       || CASE upper(p.type) WHEN 'INTEGER' THEN 'bigint' WHEN 'TEXT' THEN 'text' ELSE p.type END \
       || CASE WHEN p.\"notnull\" OR p.pk > 0 THEN ' NOT NULL' ELSE '' END \
       || CASE WHEN p.pk = 1 AND upper(p.type) = 'INTEGER' AND (SELECT COUNT(*) FROM pragma_table_info(m.name) WHERE pk > 0) = 1 \
               THEN ' DEFAULT numbered' WHEN p.dflt_value IS NOT NULL THEN ' DEFAULT ' || p.dflt_value ELSE '' END \
       FROM sqlite_master m, pragma_table_info(m.name) p \
       WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations' \
     UNION ALL \
     SELECT 'primary key ' || m.name || ' (' \
       || (SELECT group_concat(name, ', ') FROM (SELECT name FROM pragma_table_info(m.name) WHERE pk > 0 ORDER BY pk)) || ')' \
       FROM sqlite_master m WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations' \
       AND EXISTS (SELECT 1 FROM pragma_table_info(m.name) WHERE pk > 0) \
     UNION ALL \
     SELECT 'index ' || CASE l.origin WHEN 'c' THEN l.name ELSE '(of a constraint)' END || ' on ' || m.name \
       || CASE WHEN l.\"unique\" THEN ' UNIQUE' ELSE '' END || ' (' \
       || (SELECT group_concat(name, ', ') FROM (SELECT name FROM pragma_index_info(l.name) ORDER BY seqno)) || ')' \
       || CASE WHEN l.partial THEN ' WHERE ' || substr(x.sql, instr(upper(x.sql), ' WHERE ') + 7) ELSE '' END \
       FROM sqlite_master m, pragma_index_list(m.name) l LEFT JOIN sqlite_master x ON x.name = l.name \
       WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations' AND l.origin <> 'pk' \
     UNION ALL \
     SELECT 'foreign key ' || m.name || ' (' || f.\"from\" || ') -> ' || f.\"table\" || ' (' || f.\"to\" || ') ON DELETE ' || f.on_delete \
       FROM sqlite_master m, pragma_foreign_key_list(m.name) f WHERE m.type = 'table' \
     UNION ALL \
     SELECT DISTINCT 'trigger ' || substr(head, 1, instr(head, ' ') + 6) || ' on ' || tbl_name FROM ( \
       SELECT tbl_name, ltrim(substr(upper(sql), instr(upper(sql), upper(name)) + length(name))) AS head \
       FROM sqlite_master WHERE type = 'trigger')";

/// A line of either shape, with what only the dialect's spelling tells apart taken out: PostgreSQL's casts of
/// literals (`'none'::text`) and the parentheses it puts around a condition.
fn plain(line: String) -> String {
    let line = line.replace("::text", "").replace("::bigint", "");
    match line.split_once(" WHERE ") {
        Some((head, condition)) => format!("{head} WHERE {}", condition.replace(['(', ')'], "").trim()),
        None => line,
    }
}

/// Both backends' schemas, one sorted line per part (see [`PG_SHAPE`]).
async fn shapes(pg_url: &str, sqlite_file: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let mut pg = sqlx::PgConnection::connect(pg_url).await.expect("connect to PostgreSQL");
    let sqlite_url = format!("sqlite://{}", sqlite_file.display());
    let mut lite = sqlx::SqliteConnection::connect(&sqlite_url).await.expect("open the SQLite file");
    let on_pg: Vec<String> = sqlx::query_scalar(PG_SHAPE).fetch_all(&mut pg).await.expect("PostgreSQL's shape");
    let on_lite: Vec<String> = sqlx::query_scalar(SQLITE_SHAPE).fetch_all(&mut lite).await.expect("SQLite's shape");
    let (mut on_pg, mut on_lite): (Vec<_>, Vec<_>) =
        (on_pg.into_iter().map(plain).collect(), on_lite.into_iter().map(plain).collect());
    on_pg.sort();
    on_lite.sort();
    (on_pg, on_lite)
}

#[tokio::test]
async fn the_schema_on_postgres_is_sqlites() {
    let names = |dir: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names("migrations"), names("migrations-postgres"), "one PostgreSQL migration per SQLite one");

    let pg = Postgres::start();
    let url = pg.database("fc").await;
    let on_pg = DbLocation::parse(&url).unwrap();
    let version = db::migrate(&on_pg).await.unwrap();
    assert_eq!(db::migrate(&on_pg).await.unwrap(), version, "applying it again changes nothing");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fc.db");
    assert_eq!(db::migrate(&DbLocation::File(file.clone())).await.unwrap(), version);

    let (pg_shape, lite_shape) = shapes(&url, &file).await;
    // Every kind of part is there to compare, each as both dialects spell it.
    for part in [
        "column accounts.lease_expires_at bigint",
        "column instances.seq bigint NOT NULL DEFAULT numbered",
        "column load_balancers.session_affinity text NOT NULL DEFAULT 'none'",
        "primary key ip_leases (pool, ip, addr)",
        "index instances_live_name on instances UNIQUE (name) WHERE state <> 'terminated'",
        "index (of a constraint) on instances UNIQUE (id)",
        "foreign key routes (route_table_id) -> route_tables (id) ON DELETE CASCADE",
        "trigger AFTER UPDATE on instances",
    ] {
        assert!(pg_shape.iter().any(|l| l == part), "{part:?} is not in PostgreSQL's {pg_shape:#?}");
    }
    let only = |a: &[String], b: &[String]| a.iter().filter(|l| !b.contains(l)).cloned().collect::<Vec<_>>();
    assert!(
        pg_shape == lite_shape,
        "only on PostgreSQL: {:#?}\nonly on SQLite: {:#?}",
        only(&pg_shape, &lite_shape),
        only(&lite_shape, &pg_shape)
    );
}

/// The same changes on both backends leave the same quota usage: the triggers were translated, not dropped.
#[tokio::test]
async fn usage_counters_follow_the_rows_on_both_backends() {
    // Portable SQL: literals only, so one text runs on both.
    let changes = [
        "INSERT INTO instances (id, name, zone, instance_type, market, state, private_ip, tags, created_at, \
         state_changed_at) VALUES ('i-1', 'a', 'z', 't', 'on-demand', 'running', '10.0.0.2', '{}', 0, 0), \
         ('i-2', 'b', 'z', 't', 'on-demand', 'pending', '10.0.0.3', '{}', 0, 0), \
         ('i-3', 'c', 'z', 't', 'spot', 'terminated', '10.0.0.4', '{}', 0, 0)",
        "UPDATE instances SET state = 'terminated' WHERE id = 'i-1'",
        "UPDATE instances SET state = 'running' WHERE id = 'i-2'",
        "DELETE FROM instances WHERE id = 'i-3'",
        "INSERT INTO load_balancers (id, name, scheme, state, listeners, backends, source_ranges, address, dns_name, \
         created_at, updated_at) VALUES ('lb-1', 'p', 'internet-facing', 'active', '[]', '[]', '[]', '203.0.113.1', \
         'p.lb', 0, 0), ('lb-2', 'q', 'internal', 'provisioning', '[]', '[]', '[]', '10.0.192.2', 'q.lb', 0, 0), \
         ('lb-3', 'r', 'internet-facing', 'active', '[]', '[]', '[]', '203.0.113.2', 'r.lb', 0, 0)",
        "UPDATE load_balancers SET state = 'deleting' WHERE id = 'lb-3'",
        "DELETE FROM load_balancers WHERE id = 'lb-1'",
        "INSERT INTO route_tables (id, name, created_at) VALUES ('rtb-2', 'other', 0)",
        "INSERT INTO routes (id, route_table_id, name, destination, target_instance, created_at) VALUES \
         ('r-1', 'rtb-2', 'n1', '10.244.1.0/24', 'i-2', 0), ('r-2', 'rtb-2', 'n2', '10.244.2.0/24', 'i-2', 0)",
        "DELETE FROM routes WHERE id = 'r-1'",
    ];
    let usage = "SELECT key || '=' || n FROM counters UNION ALL \
         SELECT 'routes ' || id || '=' || route_count FROM route_tables ORDER BY 1";
    let expected = ["instances_live=1", "lbs_live=1", "lbs_public=1", "routes rtb-2=1"];

    let pg = Postgres::start();
    let url = pg.database("fc").await;
    db::migrate(&DbLocation::parse(&url).unwrap()).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for sql in changes {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let on_pg: Vec<String> = sqlx::query_scalar(usage).fetch_all(&mut conn).await.unwrap();
    assert_eq!(on_pg, expected);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fc.db");
    db::migrate(&DbLocation::File(file.clone())).await.unwrap();
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display())).await.unwrap();
    for sql in changes {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let on_sqlite: Vec<String> = sqlx::query_scalar(usage).fetch_all(&mut conn).await.unwrap();
    assert_eq!(on_sqlite, expected);
}

/// A database written by a newer fakecloud, one that does not exist, and a server that does not answer: each
/// refused with what to do, nothing changed, and the password never shown.
#[tokio::test]
async fn a_database_that_cannot_be_used_is_said_plainly() {
    let pg = Postgres::start();
    let url = pg.database("fc").await;
    let location = DbLocation::parse(&url).unwrap();
    let version = db::migrate(&location).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'from the future', true, '\\x00', 0)",
    )
    .bind(version + 1)
    .execute(&mut conn)
    .await
    .unwrap();
    let e = db::migrate(&location).await.unwrap_err().to_string();
    assert!(e.contains("newer fakecloud") && e.contains(&format!("version {}", version + 1)), "{e}");
    let tables: i64 = sqlx::query("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert!(tables > 1);

    let missing = pg.url("nope").replace("fakecloud@", "fakecloud:pw@");
    let e = db::migrate(&DbLocation::parse(&missing).unwrap()).await.unwrap_err().to_string();
    assert!(e.contains("\"nope\" does not exist") && e.contains("create it"), "{e}");
    assert!(e.contains("fakecloud:***@") && !e.contains(":pw@"), "{e}");

    drop(pg);
    let e = db::migrate(&location).await.unwrap_err().to_string();
    assert!(e.contains("is PostgreSQL running"), "{e}");
}

/// A database reached over TLS, its certificate checked against the CA the URL names (a managed PostgreSQL's
/// way); a server without TLS, when the URL requires it, is said plainly.
#[tokio::test]
async fn a_database_is_reached_over_tls_when_the_url_asks() {
    let pg = Postgres::start_with_tls();
    let url = pg.database("fc").await;
    let ca = pg.ca.as_ref().unwrap().display();
    let verified = format!("{url}?sslmode=verify-full&sslrootcert={ca}");
    assert!(db::migrate(&DbLocation::parse(&verified).unwrap()).await.unwrap() > 0);
    let mut conn = sqlx::PgConnection::connect(&verified).await.unwrap();
    let tls: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(tls, "the connection is encrypted");
    // A CA that did not sign the server's certificate: refused.
    let stranger = Postgres::start_with_tls();
    let wrong = format!("{url}?sslmode=verify-full&sslrootcert={}", stranger.ca.as_ref().unwrap().display());
    let e = db::migrate(&DbLocation::parse(&wrong).unwrap()).await.unwrap_err().to_string();
    assert!(e.contains("TLS handshake failed") && e.contains("sslrootcert"), "{e}");

    let plain = Postgres::start();
    let url = plain.database("fc").await;
    let e = db::migrate(&DbLocation::parse(&format!("{url}?sslmode=require")).unwrap()).await.unwrap_err().to_string();
    assert!(e.contains("server does not support TLS") && e.contains("sslmode=prefer"), "{e}");
}

/// The API served from PostgreSQL: what it acknowledged is there after a restart (audit entries too), in its
/// own account and in an account's schema beside it; snapshots (a SQLite file's copy) are refused in words.
#[tokio::test]
async fn an_emulator_serves_from_postgres_and_keeps_what_it_acknowledged() {
    use fakecloud_api::{Client, CreateInstanceRequest, InstanceState};
    use fakecloud_emulator::config::Config;
    use fakecloud_emulator::server::Server;

    use crate::common::{ADMIN, USER, tokens};

    let pg = Postgres::start();
    let url = pg.database("fc").await;
    let on_pg = DbLocation::parse(&url).unwrap();
    let cfg = Config { timings: fakecloud_emulator::config::Timings::instant(), ..Config::default() };
    let server = Server::start("127.0.0.1:0", &on_pg, cfg.clone(), tokens()).await.unwrap();
    let (user, admin) = (Client::new(&server.url(), USER).unwrap(), Client::new(&server.url(), ADMIN).unwrap());
    let instance = |name: &str| CreateInstanceRequest { name: name.into(), ..Default::default() };
    let made = user.create_instance(&instance("pg-1"), None).await.unwrap();
    let team = admin.create_account("team-a").await.unwrap();
    let theirs =
        Client::new(&server.url(), &team.user_token).unwrap().create_instance(&instance("a-1"), None).await.unwrap();
    server.shutdown().await;

    let server = Server::start("127.0.0.1:0", &on_pg, cfg, tokens()).await.unwrap();
    let (user, admin) = (Client::new(&server.url(), USER).unwrap(), Client::new(&server.url(), ADMIN).unwrap());
    let kept = user.get_instance(&made.id).await.unwrap();
    assert_eq!((kept.name.as_str(), kept.private_ip), ("pg-1", made.private_ip));
    assert_eq!(kept.state, InstanceState::Running);
    let audit = admin.audit(&Default::default()).await.unwrap();
    assert!(audit.items.iter().any(|e| e.resource_id.as_deref() == Some(made.id.as_str())), "{audit:?}");
    let team_user = Client::new(&server.url(), &team.user_token).unwrap();
    let listed = team_user.list_instances(&Default::default()).await.unwrap().items;
    assert_eq!(listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), [theirs.id.as_str()], "its own only");
    // The account's tables are in a schema of its own, not among the emulator's.
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let (own, account): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM public.instances), (SELECT COUNT(*) FROM account_team_a.instances)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!((own, account), (1, 1));

    let err = admin.snapshot("s.db").await.unwrap_err().to_string();
    assert!(err.contains("pg_dump"), "{err}");
    admin.delete_account("team-a").await.unwrap();
    let gone: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_namespace WHERE nspname = 'account_team_a'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(gone, 0, "a deleted account's schema is dropped");
    server.shutdown().await;
}

/// On PostgreSQL a write's statements go as one query of `EXECUTE`s of statements its session prepared, their
/// values written in as literals (issue #47): text that SQL would read as quotes, escapes, parameters or more
/// statements is kept exactly; a name in use is still a conflict naming its holder (the failed statement undone
/// alone, the write goes on to look the holder up); and after the server ends the writer's session, the next
/// session prepares its statements again rather than `EXECUTE` what it never prepared.
#[tokio::test]
async fn writes_sent_as_one_query_keep_every_value_and_prepare_again_on_a_new_session() {
    use std::time::Duration;

    use fakecloud_api::{Client, CreateInstanceRequest, codes};
    use fakecloud_emulator::config::Config;
    use fakecloud_emulator::server::Server;

    use crate::common::{USER, tokens};

    let pg = Postgres::start();
    let url = pg.database("fc").await;
    let cfg = Config { timings: fakecloud_emulator::config::Timings::instant(), ..Config::default() };
    let server = Server::start("127.0.0.1:0", &DbLocation::parse(&url).unwrap(), cfg, tokens()).await.unwrap();
    let user = Client::new(&server.url(), USER).unwrap();
    let hostile = "it's \\' ''; DROP TABLE instances; -- $1 $$ E'\\x41' \\\\ ü 🦀";
    let instance = |name: &str| CreateInstanceRequest {
        name: name.into(),
        tags: [("k".to_string(), hostile.to_string()), ("quote".to_string(), "'".to_string())].into(),
        ..Default::default()
    };
    let made = user.create_instance(&instance("a"), None).await.unwrap();
    assert_eq!(user.get_instance(&made.id).await.unwrap().tags, instance("a").tags);

    let e = user.create_instance(&instance("a"), None).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::INSTANCE_NAME_IN_USE), "{e}");
    assert!(e.to_string().contains(&made.id), "the holder is named: {e}");

    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'fc' AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(!ended.is_empty() && ended.iter().all(|e| *e), "the emulator's sessions are ended");
    // The first write may still find its connection gone (a 503 to retry); within a bound one gets through.
    let mut tries = 0;
    while let Err(e) = user.create_instance(&instance("b"), None).await {
        tries += 1;
        assert!(tries < 20, "no write got through after the sessions ended: {e}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for name in ["c", "d"] {
        user.create_instance(&instance(name), None).await.unwrap_or_else(|e| panic!("after a new session: {e}"));
    }
    server.shutdown().await;
}

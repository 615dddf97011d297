//! Accounts (issue #28) over HTTP: each is a cloud of its own, reached with its own tokens. A token of one
//! account never sees or changes another's resources, quotas, faults, rate limits or audit log — checked for
//! every operation of the API — and only the emulator's own admin token manages accounts.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use fakecloud_api::{AuditQuery, Client, CreateInstanceRequest, LeaseRequest, RenewLeaseRequest, codes};
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{ADMIN, Emu, HANG, USER, eventually};

const JSON: &str = "application/json";

/// `method path` with `token` and an optional JSON body: status and body.
async fn call(emu: &Emu, token: &str, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let text = body.map(|b| b.to_string());
    emu.raw(method, path, Some(token), text.as_deref().map(|t| (JSON, t))).await
}

/// An account's tokens, from the operator's create.
struct Tokens {
    user: String,
    admin: String,
}

async fn account(emu: &Emu, id: &str) -> Tokens {
    let made = emu.admin.create_account(id).await.unwrap();
    assert_eq!(made.id, id);
    assert_ne!(made.user_token, made.admin_token);
    Tokens { user: made.user_token, admin: made.admin_token }
}

/// What an account holds, made with its tokens: an instance, a route table and a route, a load balancer, a
/// fault rule, a data-plane rule, a rate limit, an outage, a hang. The same names in every account.
struct Holdings {
    instance: String,
    load_balancer: String,
    table: String,
    route: String,
    outage: String,
}

async fn hold(emu: &Emu, t: &Tokens) -> Holdings {
    let ok = |(status, body): (u16, Value)| {
        assert!((200..300).contains(&status), "{status}: {body}");
        body["id"].as_str().map(str::to_string).unwrap_or_default()
    };
    let instance = ok(call(emu, &t.user, Method::POST, "/v1/instances", Some(json!({"name": "node-0"}))).await);
    let listeners = json!([{"protocol": "TCP", "port": 80, "backend_port": 30080}]);
    let lb = json!({"name": "web", "listeners": listeners});
    let load_balancer = ok(call(emu, &t.user, Method::POST, "/v1/load-balancers", Some(lb)).await);
    let table = ok(call(emu, &t.user, Method::POST, "/v1/route-tables", Some(json!({"name": "rt"}))).await);
    let route = json!({"name": "r", "destination": "10.244.0.0/24", "target_instance": instance});
    let route = ok(call(emu, &t.user, Method::POST, "/v1/route-tables/main/routes", Some(route)).await);
    let rule = json!({"id": "rule", "match": {"operations": ["CreateLoadBalancer"]},
        "action": {"type": "error", "status": 503, "code": "Unavailable"}});
    ok(call(emu, &t.admin, Method::POST, "/v1/faults", Some(rule)).await);
    let lb_rule = json!({"id": "lb-rule", "match": {"load_balancers": ["web"]}, "action": {"type": "reset"}});
    ok(call(emu, &t.admin, Method::POST, "/v1/lb-faults", Some(lb_rule)).await);
    ok(call(emu, &t.admin, Method::PUT, "/v1/rate-limits/limit", Some(LIMIT.clone())).await);
    let outage = json!({"scope": "zone", "zone": "local-1c"});
    let outage = ok(call(emu, &t.admin, Method::POST, "/v1/outages", Some(outage)).await);
    ok(call(emu, &t.admin, Method::POST, "/v1/hangs", Some(json!({"names": ["node-0"]}))).await);
    Holdings { instance, load_balancer, table, route, outage }
}

static LIMIT: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"scope": "operation", "operation": "GetRegion", "capacity": 1000, "refill_per_second": 1}),
);

/// (method, the spec's path, the path called, body).
type Call = (Method, &'static str, String, Option<Value>);

/// Every operation of the API with a token of another account, on this account's resources, answers without
/// touching them; every list shows none of them. The operations are the spec's: one added later must be added
/// here too.
#[tokio::test]
async fn a_token_of_one_account_never_reaches_another() {
    let emu = Emu::start().await;
    let (a, b) = (account(&emu, "team-a").await, account(&emu, "team-b").await);
    let held = hold(&emu, &a).await;
    // The same names in the other account and in the emulator's own: each account is a namespace of its own.
    let theirs = hold(&emu, &b).await;
    hold(&emu, &Tokens { user: USER.into(), admin: ADMIN.into() }).await;
    assert_ne!(held.instance, theirs.instance);

    let (i, lb, rt, r) = (&held.instance, &held.load_balancer, &held.table, &held.route);
    let lb_body = json!({"listeners": [{"protocol": "TCP", "port": 81, "backend_port": 30081}]});
    let route_body = json!({"name": "x", "destination": "10.245.0.0/24", "target_instance": i});
    // What each of `b`'s tokens tries on `a`'s resources, by their IDs; none may answer 2xx.
    let on_theirs: Vec<Call> = vec![
        (Method::GET, "/v1/instances/{id}", format!("/v1/instances/{i}"), None),
        (Method::POST, "/v1/instances/{id}/stop", format!("/v1/instances/{i}/stop"), None),
        (Method::POST, "/v1/instances/{id}/start", format!("/v1/instances/{i}/start"), None),
        (Method::POST, "/v1/instances/{id}/terminate", format!("/v1/instances/{i}/terminate"), None),
        (Method::DELETE, "/v1/hangs/{instance_id}", format!("/v1/hangs/{i}"), None),
        (Method::POST, "/v1/hangs", "/v1/hangs".into(), Some(json!({"instance_ids": [i]}))),
        (Method::POST, "/v1/spot/reclaim", "/v1/spot/reclaim".into(), Some(json!({"instance_ids": [i]}))),
        (Method::GET, "/v1/load-balancers/{id}", format!("/v1/load-balancers/{lb}"), None),
        (Method::PATCH, "/v1/load-balancers/{id}", format!("/v1/load-balancers/{lb}"), Some(lb_body)),
        (Method::DELETE, "/v1/load-balancers/{id}", format!("/v1/load-balancers/{lb}"), None),
        (Method::DELETE, "/v1/route-tables/{id}", format!("/v1/route-tables/{rt}"), None),
        (Method::GET, "/v1/route-tables/{id}/routes", format!("/v1/route-tables/{rt}/routes"), None),
        (Method::POST, "/v1/route-tables/{id}/routes", format!("/v1/route-tables/{rt}/routes"), Some(route_body)),
        (Method::DELETE, "/v1/route-tables/{id}/routes/{route_id}", format!("/v1/route-tables/main/routes/{r}"), None),
    ];
    for token in [&b.user, &b.admin] {
        for (method, _, path, body) in &on_theirs {
            let (status, answer) = call(&emu, token, method.clone(), path, body.clone()).await;
            assert!(!(200..300).contains(&status), "{method} {path} with another account's token: {status} {answer}");
        }
    }
    // What names no resource of `a` acts on the caller's account: `b` changes, then deletes, its own rule, limit,
    // data-plane rule and outage of the same names; clears its faults and presets; stops its spot reclamation; sets its
    // quotas; resets itself. Its snapshot is refused: snapshots are the operator's (see `snapshots_are_the_operators`).
    let path = |p: &'static str| (p, p.to_string());
    let on_own: Vec<Call> = [
        (Method::PUT, ("/v1/rate-limits/{id}", "/v1/rate-limits/limit".into()), Some(LIMIT.clone())),
        (Method::DELETE, ("/v1/rate-limits/{id}", "/v1/rate-limits/limit".into()), None),
        (Method::DELETE, ("/v1/faults/{id}", "/v1/faults/rule".into()), None),
        (Method::DELETE, ("/v1/lb-faults/{id}", "/v1/lb-faults/lb-rule".into()), None),
        // Outages are numbered per account: `b`'s has the ID `a`'s has.
        (Method::DELETE, ("/v1/outages/{id}", format!("/v1/outages/{}", theirs.outage)), None),
        (Method::DELETE, path("/v1/faults"), None),
        (Method::PUT, ("/v1/rate-limit-presets/{name}", "/v1/rate-limit-presets/aws-ec2".into()), None),
        (Method::DELETE, path("/v1/rate-limit-presets"), None),
        (Method::PUT, path("/v1/spot/random"), Some(json!({"rate_per_minute": 1}))),
        (Method::DELETE, path("/v1/spot/random"), None),
        (Method::PUT, ("/v1/quotas/{name}", "/v1/quotas/instances".into()), Some(json!({"limit": 0}))),
        (Method::PUT, path("/v1/load-balancer-provisioning"), Some(json!({"seconds": 30}))),
        (Method::DELETE, path("/v1/load-balancer-provisioning"), None),
        (Method::POST, path("/v1/admin/snapshot"), Some(json!({"name": "team-b.db"}))),
        (Method::POST, path("/v1/admin/reset"), None),
    ]
    .into_iter()
    .map(|(m, (template, p), body)| (m, template, p, body))
    .collect();
    for (method, _, path, body) in &on_own {
        let (status, answer) = call(&emu, &b.admin, method.clone(), path, body.clone()).await;
        if path == "/v1/admin/snapshot" {
            assert_eq!((status, answer["error"]["code"].as_str()), (403, Some(codes::FORBIDDEN)), "{answer}");
            continue;
        }
        assert!((200..300).contains(&status), "{method} {path} on its own account: {status} {answer}");
    }
    // The lists of `b`, and of the emulator's own cloud, show none of `a`'s resources.
    let lists: Vec<Call> = [
        "/v1/instances",
        "/v1/load-balancers",
        "/v1/route-tables",
        "/v1/faults",
        "/v1/lb-faults",
        "/v1/rate-limits",
        "/v1/rate-limit-presets",
        "/v1/outages",
        "/v1/hangs",
        "/v1/quotas",
        "/v1/load-balancer-provisioning",
        "/v1/audit",
        "/v1/region",
    ]
    .into_iter()
    .map(|p| (Method::GET, p, p.to_string(), None))
    .chain([
        (Method::GET, "/v1/route-tables/{id}/routes", "/v1/route-tables/main/routes".to_string(), None),
        (Method::GET, "/v1/quotas/{name}", "/v1/quotas/instances".to_string(), None),
    ])
    .collect();
    for token in [b.admin.as_str(), ADMIN] {
        for (_, _, path, _) in &lists {
            let (status, answer) = call(&emu, token, Method::GET, path, None).await;
            assert_eq!(status, 200, "{path}: {answer}");
            let text = answer.to_string();
            for id in [i, lb, rt, r] {
                assert!(!text.contains(id.as_str()), "{path} shows {id} of another account: {text}");
            }
        }
    }

    // `a` has all it had, untouched: its instance running and hung, its load balancer with one listener, its
    // route, rule, data-plane rule, limit and outage; its quota at the default.
    let (_, inst) = call(&emu, &a.admin, Method::GET, &format!("/v1/instances/{i}"), None).await;
    assert_eq!(inst["state"], "running", "{inst}");
    let (_, l) = call(&emu, &a.admin, Method::GET, &format!("/v1/load-balancers/{lb}"), None).await;
    assert_eq!(l["listeners"].as_array().map(Vec::len), Some(1), "{l}");
    for path in
        ["/v1/hangs", "/v1/route-tables/main/routes", "/v1/faults", "/v1/lb-faults", "/v1/rate-limits", "/v1/outages"]
    {
        let (_, items) = call(&emu, &a.admin, Method::GET, path, None).await;
        assert_eq!(items["items"].as_array().map(Vec::len), Some(1), "{path}: {items}");
    }
    let (_, quota) = call(&emu, &a.admin, Method::GET, "/v1/quotas/instances", None).await;
    assert_eq!(quota["limit"], 1000, "{quota}");

    // Every operation of the spec is one of the above, a create, or the accounts' own (their own test).
    let covered: BTreeSet<(String, &str)> =
        on_theirs.iter().chain(&on_own).chain(&lists).map(|(m, t, _, _)| (m.to_string(), *t)).collect();
    let creates =
        ["/v1/instances", "/v1/load-balancers", "/v1/route-tables", "/v1/faults", "/v1/lb-faults", "/v1/outages"];
    let (_, spec) = emu.raw(Method::GET, "/openapi.json", None, None).await;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let create = method == "POST" && creates.contains(&path.as_str());
            // The audit stream is the audit log's, read above, as a long poll.
            let apart =
                path.starts_with("/v1/accounts") || path.starts_with("/v1/leases") || path == "/v1/audit/stream";
            assert!(
                create || apart || covered.contains(&(method.clone(), path.as_str())),
                "{method} {path} is not checked across accounts"
            );
        }
    }
}

/// One account's quotas, faults, rate limits, outages and idempotency keys are its own.
#[tokio::test]
async fn quotas_faults_limits_and_keys_are_an_accounts_own() {
    let emu = Emu::start().await;
    let (a, b) = (account(&emu, "team-a").await, account(&emu, "team-b").await);
    let url = emu.url();
    let (a_user, b_user) = (Client::new(&url, &a.user).unwrap(), Client::new(&url, &b.user).unwrap());
    let a_admin = Client::new(&url, &a.admin).unwrap();
    let req = |name: &str| CreateInstanceRequest { name: name.into(), ..Default::default() };

    // The same idempotency key in two accounts: two instances.
    let one = a_user.create_instance(&req("n"), Some("key-1")).await.unwrap();
    let other = b_user.create_instance(&req("n"), Some("key-1")).await.unwrap();
    assert_ne!(one.id, other.id);
    assert_eq!(a_user.create_instance(&req("n"), Some("key-1")).await.unwrap().id, one.id, "a replay in a");

    // A quota of `a`'s.
    a_admin.set_quota(fakecloud_api::QuotaName::Instances, 1).await.unwrap();
    let refused = a_user.create_instance(&req("n2"), None).await.unwrap_err();
    assert_eq!(refused.status(), Some(422), "{refused}");
    b_user.create_instance(&req("n2"), None).await.unwrap();

    // A fault rule of `a`'s, a bucket of `a`'s that both its tokens' calls would spend (`a`'s user spends it
    // here), and a zone outage of `a`'s: `b` meets none of them.
    let (status, body) = call(
        &emu,
        &a.admin,
        Method::POST,
        "/v1/faults",
        Some(json!({"match": {"operations": ["ListLoadBalancers"]}, "action": {"type": "error", "status": 503, "code": "Down"}})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(a_user.list_load_balancers(&Default::default()).await.unwrap_err().status(), Some(503));
    b_user.list_load_balancers(&Default::default()).await.unwrap();
    let limit =
        json!({"scope": "operation", "operation": "ListRouteTables", "capacity": 1, "refill_per_second": 0.001});
    assert_eq!(call(&emu, &a.admin, Method::PUT, "/v1/rate-limits/tight", Some(limit)).await.0, 200);
    a_user.list_route_tables().await.unwrap();
    assert_eq!(a_user.list_route_tables().await.unwrap_err().status(), Some(429), "a's bucket is spent");
    for _ in 0..3 {
        b_user.list_route_tables().await.unwrap();
    }
    let outage = json!({"scope": "zone", "zone": "local-1b"});
    assert_eq!(call(&emu, &a.admin, Method::POST, "/v1/outages", Some(outage)).await.0, 201);
    let in_b = CreateInstanceRequest { zone: Some("local-1b".into()), ..req("zoned") };
    b_user.create_instance(&in_b, None).await.unwrap();
    assert_eq!(a_user.create_instance(&in_b, None).await.unwrap_err().status(), Some(503), "a's zone is dark");

    // Each audit log has its own account's calls only.
    let audit = a_admin.audit(&AuditQuery::default()).await.unwrap().items;
    assert!(audit.iter().any(|e| e.resource_id.as_deref() == Some(one.id.as_str())));
    assert!(audit.iter().all(|e| e.resource_id.as_deref() != Some(other.id.as_str())), "b's calls in a's audit");
    let own = emu.admin.audit(&AuditQuery::default()).await.unwrap().items;
    assert!(own.iter().any(|e| e.operation == "CreateAccount" && e.resource_id.as_deref() == Some("team-a")));
    assert!(own.iter().all(|e| e.operation != "CreateInstance"), "accounts' calls in the emulator's own audit");
}

/// Only the emulator's own admin token manages accounts; bad input is refused with what to do; a deleted
/// account's tokens stop working and its name can be used again for an empty account.
#[tokio::test]
async fn the_operator_manages_accounts_and_bad_input_is_refused() {
    let emu = Emu::start().await;
    let a = account(&emu, "team-a").await;
    let lease = json!({"holder": "job", "ttl_seconds": 60});
    for token in [a.admin.as_str(), a.user.as_str(), USER] {
        for (method, path, body) in [
            (Method::POST, "/v1/accounts", Some(json!({"id": "x"}))),
            (Method::GET, "/v1/accounts", None),
            (Method::POST, "/v1/leases", Some(lease.clone())),
            (Method::PUT, "/v1/leases/team-a", Some(lease.clone())),
            (Method::DELETE, "/v1/leases/team-a", None),
        ] {
            let (status, body) = call(&emu, token, method.clone(), path, body).await;
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (403, Some(codes::FORBIDDEN)),
                "{method} {path}: {body}"
            );
        }
    }
    let (_, body) = call(&emu, &a.admin, Method::GET, "/v1/accounts", None).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("the emulator's own admin token"), "{body}");
    for (id, status, code, says) in [
        ("Team_A", 400, codes::INVALID_PARAMETER, "id: "),
        ("-a", 400, codes::INVALID_PARAMETER, "lowercase"),
        (&"a".repeat(64), 400, codes::INVALID_PARAMETER, "1-63"),
        ("default", 409, codes::ACCOUNT_ALREADY_EXISTS, "the emulator's own"),
        ("team-a", 409, codes::ACCOUNT_ALREADY_EXISTS, "team-a"),
    ] {
        let (s, body) = call(&emu, ADMIN, Method::POST, "/v1/accounts", Some(json!({"id": id}))).await;
        assert_eq!((s, body["error"]["code"].as_str()), (status, Some(code)), "{id}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(says), "{id}: {body}");
    }
    for method in [Method::GET, Method::DELETE] {
        let (s, body) = call(&emu, ADMIN, method, "/v1/accounts/nobody", None).await;
        assert_eq!((s, body["error"]["code"].as_str()), (404, Some(codes::ACCOUNT_NOT_FOUND)), "{body}");
    }
    let listed = emu.admin.list_accounts().await.unwrap().items;
    assert_eq!(listed.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["team-a"]);

    let a_user = Client::new(&emu.url(), &a.user).unwrap();
    a_user.create_instance(&CreateInstanceRequest { name: "n".into(), ..Default::default() }, None).await.unwrap();
    assert!(emu.account_store_exists("team-a").await, "the account's database beside the emulator's");
    assert_eq!(emu.admin.delete_account("team-a").await.unwrap().id, "team-a");
    assert_eq!(a_user.list_instances(&Default::default()).await.unwrap_err().status(), Some(401));
    assert!(!emu.account_store_exists("team-a").await, "the account's database is removed");
    let again = account(&emu, "team-a").await;
    assert_ne!(again.user, a.user, "new tokens");
    let (_, list) = call(&emu, &again.user, Method::GET, "/v1/instances", None).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "an empty cloud: {list}");
}

/// Who may call comes before what is sent (issue #47): a bad body from a token that is not the operator's — an
/// account's admin, which the gatekeeper lets through as an admin, or a user token — is refused 403, never 400.
#[tokio::test]
async fn a_non_operator_is_refused_whatever_its_body() {
    let emu = Emu::start().await;
    let a = account(&emu, "team-a").await;
    let bodies = [
        (JSON, "{"),
        (JSON, r#"{"id": 7}"#),
        (JSON, "[]"),
        (JSON, r#"{"holder": "", "ttl_seconds": -1}"#),
        ("text/plain", "x"),
    ];
    for token in [a.admin.as_str(), a.user.as_str(), USER] {
        for (method, path) in
            [(Method::POST, "/v1/accounts"), (Method::POST, "/v1/leases"), (Method::PUT, "/v1/leases/team-a")]
        {
            for body in bodies {
                let (status, answer) = emu.raw(method.clone(), path, Some(token), Some(body)).await;
                assert_eq!(
                    (status, answer["error"]["code"].as_str()),
                    (403, Some(codes::FORBIDDEN)),
                    "{method} {path} {body:?}: {answer}"
                );
            }
        }
    }
    // The operator's bad body is still a 400.
    let (status, answer) = emu.raw(Method::POST, "/v1/accounts", Some(ADMIN), Some((JSON, "{"))).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (400, Some(codes::INVALID_JSON)), "{answer}");
}

/// Snapshots are files on the operator's machine (issue #47): an account's tokens are refused whatever they send,
/// before the body is read — nothing is written into the snapshot directory, and the answer tells neither the
/// directory's path nor which names are taken (an existing name is a 409 for the operator). The operator's own
/// snapshots still work.
#[tokio::test]
async fn snapshots_are_the_operators() {
    let snapshots = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(snapshots.path()).unwrap();
    let cfg = Config { timings: Timings::instant(), snapshot_dir: Some(dir.clone()), ..Config::default() };
    let emu = Emu::with_config(cfg).await;
    let a = account(&emu, "team-a").await;
    let files = || -> BTreeSet<String> {
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    };
    let snapshot = |token: &str, body: &str| {
        let (token, body) = (token.to_string(), body.to_string());
        let emu = &emu;
        async move { emu.raw(Method::POST, "/v1/admin/snapshot", Some(&token), Some((JSON, &body))).await }
    };

    // The operator's snapshot: a name now taken (on PostgreSQL a snapshot is refused as such: back it up with
    // pg_dump, so no name is taken).
    let (status, made) = snapshot(ADMIN, r#"{"name": "taken.db"}"#).await;
    if matches!(emu.db, DbLocation::Postgres(_)) {
        assert!(status == 400 && made.to_string().contains("pg_dump"), "{status} {made}");
    } else {
        assert_eq!(status, 200, "{made}");
        assert_eq!(made["path"], dir.join("taken.db").display().to_string());
        let (status, again) = snapshot(ADMIN, r#"{"name": "taken.db"}"#).await;
        assert_eq!((status, again["error"]["code"].as_str()), (409, Some(codes::SNAPSHOT_EXISTS)), "{again}");
    }
    let before = files();

    // A new name, the taken one, a path, a wrong field, not JSON: the same refusal to each of the account's tokens.
    let bodies =
        [r#"{"name": "team-a.db"}"#, r#"{"name": "taken.db"}"#, r#"{"name": "../x.db"}"#, r#"{"nope": 1}"#, "{"];
    for token in [a.admin.as_str(), a.user.as_str()] {
        for body in bodies {
            let (status, answer) = snapshot(token, body).await;
            assert_eq!((status, answer["error"]["code"].as_str()), (403, Some(codes::FORBIDDEN)), "{body}: {answer}");
            assert!(!answer.to_string().contains(&dir.display().to_string()), "the directory told: {answer}");
        }
    }
    let (_, answer) = snapshot(&a.admin, bodies[0]).await;
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("operator's") && message.contains("the emulator's own admin token"), "{message}");
    assert_eq!(files(), before, "an account's snapshot wrote into the snapshot directory");
}

/// Accounts, their tokens and what is in them outlive the emulator's process.
#[tokio::test]
async fn accounts_survive_a_restart() {
    let mut emu = Emu::start().await;
    let a = account(&emu, "team-a").await;
    let (status, made) = call(&emu, &a.user, Method::POST, "/v1/instances", Some(json!({"name": "n"}))).await;
    assert_eq!(status, 201, "{made}");
    emu.restart().await;
    let (status, got) =
        call(&emu, &a.user, Method::GET, &format!("/v1/instances/{}", made["id"].as_str().unwrap()), None).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(emu.admin.list_accounts().await.unwrap().items.len(), 1);
}

/// A CI job takes an account for a while and renews it; when its lease lapses the janitor wipes the account —
/// emptied, new tokens, so the job's stop working — and the next job gets it clean. Releasing wipes at once.
#[tokio::test]
async fn a_lapsed_lease_is_wiped_and_the_account_free_again() {
    let emu = Emu::start().await;
    account(&emu, "pool-1").await;
    account(&emu, "pool-2").await;
    let req = |holder: &str, ttl: f64| LeaseRequest { holder: holder.into(), ttl_seconds: ttl, account: None };
    let job1 = emu.admin.take_lease(&req("job-1", 600.0)).await.unwrap();
    assert_eq!(job1.account.id, "pool-1", "the first free account");
    assert_eq!(job1.account.lease.as_ref().map(|l| l.holder.as_str()), Some("job-1"));
    let job2 = emu.admin.take_lease(&req("job-2", 1.0)).await.unwrap();
    assert_eq!(job2.account.id, "pool-2");
    let job2_user = Client::new(&emu.url(), &job2.user_token).unwrap();
    job2_user.create_instance(&CreateInstanceRequest { name: "n".into(), ..Default::default() }, None).await.unwrap();

    let none = emu.admin.take_lease(&req("job-3", 60.0)).await.unwrap_err();
    assert_eq!((none.status(), none.code()), (Some(409), Some(codes::NO_FREE_ACCOUNT)), "{none}");
    let named = LeaseRequest { account: Some("pool-1".into()), ..req("job-3", 60.0) };
    let taken = emu.admin.take_lease(&named).await.unwrap_err();
    assert_eq!((taken.status(), taken.code()), (Some(409), Some(codes::ACCOUNT_LEASED)), "{taken}");
    assert!(taken.to_string().contains("job-1"), "names the holder: {taken}");
    let renew = |holder: &str, ttl: f64| RenewLeaseRequest { holder: holder.into(), ttl_seconds: ttl };
    let stolen = emu.admin.renew_lease("pool-1", &renew("job-3", 60.0)).await.unwrap_err();
    assert_eq!(stolen.code(), Some(codes::ACCOUNT_LEASED), "{stolen}");
    let renewed = emu.admin.renew_lease("pool-1", &renew("job-1", 3600.0)).await.unwrap();
    let until = |a: &fakecloud_api::Account| a.lease.as_ref().unwrap().expires_at.clone();
    assert!(until(&renewed) > until(&job1.account), "{renewed:?}");

    // pool-2's lease lapses: the janitor wipes it.
    eventually(HANG, "pool-2 wiped and free", || async {
        emu.admin.get_account("pool-2").await.ok().filter(|a| a.lease.is_none())
    })
    .await;
    let gone = job2_user.list_instances(&Default::default()).await.unwrap_err();
    assert_eq!(gone.status(), Some(401), "the lapsed holder's token: {gone}");
    let job3 = emu.admin.take_lease(&req("job-3", 60.0)).await.unwrap();
    assert_eq!(job3.account.id, "pool-2");
    assert_ne!(job3.user_token, job2.user_token, "new tokens");
    let job3_user = Client::new(&emu.url(), &job3.user_token).unwrap();
    assert!(job3_user.list_instances(&Default::default()).await.unwrap().items.is_empty(), "an empty cloud");

    // Released: wiped at once.
    assert!(emu.admin.release_lease("pool-1").await.unwrap().lease.is_none());
    let job1_user = Client::new(&emu.url(), &job1.user_token).unwrap();
    assert_eq!(job1_user.list_instances(&Default::default()).await.unwrap_err().status(), Some(401));

    // Bad input.
    for (body, says) in [
        (json!({"holder": "j", "ttl_seconds": 0}), "ttl_seconds"),
        (json!({"holder": "j", "ttl_seconds": 1e9}), "ttl_seconds"),
        (json!({"holder": "", "ttl_seconds": 60}), "holder"),
        (json!({"holder": "j", "ttl_seconds": 60, "account": "Pool_1"}), "account"),
    ] {
        let (status, answer) = call(&emu, ADMIN, Method::POST, "/v1/leases", Some(body)).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().starts_with(says), "{answer}");
    }
    let (status, answer) = call(
        &emu,
        ADMIN,
        Method::POST,
        "/v1/leases",
        Some(json!({"holder": "j", "ttl_seconds": 60, "account": "nobody"})),
    )
    .await;
    assert_eq!((status, answer["error"]["code"].as_str()), (404, Some(codes::ACCOUNT_NOT_FOUND)), "{answer}");
    let free = emu.admin.renew_lease("pool-1", &renew("job-1", 60.0)).await.unwrap_err();
    assert_eq!((free.status(), free.code()), (Some(409), Some(codes::ACCOUNT_LEASED)), "{free}");
    assert!(free.to_string().contains("not leased"), "{free}");
}

//! The web console over real HTTP: its page and assets (open, with a strict Content-Security-Policy) and the
//! audit log's live tail it reads (`GET /v1/audit/stream`, admin only).
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use crate::common::{ADMIN, Emu, HANG, USER};
use fakecloud_api::{AuditEntry, CreateFaultRuleRequest, FaultAction, FaultMatch};

#[tokio::test]
async fn the_console_is_served_without_a_token_and_with_a_strict_policy() {
    let emu = Emu::start().await;
    let http = reqwest::Client::new();
    for (path, media_type) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let resp = http.get(format!("{}{path}", emu.url())).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        assert!(h["content-type"].to_str().unwrap().starts_with(media_type), "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        for directive in ["default-src 'self'", "script-src 'self'", "frame-ancestors 'none'"] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
    let page = http.get(format!("{}/console", emu.url())).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"<script type="module" src="/console/app.js"></script>"#));
    assert!(!page.contains("<script>"), "no inline script: the policy would refuse it");

    let (status, body) = emu.raw(reqwest::Method::GET, "/console/missing.js", None, None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("NotFound")));
    let (status, _) = emu.raw(reqwest::Method::POST, "/console", None, None).await;
    assert_eq!(status, 405);

    let audit = emu.admin.audit(&Default::default()).await.unwrap().items;
    // Reading the console is not an API call (a POST to it is audited, as one to /healthz is).
    assert!(audit.iter().all(|e| !(e.path.starts_with("/console") && e.method == "GET")), "{audit:?}");
}

/// Read server-sent events from `resp` until `want` audit entries arrived or the stream ended.
async fn read_events(resp: &mut reqwest::Response, want: usize) -> (Vec<AuditEntry>, bool) {
    let mut text = String::new();
    let mut entries = Vec::new();
    let deadline = Instant::now() + HANG;
    while entries.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(chunk) = tokio::time::timeout(left, resp.chunk()).await.expect("events in time").unwrap() else {
            return (entries, true);
        };
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            if block.lines().any(|l| l == "event: audit") {
                let entry: AuditEntry = serde_json::from_str(&data).unwrap();
                assert!(block.lines().any(|l| l == format!("id: {}", entry.seq)));
                entries.push(entry);
            }
        }
    }
    (entries, false)
}

fn stream(emu: &Emu, query: &str, token: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new().get(format!("{}/v1/audit/stream{query}", emu.url())).bearer_auth(token)
}

#[tokio::test]
async fn the_audit_stream_sends_earlier_and_new_calls_live_then_ends() {
    let emu = Emu::start().await;
    let first = emu.instance("before").await;

    let mut resp = stream(&emu, "?max_seconds=3", ADMIN).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let (backlog, _) = read_events(&mut resp, 1).await;
    assert_eq!(
        (backlog[0].operation.as_str(), backlog[0].resource_id.as_deref()),
        ("CreateInstance", Some(first.id.as_str()))
    );

    // Calls made while the stream is open arrive on it, reads (audited in batches) and changes alike.
    let second = emu.instance("during").await;
    emu.user.get_instance(&second.id).await.unwrap();
    let (live, _) = read_events(&mut resp, 3).await;
    let ops: Vec<&str> = live.iter().map(|e| e.operation.as_str()).collect();
    assert_eq!(ops, ["StreamAudit", "CreateInstance", "GetInstance"]);
    assert!(live.windows(2).all(|w| w[0].seq < w[1].seq));

    // Bounded: the stream ends after max_seconds, so a client (or a test tool) is never left hanging (without
    // max_seconds it would run for the default 300 s, far past the bound).
    let started = Instant::now();
    let (_, ended) = read_events(&mut resp, usize::MAX).await;
    assert!(ended && started.elapsed() < HANG);

    // A reconnecting client passes the last seq it saw and misses nothing, repeats nothing.
    let mut resp = stream(&emu, &format!("?after={}&max_seconds=1", live[1].seq), ADMIN).send().await.unwrap();
    let (resumed, _) = read_events(&mut resp, 1).await;
    assert_eq!(resumed[0].seq, live[2].seq);
}

#[tokio::test]
async fn the_audit_stream_needs_the_admin_token_and_a_bounded_duration() {
    let emu = Emu::start().await;
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(stream(&emu, "", USER).send().await.unwrap()), 403);
    let anonymous = reqwest::Client::new().get(format!("{}/v1/audit/stream", emu.url())).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    for bad in ["?max_seconds=0", "?max_seconds=3601", "?after=x", "?tail=5"] {
        let resp = stream(&emu, bad, ADMIN).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{bad}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "InvalidParameter", "{bad}");
    }
}

#[tokio::test]
async fn an_open_stream_does_not_hold_up_shutdown() {
    let mut emu = Emu::start().await;
    let mut resp = stream(&emu, "", ADMIN).send().await.unwrap();
    read_events(&mut resp, 1).await;
    let started = Instant::now();
    emu.server.take().unwrap().shutdown().await;
    // Held up, shutdown would wait for the stream's default 300 s: far past the bound.
    assert!(started.elapsed() < HANG, "shutdown waited {:?}", started.elapsed());
    let (_, ended) = read_events(&mut resp, usize::MAX).await;
    assert!(ended);
}

#[tokio::test]
async fn a_lagging_write_does_not_hold_the_stream_back() {
    let emu = Emu::start().await;
    // Eventual consistency rewrites what reads answer while a write lags: never a stream, read to its end.
    let lag = CreateFaultRuleRequest {
        id: None,
        matcher: FaultMatch { operations: vec!["CreateInstance".into()], ..Default::default() },
        // Ten times the bound below: a stream held back by the lag could not pass.
        action: FaultAction::EventualConsistency { seconds: 600.0 },
        trigger: Default::default(),
        position: None,
    };
    emu.admin.add_fault(&lag).await.unwrap();
    emu.instance("lagging").await;
    let started = Instant::now();
    let mut resp = stream(&emu, "?max_seconds=600", ADMIN).send().await.unwrap();
    let (entries, _) = read_events(&mut resp, 2).await;
    assert_eq!(entries[1].operation, "CreateInstance");
    assert!(started.elapsed() < HANG, "{:?}", started.elapsed());
}

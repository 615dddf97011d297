//! The load balancer data plane over real TCP on loopback: the real emulator binary with
//! `--serve-load-balancers` and a loopback public pool, instances whose private IPs are loopback addresses
//! where small backend servers listen, and clients that connect to the VIPs. Each test has its own /24s of
//! 127.0.0.0/8 (VIPs in 127.77.N.0/24, backends on 127.78.N.x, clients from 127.79.N.x), so they run in
//! parallel without meeting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::common::{ADMIN, HANG, USER, eventually, spawn_emulator_with};
use fakecloud_api::{
    AuditQuery, BackendState, Client, CreateInstanceRequest, CreateLbFaultRuleRequest, CreateLoadBalancerRequest,
    DataPlaneState, FaultTrigger, HealthCheck, HealthCheckProtocol, LbFaultAction, LbFaultMatch, Listener,
    ListenerState, LoadBalancer, LoadBalancerState, Protocol, Scheme, SessionAffinity, UpdateLoadBalancerRequest,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::process::Child;
use tokio::task::JoinHandle;

/// How long the data plane may take to follow a change (it promises a second): only a hang takes this long.
pub(crate) const FOLLOW: Duration = HANG;
/// How long one exchange with the data plane (a connect, a greeting, an echo) may take. The checks on what
/// comes back depend on it, so only a hang reaches it; a connection refused or closed at once ends sooner.
const IO: Duration = HANG;
/// A connect that only tries (the flood, the hostile clients): nothing is asserted on whether it got through.
const TRY: Duration = Duration::from_secs(3);

/// A backend: greets each connection with its name and a newline, then echoes lines; and answers HTTP 200 on
/// its health port.
pub(crate) struct Backend {
    tasks: Vec<JoinHandle<()>>,
}

impl Backend {
    async fn start(name: &'static str, ip: IpAddr, port: u16, health_port: u16) -> Self {
        let traffic = TcpListener::bind((ip, port)).await.unwrap();
        let health = TcpListener::bind((ip, health_port)).await.unwrap();
        let greet = tokio::spawn(async move {
            while let Ok((mut s, _)) = traffic.accept().await {
                tokio::spawn(async move {
                    if s.write_all(format!("{name}\n").as_bytes()).await.is_err() {
                        return;
                    }
                    let (r, mut w) = s.split();
                    let mut lines = BufReader::new(r).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if w.write_all(format!("{name}:{line}\n").as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let ok = tokio::spawn(async move {
            while let Ok((mut s, _)) = health.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
                });
            }
        });
        Self { tasks: vec![greet, ok] }
    }

    /// Close both listening sockets (connections already open stay).
    pub(crate) fn stop(&self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Two free ports on `ip`: the backends' traffic and health ports (bound by the backends right after).
async fn free_ports(ip: IpAddr) -> (u16, u16) {
    let a = TcpListener::bind((ip, 0)).await.unwrap();
    let b = TcpListener::bind((ip, 0)).await.unwrap();
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Backends named `names` on `127.78.<net>.1`, `.2`, … (one test's own addresses), on the same traffic and health
/// ports, each the private IP of an instance `node-1`, `node-2`, …
pub(crate) struct Backends {
    pub(crate) port: u16,
    pub(crate) health_port: u16,
    pub(crate) servers: Vec<Backend>,
    pub(crate) instances: Vec<String>,
}

pub(crate) async fn backends(c: &Client, net: u8, names: &[&'static str]) -> Backends {
    let ips: Vec<IpAddr> = (1..=names.len()).map(|k| ip(&format!("127.78.{net}.{k}"))).collect();
    let (port, health_port) = free_ports(ips[0]).await;
    let (mut servers, mut instances) = (Vec::new(), Vec::new());
    for (k, (name, addr)) in names.iter().zip(&ips).enumerate() {
        servers.push(Backend::start(name, *addr, port, health_port).await);
        instances.push(instance(c, &format!("node-{}", k + 1), *addr).await);
    }
    Backends { port, health_port, servers, instances }
}

/// Connect from `from` (a loopback source address) to `to` and read the greeting: the backend that answered,
/// or `None` if the connection was refused or closed at once.
async fn hello_from(from: Option<IpAddr>, to: SocketAddr) -> Option<(String, TcpStream)> {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(from) = from {
        socket.bind(SocketAddr::new(from, 0)).unwrap();
    }
    let mut stream = tokio::time::timeout(IO, socket.connect(to)).await.ok()?.ok()?;
    let mut line = String::new();
    let mut reader = BufReader::new(&mut stream);
    let n = tokio::time::timeout(IO, reader.read_line(&mut line)).await.ok()?.ok()?;
    (n > 0).then(|| (line.trim_end().to_string(), stream))
}

pub(crate) async fn hello(to: SocketAddr) -> Option<String> {
    hello_from(None, to).await.map(|(name, _)| name)
}

/// Send a line on an established connection and read the echo.
async fn echo(stream: &mut TcpStream, text: &str) -> Option<String> {
    stream.write_all(format!("{text}\n").as_bytes()).await.ok()?;
    let mut line = String::new();
    let n = tokio::time::timeout(IO, BufReader::new(stream).read_line(&mut line)).await.ok()?.ok()?;
    (n > 0).then(|| line.trim_end().to_string())
}

/// The emulator serving load balancers from the pool `127.77.{net}.0/24`.
pub(crate) async fn emulator(
    db: &std::path::Path,
    net: u8,
) -> (Child, Client, std::sync::Arc<std::sync::Mutex<String>>) {
    emulator_with(db, net, &[]).await
}

/// [`emulator`], with more flags.
async fn emulator_with(
    db: &std::path::Path,
    net: u8,
    more: &[&str],
) -> (Child, Client, std::sync::Arc<std::sync::Mutex<String>>) {
    let pool = format!("127.77.{net}.0/24");
    let mut flags = vec![
        "--serve-load-balancers",
        "--loopback-instances",
        "--public-pool",
        &pool,
        "--lb-provision-delay",
        "0s",
        "--lb-delete-delay",
        "0s",
    ];
    flags.extend_from_slice(more);
    let (child, url, log) = spawn_emulator_with(db, &flags, None).await;
    (child, Client::new(&url, USER).unwrap(), log)
}

async fn instance(c: &Client, name: &str, private_ip: IpAddr) -> String {
    let req = CreateInstanceRequest { name: name.into(), private_ip: Some(private_ip), ..Default::default() };
    c.create_instance(&req, None).await.unwrap().id
}

fn tcp(port: u16, backend_port: u16) -> Listener {
    Listener { protocol: Protocol::Tcp, port, backend_port }
}

async fn create_lb(c: &Client, req: CreateLoadBalancerRequest) -> LoadBalancer {
    let lb = c.create_load_balancer(&req, None).await.unwrap();
    eventually(FOLLOW, "the load balancer to be active", || async {
        let lb = c.get_load_balancer(&lb.id).await.unwrap();
        lb.address.is_some().then_some(lb)
    })
    .await
}

/// Wait until `to` is answered by one of `names`.
pub(crate) async fn answers(to: SocketAddr, names: &[&str]) {
    eventually(FOLLOW, &format!("{to} to answer from {names:?}"), || async {
        hello(to).await.filter(|n| names.contains(&n.as_str())).map(drop)
    })
    .await;
}

/// Wait until `to` is refused or closed at once.
async fn refuses(to: SocketAddr) {
    eventually(FOLLOW, &format!("{to} to refuse"), || async { hello(to).await.is_none().then_some(()) }).await;
}

#[tokio::test]
async fn traffic_spreads_and_follows_updates_without_dropping_unchanged_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator(&dir.path().join("fc.db"), 1).await;
    let bs = backends(&c, 1, &["b1", "b2"]).await;
    let port = bs.port;
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "web".into(),
            listeners: vec![tcp(18001, port)],
            backends: bs.instances.clone(),
            ..Default::default()
        },
    )
    .await;
    let vip = lb.address.unwrap();
    assert_eq!(lb.ip_mode, fakecloud_api::IpMode::Proxy, "a load balancer that proxies says so");
    let p1 = SocketAddr::new(vip, 18001);
    answers(p1, &["b1", "b2"]).await;

    // Round-robin: consecutive connections alternate between the two backends.
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(hello(p1).await.expect("an answer"));
    }
    assert_eq!(seen.iter().filter(|n| *n == "b1").count(), 3, "{seen:?}");
    assert_eq!(seen.iter().filter(|n| *n == "b2").count(), 3, "{seen:?}");

    let got = c.get_load_balancer(&lb.id).await.unwrap();
    assert_eq!(got.listener_status.len(), 1);
    assert_eq!((got.listener_status[0].port, got.listener_status[0].state), (18001, ListenerState::Listening));
    assert!(got.backend_health.iter().all(|h| h.state == BackendState::Healthy), "{:?}", got.backend_health);

    // An established connection on the listener that stays survives adding a listener...
    let (first, mut kept) = hello_from(None, p1).await.unwrap();
    let update =
        UpdateLoadBalancerRequest { listeners: Some(vec![tcp(18001, port), tcp(18002, port)]), ..Default::default() };
    c.update_load_balancer(&lb.id, &update).await.unwrap();
    let p2 = SocketAddr::new(vip, 18002);
    answers(p2, &["b1", "b2"]).await;
    assert_eq!(echo(&mut kept, "still there").await.as_deref(), Some(format!("{first}:still there").as_str()));

    // ...and removing the other port stops only that port.
    let update = UpdateLoadBalancerRequest { listeners: Some(vec![tcp(18002, port)]), ..Default::default() };
    c.update_load_balancer(&lb.id, &update).await.unwrap();
    refuses(p1).await;
    assert_eq!(echo(&mut kept, "gone").await, None, "a removed listener closes its connections");
    assert!(hello(p2).await.is_some());

    // Deleted: nothing answers.
    c.delete_load_balancer(&lb.id).await.unwrap();
    refuses(p2).await;
}

#[tokio::test]
async fn health_checks_take_a_failing_backend_out_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator(&dir.path().join("fc.db"), 2).await;
    let bs = backends(&c, 2, &["b1", "b2"]).await;
    let (i1, i2) = (bs.instances[0].clone(), bs.instances[1].clone());
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "web".into(),
            listeners: vec![tcp(18001, bs.port)],
            backends: bs.instances.clone(),
            health_check: Some(HealthCheck {
                protocol: HealthCheckProtocol::Http,
                port: bs.health_port,
                path: Some("/healthz".into()),
                interval_seconds: 1,
            }),
            ..Default::default()
        },
    )
    .await;
    let to = SocketAddr::new(lb.address.unwrap(), 18001);
    answers(to, &["b2"]).await;
    answers(to, &["b1"]).await;

    bs.servers[1].stop();
    // Two failed checks a second apart: not sooner (below), and only a hang takes longer than the bound.
    let started = std::time::Instant::now();
    let health = eventually(HANG, "b2 to be unhealthy", || async {
        let lb = c.get_load_balancer(&lb.id).await.unwrap();
        let h = lb.backend_health.iter().find(|h| h.instance == i2)?.clone();
        (h.state == BackendState::Unhealthy).then_some(h)
    })
    .await;
    assert!(started.elapsed() >= Duration::from_millis(900), "one failed check must not be enough");
    assert!(health.last_error.as_deref().is_some_and(|e| e.contains("connect")), "{health:?}");
    for _ in 0..6 {
        assert_eq!(hello(to).await.as_deref(), Some("b1"));
    }
    let got = c.get_load_balancer(&lb.id).await.unwrap();
    let b1 = got.backend_health.iter().find(|h| h.instance == i1).unwrap();
    assert_eq!((b1.state, b1.last_error.as_deref()), (BackendState::Healthy, None));
    // (How the CLI shows a load balancer's health: fakecloud-cli's `output` tests.)

    let metrics = reqwest::get(format!("{}/metrics", c.endpoint())).await.unwrap().text().await.unwrap();
    let gauge =
        |backend: &str| format!("fakecloud_lb_backend_healthy{{load_balancer=\"{}\",backend=\"{backend}\"}}", lb.id);
    assert!(metrics.contains(&format!("{} 0", gauge(&i2))), "{metrics}");
    assert!(metrics.contains(&format!("{} 1", gauge(&i1))), "{metrics}");

    // A backend whose instance is not running is unhealthy at once, and none healthy refuses every connection.
    c.terminate_instance(&i1).await.unwrap();
    refuses(to).await;
    let metrics = reqwest::get(format!("{}/metrics", c.endpoint())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("outcome=\"refused_no_backend\""), "{metrics}");
}

#[tokio::test]
async fn source_ranges_refuse_clients_outside_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator(&dir.path().join("fc.db"), 3).await;
    let bs = backends(&c, 3, &["b1"]).await;
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "web".into(),
            listeners: vec![tcp(18001, bs.port)],
            backends: bs.instances.clone(),
            source_ranges: vec!["127.79.3.0/25".into()],
            ..Default::default()
        },
    )
    .await;
    let to = SocketAddr::new(lb.address.unwrap(), 18001);
    let inside = Some(ip("127.79.3.10"));
    let outside = Some(ip("127.79.3.200"));
    eventually(FOLLOW, "a client inside the range to get an answer", || async {
        hello_from(inside, to).await.map(drop)
    })
    .await;
    assert!(hello_from(outside, to).await.is_none(), "a client outside the source ranges got an answer");

    // Widening the ranges lets it in, on the same listener.
    let update = UpdateLoadBalancerRequest { source_ranges: Some(vec!["127.79.3.0/24".into()]), ..Default::default() };
    c.update_load_balancer(&lb.id, &update).await.unwrap();
    eventually(FOLLOW, "the outside client to be let in", || async { hello_from(outside, to).await.map(drop) }).await;
    let metrics = reqwest::get(format!("{}/metrics", c.endpoint())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("outcome=\"refused_source\""), "{metrics}");
}

#[tokio::test]
async fn unbindable_listeners_are_reported_and_a_restart_restores_every_listener() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fc.db");
    let (mut emu, c, _log) = emulator(&db, 4).await;
    let bs = backends(&c, 4, &["b1"]).await;
    let (port, i) = (bs.port, bs.instances[0].clone());

    // Someone else holds one of the ports on the VIP.
    let vip = ip("127.77.4.9");
    let squatter = TcpListener::bind((vip, 18002)).await.unwrap();
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "web".into(),
            listeners: vec![tcp(18001, port), tcp(18002, port)],
            backends: vec![i.clone()],
            requested_ip: Some(vip),
            ..Default::default()
        },
    )
    .await;
    // An internal load balancer's address (in the VPC) is not on this host.
    let internal = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "internal".into(),
            scheme: Scheme::Internal,
            listeners: vec![tcp(18001, port)],
            backends: vec![i],
            ..Default::default()
        },
    )
    .await;
    answers(SocketAddr::new(vip, 18001), &["b1"]).await;
    let statuses = eventually(FOLLOW, "both load balancers' listener states", || async {
        let a = c.get_load_balancer(&lb.id).await.unwrap().listener_status;
        let b = c.get_load_balancer(&internal.id).await.unwrap().listener_status;
        (a.len() == 2 && b.len() == 1).then_some((a, b))
    })
    .await;
    assert_eq!(statuses.0[0].state, ListenerState::Listening);
    assert_eq!(statuses.0[1].state, ListenerState::Failed);
    assert!(statuses.0[1].reason.as_deref().is_some_and(|r| r.contains("in use")), "{:?}", statuses.0[1]);
    assert_eq!(statuses.1[0].state, ListenerState::Failed);
    assert!(statuses.1[0].reason.as_deref().is_some_and(|r| r.contains("assign")), "{:?}", statuses.1[0]);
    // The load balancer says so too: still active for the control plane (the CCM sees no change), but its data
    // plane is degraded (one listener of two) or down (none), with the reasons.
    let degraded = c.get_load_balancer(&lb.id).await.unwrap();
    assert_eq!(degraded.state, LoadBalancerState::Active);
    let dp = degraded.data_plane.unwrap();
    assert_eq!(dp.state, DataPlaneState::Degraded, "{dp:?}");
    assert!(dp.reasons.len() == 1 && dp.reasons[0].starts_with("listener TCP/18002 failed: "), "{dp:?}");
    assert!(dp.reasons[0].contains("in use"), "{dp:?}");
    let down = c.get_load_balancer(&internal.id).await.unwrap().data_plane.unwrap();
    assert_eq!(down.state, DataPlaneState::Down, "{down:?}");
    assert!(down.reasons[0].contains("assign"), "{down:?}");
    // (How the CLI shows a degraded or down data plane: fakecloud-cli's `output` tests.)

    // The port freed, the listener binds at the next resync.
    drop(squatter);
    answers(SocketAddr::new(vip, 18002), &["b1"]).await;
    eventually(FOLLOW, "the data plane to be serving", || async {
        let dp = c.get_load_balancer(&lb.id).await.unwrap().data_plane?;
        (dp.state == DataPlaneState::Serving && dp.reasons.is_empty()).then_some(())
    })
    .await;

    // A restart on the same database serves every listener again.
    emu.kill().await.unwrap();
    refuses(SocketAddr::new(vip, 18001)).await;
    let (_emu, c, _log) = emulator(&db, 4).await;
    answers(SocketAddr::new(vip, 18001), &["b1"]).await;
    answers(SocketAddr::new(vip, 18002), &["b1"]).await;
    let got = c.get_load_balancer(&lb.id).await.unwrap();
    assert!(got.listener_status.iter().all(|l| l.state == ListenerState::Listening), "{:?}", got.listener_status);
}

#[tokio::test]
async fn the_openapi_document_describes_the_data_plane_and_its_faults() {
    let emu = crate::common::Emu::start().await;
    let (_, spec) = emu.raw(reqwest::Method::GET, "/openapi.json", None, None).await;
    let schemas = &spec["components"]["schemas"];
    let lb = &schemas["LoadBalancer"];
    for field in ["listener_status", "backend_health", "data_plane"] {
        assert!(lb["properties"][field].is_object(), "LoadBalancer.{field} missing: {lb}");
        assert!(!lb["required"].as_array().unwrap().iter().any(|r| r == field), "{field} must be optional");
    }
    assert_eq!(schemas["BackendState"]["enum"], serde_json::json!(["healthy", "unhealthy", "unknown"]));
    assert_eq!(schemas["ListenerState"]["enum"], serde_json::json!(["listening", "failed", "unsupported"]));
    assert!(schemas["BackendHealth"]["properties"]["last_error"].is_object());
    assert_eq!(schemas["DataPlaneState"]["enum"], serde_json::json!(["serving", "degraded", "down"]));
    let actions: Vec<&str> = schemas["LbFaultAction"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["properties"]["type"]["enum"][0].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["reset", "latency", "black-hole"]);
    assert_eq!(schemas["LbFaultMatch"]["properties"]["ports"]["items"]["minimum"], 1);
    for path in ["/v1/lb-faults", "/v1/lb-faults/{id}"] {
        assert!(spec["paths"][path].is_object(), "{path} missing");
    }
}

fn lb_fault(id: &str, matcher: LbFaultMatch, action: LbFaultAction, trigger: FaultTrigger) -> CreateLbFaultRuleRequest {
    CreateLbFaultRuleRequest { id: Some(id.into()), matcher, action, trigger }
}

/// Read from `stream` until it ends: `Err` with how it ended if not with an orderly close.
async fn read_to_end(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut got = Vec::new();
    tokio::time::timeout(IO, stream.read_to_end(&mut got)).await.map_err(|_| std::io::ErrorKind::TimedOut)??;
    Ok(got)
}

/// Connect to `to` and read until the connection ends: what was read, or how it failed. The reset of a
/// connection reset as soon as it is accepted may already be there when the connect completes.
async fn how_it_ends(to: SocketAddr) -> Result<Vec<u8>, std::io::ErrorKind> {
    let mut s = tokio::time::timeout(IO, TcpStream::connect(to))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)?
        .map_err(|e| e.kind())?;
    read_to_end(&mut s).await.map_err(|e| e.kind())
}

async fn metrics(c: &Client) -> String {
    reqwest::get(format!("{}/metrics", c.endpoint())).await.unwrap().text().await.unwrap()
}

/// An emulator on `net` with an admin client, backends `names`, and an active load balancer over them made from
/// `req` (named `web` unless it says otherwise): what each data-plane fault test starts from.
struct Faulted {
    _emu: Child,
    c: Client,
    admin: Client,
    bs: Backends,
    lb: LoadBalancer,
}

impl Faulted {
    async fn start(
        dir: &std::path::Path,
        net: u8,
        names: &[&'static str],
        req: impl FnOnce(&Backends) -> CreateLoadBalancerRequest,
    ) -> Self {
        let (emu, c, _log) = emulator(&dir.join("fc.db"), net).await;
        let admin = Client::new(c.endpoint(), ADMIN).unwrap();
        let bs = backends(&c, net, names).await;
        let mut req = req(&bs);
        req.backends = bs.instances.clone();
        if req.name.is_empty() {
            req.name = "web".into();
        }
        let lb = create_lb(&c, req).await;
        Self { _emu: emu, c, admin, bs, lb }
    }
}

#[tokio::test]
async fn a_reset_rule_resets_new_connections_as_its_trigger_says_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let f = Faulted::start(dir.path(), 5, &["b1"], |bs| CreateLoadBalancerRequest {
        listeners: vec![tcp(18001, bs.port), tcp(18002, bs.port)],
        ..Default::default()
    })
    .await;
    let (c, admin, lb) = (&f.c, &f.admin, &f.lb);
    let (p1, p2) = (SocketAddr::new(lb.address.unwrap(), 18001), SocketAddr::new(lb.address.unwrap(), 18002));
    answers(p1, &["b1"]).await;
    answers(p2, &["b1"]).await;

    // The next two connections on port 18001 are reset; port 18002 is not matched.
    let only_p1 = LbFaultMatch { load_balancers: vec![lb.id.clone()], ports: vec![18001], ..Default::default() };
    let twice = FaultTrigger { times: Some(2), ..Default::default() };
    admin.add_lb_fault(&lb_fault("flap", only_p1, LbFaultAction::Reset { after_ms: None }, twice)).await.unwrap();
    for _ in 0..2 {
        assert_eq!(how_it_ends(p1).await, Err(std::io::ErrorKind::ConnectionReset));
        assert_eq!(hello(p2).await.as_deref(), Some("b1"));
    }
    assert_eq!(hello(p1).await.as_deref(), Some("b1"), "times: 2 is spent");
    let rule = &admin.list_lb_faults().await.unwrap().items[0];
    assert_eq!((rule.matched, rule.injected), (3, 2));

    let text = metrics(c).await;
    let fired =
        format!("fakecloud_lb_faults_fired_total{{load_balancer=\"{}\",fault=\"flap\",action=\"reset\"}} 2", lb.id);
    assert!(text.contains(&fired), "{text}");
    assert!(text.contains("outcome=\"reset_by_fault\""), "{text}");
    // One audit entry, the first time the rule fired on this load balancer.
    let query = AuditQuery { operation: Some("LoadBalancerFault".into()), ..Default::default() };
    let audited = eventually(FOLLOW, "the audit entry", || async {
        let items = admin.audit(&query).await.unwrap().items;
        (!items.is_empty()).then_some(items)
    })
    .await;
    assert_eq!(audited.len(), 1, "{audited:?}");
    let entry = &audited[0];
    assert_eq!((entry.fault.as_deref(), entry.resource_id.as_deref()), (Some("flap"), Some(lb.id.as_str())));
    assert_eq!((entry.role.as_str(), entry.method.as_str()), ("system", "reset"));

    // Reset after a while: forwarded first, then reset mid-stream.
    let after = LbFaultAction::Reset { after_ms: Some(300) };
    admin.add_lb_fault(&lb_fault("drop", LbFaultMatch::default(), after, FaultTrigger::default())).await.unwrap();
    let (name, mut s) = hello_from(None, p2).await.expect("forwarded before the reset");
    assert_eq!(name, "b1");
    let err = read_to_end(&mut s).await.expect_err("reset mid-stream");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");

    // Deleting the rules restores the traffic.
    admin.delete_lb_fault("drop").await.unwrap();
    admin.delete_lb_fault("flap").await.unwrap();
    let (_, mut kept) = hello_from(None, p2).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(echo(&mut kept, "still").await.as_deref(), Some("b1:still"));
}

#[tokio::test]
async fn a_latency_rule_holds_new_connections_before_forwarding() {
    let dir = tempfile::tempdir().unwrap();
    let f = Faulted::start(dir.path(), 6, &["b1"], |bs| CreateLoadBalancerRequest {
        name: "slow-web".into(),
        listeners: vec![tcp(18001, bs.port)],
        ..Default::default()
    })
    .await;
    let (c, admin, lb, bs) = (&f.c, &f.admin, &f.lb, &f.bs);
    let to = SocketAddr::new(lb.address.unwrap(), 18001);
    answers(to, &["b1"]).await;

    // What `fakecloud lb-fault add --id slow --name 'slow-*' --backend <b1> --latency 400ms --jitter 100ms`
    // sends (fakecloud-cli's tests run that command).
    let slow =
        LbFaultMatch { names: vec!["slow-*".into()], backends: vec![bs.instances[0].clone()], ..Default::default() };
    let latency = LbFaultAction::Latency { ms: 400, jitter_ms: 100 };
    admin.add_lb_fault(&lb_fault("slow", slow, latency, FaultTrigger::default())).await.unwrap();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        assert_eq!(hello(to).await.as_deref(), Some("b1"));
        assert!(started.elapsed() >= Duration::from_millis(400), "answered after {:?}", started.elapsed());
    }
    let rule = &admin.list_lb_faults().await.unwrap().items[0];
    assert_eq!((rule.id.as_str(), rule.action.clone()), ("slow", LbFaultAction::Latency { ms: 400, jitter_ms: 100 }));
    assert_eq!(rule.injected, 3);
    let text = metrics(c).await;
    assert!(text.contains("action=\"latency\"} 3"), "{text}");

    // A rule for another load balancer's name does not slow this one.
    admin.delete_lb_fault("slow").await.unwrap();
    let other = LbFaultMatch { names: vec!["api".into()], ..Default::default() };
    let slower = LbFaultAction::Latency { ms: 600_000, jitter_ms: 0 };
    admin.add_lb_fault(&lb_fault("elsewhere", other, slower, FaultTrigger::default())).await.unwrap();
    assert_eq!(hello(to).await.as_deref(), Some("b1"), "answered within the IO timeout");
}

#[tokio::test]
async fn a_black_hole_takes_a_backend_out_until_the_rule_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let f = Faulted::start(dir.path(), 7, &["b1", "b2"], |bs| CreateLoadBalancerRequest {
        listeners: vec![tcp(18001, bs.port)],
        health_check: Some(HealthCheck {
            protocol: HealthCheckProtocol::Tcp,
            port: bs.health_port,
            path: None,
            interval_seconds: 1,
        }),
        ..Default::default()
    })
    .await;
    let (c, admin, lb) = (&f.c, &f.admin, &f.lb);
    let i2 = f.bs.instances[1].clone();
    let to = SocketAddr::new(lb.address.unwrap(), 18001);
    answers(to, &["b1"]).await;
    answers(to, &["b2"]).await;

    let node2 = LbFaultMatch { backends: vec![i2.clone()], ..Default::default() };
    admin.add_lb_fault(&lb_fault("hole", node2, LbFaultAction::BlackHole {}, FaultTrigger::default())).await.unwrap();
    let health = eventually(HANG, "b2 to be unhealthy", || async {
        let lb = c.get_load_balancer(&lb.id).await.unwrap();
        let h = lb.backend_health.iter().find(|h| h.instance == i2)?.clone();
        (h.state == BackendState::Unhealthy).then_some(h)
    })
    .await;
    assert!(health.last_error.as_deref().is_some_and(|e| e.contains("black-holed")), "{health:?}");
    let dp = c.get_load_balancer(&lb.id).await.unwrap().data_plane.unwrap();
    assert_eq!(dp.state, DataPlaneState::Degraded, "{dp:?}");
    assert!(dp.reasons.iter().any(|r| r.contains(&i2) && r.contains("black-holed")), "{dp:?}");
    for _ in 0..6 {
        assert_eq!(hello(to).await.as_deref(), Some("b1"), "the black-holed backend gets no traffic");
    }
    let rule = &admin.list_lb_faults().await.unwrap().items[0];
    assert!(rule.injected >= 2, "two failed checks turn it unhealthy: {rule:?}");
    assert!(metrics(c).await.contains("action=\"black-hole\""));

    admin.delete_lb_fault("hole").await.unwrap();
    eventually(HANG, "b2 to be healthy again", || async {
        let lb = c.get_load_balancer(&lb.id).await.unwrap();
        lb.backend_health.iter().any(|h| h.instance == i2 && h.state == BackendState::Healthy).then_some(())
    })
    .await;
    answers(to, &["b2"]).await;
}

/// A UDP backend on `ip:port`: answers each datagram with `name:` and the datagram.
fn udp_echo(name: &'static str, socket: tokio::net::UdpSocket) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let answer = [name.as_bytes(), b":", &buf[..n]].concat();
            let _ = socket.send_to(&answer, from).await;
        }
    })
}

/// Send `text` from `client` to `to` until an answer comes (the data plane may not serve it yet); the answer.
async fn udp_ask(client: &tokio::net::UdpSocket, to: SocketAddr, text: &str) -> String {
    eventually(FOLLOW, &format!("{to} to answer {text:?} over UDP"), || async {
        client.send_to(text.as_bytes(), to).await.unwrap();
        let mut buf = [0u8; 1500];
        let (n, from) =
            tokio::time::timeout(Duration::from_millis(500), client.recv_from(&mut buf)).await.ok()?.ok()?;
        assert_eq!(from, to, "the answer comes from the load balancer's address");
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        // A late answer to an earlier try is not this one.
        answer.ends_with(&format!(":{text}")).then_some(answer)
    })
    .await
}

/// An active load balancer `dns` over `bs` with one UDP listener on port 18053, and that listener's address.
async fn udp_lb(c: &Client, bs: &Backends) -> (LoadBalancer, SocketAddr) {
    let udp = Listener { protocol: Protocol::Udp, port: 18053, backend_port: bs.port };
    let req = CreateLoadBalancerRequest {
        name: "dns".into(),
        listeners: vec![udp],
        backends: bs.instances.clone(),
        ..Default::default()
    };
    let lb = create_lb(c, req).await;
    let to = SocketAddr::new(lb.address.unwrap(), 18053);
    (lb, to)
}

#[tokio::test]
async fn udp_listeners_keep_each_client_on_one_backend_and_spread_clients() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator(&dir.path().join("fc.db"), 8).await;
    let bs = backends(&c, 8, &["b1", "b2"]).await;
    let mut echoes = Vec::new();
    for (k, name) in ["b1", "b2"].into_iter().enumerate() {
        let socket = tokio::net::UdpSocket::bind((ip(&format!("127.78.8.{}", k + 1)), bs.port)).await.unwrap();
        echoes.push(udp_echo(name, socket));
    }
    let (lb, to) = udp_lb(&c, &bs).await;

    let a = tokio::net::UdpSocket::bind((ip("127.79.8.1"), 0)).await.unwrap();
    let b = tokio::net::UdpSocket::bind((ip("127.79.8.2"), 0)).await.unwrap();
    let first = udp_ask(&a, to, "hello").await;
    let (backend_a, said) = first.split_once(':').unwrap();
    assert_eq!(said, "hello");
    let backend_a = backend_a.to_string();
    // The second client's session goes to the other backend, and each stays on its own.
    let backend_b = udp_ask(&b, to, "hi").await.split_once(':').unwrap().0.to_string();
    assert_ne!(backend_a, backend_b);
    for n in 0..3 {
        assert_eq!(udp_ask(&a, to, &format!("a{n}")).await, format!("{backend_a}:a{n}"));
        assert_eq!(udp_ask(&b, to, &format!("b{n}")).await, format!("{backend_b}:b{n}"));
    }

    let got = c.get_load_balancer(&lb.id).await.unwrap();
    assert_eq!(
        (got.listener_status[0].protocol, got.listener_status[0].state),
        (Protocol::Udp, ListenerState::Listening)
    );
    assert_eq!(got.data_plane.unwrap().state, DataPlaneState::Serving);
    let text = metrics(&c).await;
    let accepted = format!(
        "fakecloud_lb_connections_total{{load_balancer=\"{}\",protocol=\"UDP\",port=\"18053\",outcome=\"accepted\"}} 2",
        lb.id
    );
    assert!(text.contains(&accepted), "{text}");

    // Deleted: nothing answers.
    c.delete_load_balancer(&lb.id).await.unwrap();
    eventually(FOLLOW, "the UDP listener to close", || async {
        a.send_to(b"anyone?", to).await.ok()?;
        let mut buf = [0u8; 64];
        tokio::time::timeout(Duration::from_millis(300), a.recv_from(&mut buf)).await.is_err().then_some(())
    })
    .await;
}

/// Client-IP affinity: every connection of one client address goes to one backend (kube-proxy's `ClientIP`
/// affinity is per node, so only this keeps one client on one pod), clients still spread, and turning it off
/// spreads one client's connections again — all on the listener as it runs.
#[tokio::test]
async fn client_ip_affinity_keeps_one_client_on_one_backend_and_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator(&dir.path().join("fc.db"), 13).await;
    let bs = backends(&c, 13, &["b1", "b2", "b3"]).await;
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "sticky".into(),
            listeners: vec![tcp(18001, bs.port)],
            backends: bs.instances.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(lb.session_affinity, SessionAffinity::None);
    let to = SocketAddr::new(lb.address.unwrap(), 18001);
    for name in ["b1", "b2", "b3"] {
        answers(to, &[name]).await;
    }
    let from = |k: u8| Some(ip(&format!("127.79.13.{k}")));
    let backend_of = async |k: u8| hello_from(from(k), to).await.map(|(name, _)| name);

    let update = |affinity| UpdateLoadBalancerRequest { session_affinity: Some(affinity), ..Default::default() };
    let sticky = c.update_load_balancer(&lb.id, &update(SessionAffinity::ClientIp)).await.unwrap();
    assert_eq!(sticky.session_affinity, SessionAffinity::ClientIp);
    assert_eq!(c.get_load_balancer(&lb.id).await.unwrap().session_affinity, SessionAffinity::ClientIp);
    // The data plane follows the update within a resync; from then on one client sees one backend.
    let first = eventually(FOLLOW, "one client's connections to stay on one backend", || async {
        let mut seen = HashSet::new();
        for _ in 0..6 {
            seen.insert(backend_of(1).await?);
        }
        (seen.len() == 1).then(|| seen.into_iter().next())?
    })
    .await;
    for _ in 0..6 {
        assert_eq!(backend_of(1).await.as_deref(), Some(first.as_str()), "client-ip affinity held");
    }
    let mut clients = HashSet::new();
    for k in 1..=12 {
        clients.insert(backend_of(k).await.unwrap());
    }
    assert!(clients.len() >= 2, "clients still spread over the backends: {clients:?}");

    c.update_load_balancer(&lb.id, &update(SessionAffinity::None)).await.unwrap();
    eventually(FOLLOW, "one client's connections to spread again", || async {
        let mut seen = HashSet::new();
        for _ in 0..6 {
            seen.insert(backend_of(1).await?);
        }
        (seen.len() == 3).then_some(())
    })
    .await;
}

/// A client that keeps its source port (a resolver, upstream's UDP e2e specs) while its backend has nothing on
/// the port yet, as a NodePort before its Service has an endpoint: the backend refuses, the session ends, and
/// once something answers there the client's next datagram reaches it.
#[tokio::test]
async fn a_udp_session_its_backend_refused_ends_so_the_client_reaches_it_once_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator(&dir.path().join("fc.db"), 12).await;
    let bs = backends(&c, 12, &["b1"]).await;
    let (lb, to) = udp_lb(&c, &bs).await;
    let client = tokio::net::UdpSocket::bind((ip("127.79.12.1"), 0)).await.unwrap();
    let refused = format!(
        "fakecloud_lb_connections_total{{load_balancer=\"{}\",protocol=\"UDP\",port=\"18053\",outcome=\"backend_refused\"}}",
        lb.id
    );
    // Nothing on the backend's UDP port: its refusal ends the session, which the next datagram finds.
    eventually(FOLLOW, "the backend's refusal to end the session", || async {
        client.send_to(b"anyone?", to).await.unwrap();
        metrics(&c).await.contains(&refused).then_some(())
    })
    .await;
    let socket = tokio::net::UdpSocket::bind((ip("127.78.12.1"), bs.port)).await.unwrap();
    let _echo = udp_echo("b1", socket);
    assert_eq!(udp_ask(&client, to, "hello").await, "b1:hello", "the same source port reaches the backend now");
}

/// Connect to `to` and keep the connection if a backend greets it; `None` if it is closed at once.
async fn held(to: SocketAddr) -> Option<TcpStream> {
    hello_from(None, to).await.map(|(_, stream)| stream)
}

#[tokio::test]
async fn connections_past_a_listener_or_load_balancer_limit_are_refused_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let limits = ["--lb-max-connections-per-listener", "3", "--lb-max-connections", "4"];
    let (_emu, c, _log) = emulator_with(&dir.path().join("fc.db"), 9, &limits).await;
    let bs = backends(&c, 9, &["b1"]).await;
    let req = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![tcp(18001, bs.port)],
        backends: bs.instances.clone(),
        ..Default::default()
    };
    let created = c.create_load_balancer(&req, None).await.unwrap();
    assert_eq!(created.ip_mode, fakecloud_api::IpMode::Proxy, "a create answers as a get does");
    let lb = create_lb(&c, CreateLoadBalancerRequest { name: "web2".into(), ..req }).await;
    let update = UpdateLoadBalancerRequest {
        listeners: Some(vec![tcp(18001, bs.port), tcp(18002, bs.port)]),
        ..Default::default()
    };
    let patched = c.update_load_balancer(&lb.id, &update).await.unwrap();
    assert_eq!(patched.ip_mode, fakecloud_api::IpMode::Proxy, "an update answers as a get does");
    let vip = lb.address.unwrap();
    let (p1, p2) = (SocketAddr::new(vip, 18001), SocketAddr::new(vip, 18002));
    answers(p2, &["b1"]).await;

    // Three on the first listener, its limit; the fourth is closed at once.
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(held(p1).await.expect("a connection under the listener's limit"));
    }
    assert!(held(p1).await.is_none(), "a fourth connection on a listener that takes three");
    // One more on the second listener makes four on the load balancer, its limit.
    open.push(held(p2).await.expect("the load balancer's fourth connection"));
    assert!(held(p2).await.is_none(), "a fifth connection on a load balancer that takes four");

    let text = metrics(&c).await;
    for outcome in ["refused_listener_full", "refused_lb_full"] {
        assert!(text.contains(&format!("outcome=\"{outcome}\"")), "{outcome}: {text}");
    }
    let dp = c.get_load_balancer(&lb.id).await.unwrap().data_plane.unwrap();
    assert_eq!(dp.state, DataPlaneState::Degraded, "{dp:?}");
    assert!(
        dp.reasons.iter().any(|r| r.contains("TCP/18001") && r.contains("--lb-max-connections-per-listener")),
        "{dp:?}"
    );
    assert!(dp.reasons.iter().any(|r| r.contains("--lb-max-connections)")), "{dp:?}");

    // Closed connections give their places back.
    drop(open);
    answers(p1, &["b1"]).await;
    let deleted = c.delete_load_balancer(&lb.id).await.unwrap();
    assert_eq!(deleted.ip_mode, fakecloud_api::IpMode::Proxy, "a delete answers as a get does");
}

#[tokio::test]
async fn a_proxied_connection_that_passes_nothing_is_closed_at_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // An idle timeout of 3 s, and a busy connection that talks every 300 ms for longer: a busy machine would
    // have to stall the talk for seconds to make it look idle.
    let (_emu, c, _log) = emulator_with(&dir.path().join("fc.db"), 10, &["--lb-idle-timeout", "3s"]).await;
    let bs = backends(&c, 10, &["b1"]).await;
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "web".into(),
            listeners: vec![tcp(18001, bs.port)],
            backends: bs.instances.clone(),
            ..Default::default()
        },
    )
    .await;
    let to = SocketAddr::new(lb.address.unwrap(), 18001);
    answers(to, &["b1"]).await;
    // A connection that talks keeps going past the idle timeout...
    let (_, mut busy) = hello_from(None, to).await.unwrap();
    for n in 0..12 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(echo(&mut busy, &format!("{n}")).await, Some(format!("b1:{n}")), "a busy connection was cut");
    }
    // ...and one that stays quiet is closed (without the timeout it would stay open for good).
    let (_, mut quiet) = hello_from(None, to).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(HANG, quiet.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "a quiet connection was not closed: {read:?}");
    assert!(metrics(&c).await.contains("fakecloud_lb_connections_idle_closed_total"), "idle closes are counted");
}

#[tokio::test]
async fn udp_sessions_are_bounded_per_load_balancer_across_its_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator_with(&dir.path().join("fc.db"), 11, &["--lb-max-udp-sessions", "2"]).await;
    let bs = backends(&c, 11, &["b1"]).await;
    let echo_socket = tokio::net::UdpSocket::bind((ip("127.78.11.1"), bs.port)).await.unwrap();
    let _echo = udp_echo("b1", echo_socket);
    let udp = |port| Listener { protocol: Protocol::Udp, port, backend_port: bs.port };
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "dns".into(),
            listeners: vec![udp(18053), udp(18054)],
            backends: bs.instances.clone(),
            ..Default::default()
        },
    )
    .await;
    let vip = lb.address.unwrap();
    let (l1, l2) = (SocketAddr::new(vip, 18053), SocketAddr::new(vip, 18054));
    let a = tokio::net::UdpSocket::bind((ip("127.79.11.1"), 0)).await.unwrap();
    let b = tokio::net::UdpSocket::bind((ip("127.79.11.2"), 0)).await.unwrap();
    assert_eq!(udp_ask(&a, l1, "a").await, "b1:a");
    assert_eq!(udp_ask(&b, l2, "b").await, "b1:b");
    // Two sessions on the load balancer, one per listener: a third client gets nothing on either.
    let late = tokio::net::UdpSocket::bind((ip("127.79.11.3"), 0)).await.unwrap();
    for to in [l1, l2] {
        late.send_to(b"anyone?", to).await.unwrap();
        let mut buf = [0u8; 64];
        let answer = tokio::time::timeout(Duration::from_millis(500), late.recv_from(&mut buf)).await;
        assert!(answer.is_err(), "a session past the load balancer's limit was answered on {to}");
    }
    assert!(metrics(&c).await.contains("outcome=\"refused_sessions_full\""));
    let dp = c.get_load_balancer(&lb.id).await.unwrap().data_plane.unwrap();
    assert!(dp.reasons.iter().any(|r| r.contains("UDP/") && r.contains("--lb-max-udp-sessions")), "{dp:?}");
    // The sessions already open carry on.
    assert_eq!(udp_ask(&a, l1, "again").await, "b1:again");
}

/// Write straight into the emulator's database, as an older emulator (which did not check) might have.
async fn stored(db: &std::path::Path, sql: &'static str, bind: &str) {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}", db.display())).await.unwrap();
    sqlx::query(sql).bind(bind.to_string()).execute(&pool).await.unwrap();
    pool.close().await;
}

/// The open files of process `pid`.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test]
async fn a_load_balancer_never_forwards_to_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fc.db");
    let (emu, c, _log) = emulator(&db, 12).await;
    let bs = backends(&c, 12, &["b1"]).await;
    let port = 18971;
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "web".into(),
            listeners: vec![tcp(port, port)],
            backends: bs.instances.clone(),
            ..Default::default()
        },
    )
    .await;
    let vip = lb.address.unwrap();
    // The VIP, written as an IPv4-mapped address, is still the load balancer's own.
    let mapped = format!("::ffff:{vip}");
    let req = CreateInstanceRequest { name: "loop".into(), private_ip: Some(ip(&mapped)), ..Default::default() };
    let err = c.create_instance(&req, None).await.unwrap_err();
    assert_eq!(err.code(), Some(fakecloud_api::codes::INVALID_ADDRESS), "{err}");
    assert!(err.to_string().contains("public pool"), "{err}");

    // An older emulator took it: the backend's address in the database is the VIP. One connection must not
    // make the data plane connect to itself over and over.
    stored(&db, "UPDATE instances SET private_ip = ?1", &mapped).await;
    let pid = emu.id().unwrap();
    eventually(FOLLOW, "the backend to be taken out", || async {
        let lb = c.get_load_balancer(&lb.id).await.unwrap();
        let h = lb.backend_health.first()?;
        (h.state == BackendState::Unhealthy).then_some(())
    })
    .await;
    let dp = c.get_load_balancer(&lb.id).await.unwrap().data_plane.unwrap();
    assert!(dp.reasons.iter().any(|r| r.contains("not forwarded to") && r.contains("public pool")), "{dp:?}");
    let before = open_files(pid);
    for _ in 0..3 {
        assert!(hello(SocketAddr::new(vip, port)).await.is_none(), "a connection to the load balancer was forwarded");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = open_files(pid);
    assert!(after < before + 20, "open files went from {before} to {after}");
    c.list_instances(&Default::default()).await.expect("the API still answers");
}

#[tokio::test]
async fn a_health_check_path_cannot_write_a_request_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fc.db");
    let (_emu, c, _log) = emulator(&db, 13).await;
    let backend_ip = ip("127.78.13.1");
    let (port, health_port) = free_ports(backend_ip).await;
    // The backend's health port records every byte the checks send.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let health = TcpListener::bind((backend_ip, health_port)).await.unwrap();
    let recorder = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = health.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await.ok().and_then(Result::ok);
                seen.lock().unwrap().extend_from_slice(&buf[..n.unwrap_or(0)]);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
            }
        })
    };
    let b1 = instance(&c, "node-1", backend_ip).await;
    let smuggled = "/x HTTP/1.1\r\nHost: internal\r\n\r\nSET pwned 1\r\n";
    let check = |path: &str| HealthCheck {
        protocol: HealthCheckProtocol::Http,
        port: health_port,
        path: Some(path.into()),
        interval_seconds: 1,
    };
    let req = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![tcp(18001, port)],
        backends: vec![b1],
        health_check: Some(check(smuggled)),
        ..Default::default()
    };
    let err = c.create_load_balancer(&req, None).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    assert!(err.to_string().contains("health_check.path"), "{err}");

    // Stored anyway (an older emulator): the checks do not send it.
    let lb = create_lb(&c, CreateLoadBalancerRequest { health_check: Some(check("/healthz")), ..req }).await;
    eventually(FOLLOW, "a check with the good path", || async {
        String::from_utf8_lossy(&seen.lock().unwrap()).contains("GET /healthz HTTP/1.1").then_some(())
    })
    .await;
    let spec = serde_json::json!({"protocol": "HTTP", "port": health_port, "path": smuggled, "interval_seconds": 1});
    stored(&db, "UPDATE load_balancers SET health_check = ?1", &spec.to_string()).await;
    let health = eventually(FOLLOW, "the check to refuse the stored path", || async {
        let lb = c.get_load_balancer(&lb.id).await.unwrap();
        let h = lb.backend_health.first()?.clone();
        let refused = h.last_error.as_deref().is_some_and(|e| e.contains("not a request target"));
        (refused && h.state == BackendState::Unhealthy).then_some(h)
    })
    .await;
    assert!(health.last_error.is_some());
    assert!(!String::from_utf8_lossy(&seen.lock().unwrap()).contains("pwned"), "the smuggled request was sent");
    recorder.abort();
}

#[tokio::test]
async fn source_ranges_are_networks_in_their_ipv4_form() {
    let dir = tempfile::tempdir().unwrap();
    let (_emu, c, _log) = emulator(&dir.path().join("fc.db"), 14).await;
    let bs = backends(&c, 14, &["b1"]).await;
    let req = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![tcp(18001, bs.port)],
        backends: bs.instances.clone(),
        source_ranges: vec!["::ffff:127.79.14.5/128".into(), "127.79.14.200/25".into()],
        ..Default::default()
    };
    let lb = create_lb(&c, req.clone()).await;
    assert_eq!(lb.source_ranges, ["127.79.14.5/32", "127.79.14.128/25"]);
    let to = SocketAddr::new(lb.address.unwrap(), 18001);
    // The IPv4-mapped range lets its client in (stored as written, it would match no one).
    eventually(FOLLOW, "the client of the mapped range to be let in", || async {
        hello_from(Some(ip("127.79.14.5")), to).await.map(drop)
    })
    .await;
    assert!(hello_from(Some(ip("127.79.14.6")), to).await.is_none(), "a client outside the ranges got in");
    // A list without an IPv4 range would refuse every client of an IPv4 address: it is refused instead.
    let only_v6 = CreateLoadBalancerRequest { name: "v6".into(), source_ranges: vec!["::/0".into()], ..req };
    let err = c.create_load_balancer(&only_v6, None).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    assert!(err.to_string().contains("no IPv4 range"), "{err}");
}

/// The API stays up whatever the data plane suffers: an emulator with 600 open files (so the flood below is more
/// than it could hold: 700 TCP connections take two files each), a flood of connections and UDP clients to one
/// load balancer held open, and API calls all the while. The data plane refuses past its own budget of files;
/// the API keeps its share. (How fast it answers meanwhile is measured in `make bench`.)
#[tokio::test]
async fn a_flood_of_connections_and_udp_clients_never_starves_the_api() {
    // This process holds the flood: 1,000 sockets and more.
    fakecloud_emulator::listener::raise_fd_limit();
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--serve-load-balancers",
        "--loopback-instances",
        "--public-pool",
        "127.77.15.0/24",
        "--lb-provision-delay",
        "0s",
    ];
    let (emu, url, _log) = spawn_emulator_with(&dir.path().join("fc.db"), &flags, Some(600)).await;
    let c = Client::new(&url, USER).unwrap().with_timeout(HANG).unwrap();
    let bs = backends(&c, 15, &["b1"]).await;
    let _udp_echo = udp_echo("b1", tokio::net::UdpSocket::bind((ip("127.78.15.1"), bs.port)).await.unwrap());
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "web".into(),
            listeners: vec![
                tcp(18001, bs.port),
                Listener { protocol: Protocol::Udp, port: 18053, backend_port: bs.port },
            ],
            backends: bs.instances.clone(),
            ..Default::default()
        },
    )
    .await;
    let (tcp_to, udp_to) = (SocketAddr::new(lb.address.unwrap(), 18001), SocketAddr::new(lb.address.unwrap(), 18053));
    answers(tcp_to, &["b1"]).await;

    let flood = tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..700 {
            if let Ok(Ok(s)) = tokio::time::timeout(TRY, TcpStream::connect(tcp_to)).await {
                held.push(s);
            }
        }
        let mut clients = Vec::new();
        for k in 0..300u32 {
            let from = ip(&format!("127.79.15.{}", 1 + k % 250));
            let Ok(s) = tokio::net::UdpSocket::bind((from, 0)).await else { continue };
            let _ = s.send_to(b"flood", udp_to).await;
            clients.push(s);
        }
        (held, clients)
    });
    // API calls, one after another, while the flood comes in and while it is held.
    let mut slowest = Duration::ZERO;
    let mut calls = 0;
    let mut n = 0;
    while !flood.is_finished() || n < 20 {
        let started = std::time::Instant::now();
        c.list_instances(&Default::default()).await.expect("the API answers during the flood");
        c.get_load_balancer(&lb.id).await.expect("the API answers during the flood");
        let made = CreateInstanceRequest { name: format!("during-{calls}"), ..Default::default() };
        c.create_instance(&made, None).await.expect("the API writes during the flood");
        slowest = slowest.max(started.elapsed() / 3);
        calls += 3;
        if flood.is_finished() {
            n += 1;
        }
    }
    let (held, clients) = flood.await.unwrap();
    eprintln!(
        "{calls} API calls during a flood of {} connections and {} UDP clients; the slowest took {slowest:?}",
        held.len(),
        clients.len()
    );
    let text = metrics(&c).await;
    assert!(text.contains("outcome=\"refused_files_full\""), "the data plane refused past its budget: {text}");
    let dp = c.get_load_balancer(&lb.id).await.unwrap().data_plane.unwrap();
    assert!(dp.reasons.iter().any(|r| r.contains("--lb-max-files")), "{dp:?}");
    let open = open_files(emu.id().unwrap());
    assert!(open < 600, "the emulator holds {open} files, at its limit");
    drop((held, clients));
    // Once the flood is gone, the load balancer carries traffic again.
    answers(tcp_to, &["b1"]).await;
}

/// What one case of the hostile property test does: a load balancer as a careless or hostile user would
/// configure it, backends with whatever addresses, and clients that connect, trickle, reset and flood.
#[derive(Debug, Clone)]
struct Hostile {
    backends: Vec<&'static str>,
    listeners: Vec<(Protocol, u16, u16)>,
    health_path: Option<&'static str>,
    source_ranges: Vec<&'static str>,
    clients: Vec<Behaviour>,
}

#[derive(Debug, Clone)]
enum Behaviour {
    ConnectAndClose,
    Trickle(u8),
    Reset,
    HalfClose,
    Flood(u8),
    UdpBurst(u8),
}

fn hostile() -> impl proptest::strategy::Strategy<Value = Hostile> {
    use proptest::prelude::*;
    let backend = prop::sample::select(vec![
        "127.78.16.1",
        "127.78.16.2",
        "::ffff:127.78.16.1",
        "127.77.16.1",
        "::ffff:127.77.16.1",
        "127.77.16.200",
        "0.0.0.0",
        "224.0.0.1",
        "198.51.100.3",
        "10.0.0.77",
        "::1",
    ]);
    let listener = (prop::sample::select(vec![Protocol::Tcp, Protocol::Udp]), 18101u16..18104, 18101u16..18104);
    let path = prop::sample::select(vec![
        "/healthz",
        "/",
        "/x HTTP/1.1\r\nHost: internal\r\n\r\nSET pwned 1\r\n",
        "/a b",
        "healthz",
        "/%0d%0aX: y",
        "",
    ]);
    let range = prop::sample::select(vec![
        "127.79.16.0/24",
        "127.0.0.1/8",
        "::ffff:127.79.16.7/128",
        "::/0",
        "0.0.0.0/0",
        "10.0.0.0/33",
        "not a range",
        "127.79.16.300/24",
    ]);
    let behaviour = prop_oneof![
        Just(Behaviour::ConnectAndClose),
        (1u8..5).prop_map(Behaviour::Trickle),
        Just(Behaviour::Reset),
        Just(Behaviour::HalfClose),
        (1u8..40).prop_map(Behaviour::Flood),
        (1u8..40).prop_map(Behaviour::UdpBurst),
    ];
    (
        prop::collection::vec(backend, 0..4),
        prop::collection::vec(listener, 1..4),
        prop::option::of(path),
        prop::collection::vec(range, 0..3),
        prop::collection::vec(behaviour, 1..6),
    )
        .prop_map(|(backends, listeners, health_path, source_ranges, clients)| Hostile {
            backends,
            listeners,
            health_path,
            source_ranges,
            clients,
        })
}

/// Carry out `h` against the emulator at `c` (its load balancers in 127.77.16.0/24); what the API answered
/// that it must not have (a 5xx, no answer) is the error. Whether the clients met a served load balancer.
async fn hostile_case(c: &Client, admin: &Client, h: &Hostile, ports: (u16, u16)) -> Result<bool, String> {
    let api = |what: &str, e: fakecloud_api::ClientError| match e.status() {
        Some(s) if s < 500 => Ok(()),
        _ => Err(format!("{what}: {e}")),
    };
    let mut instances = Vec::new();
    for (k, addr) in h.backends.iter().enumerate() {
        let req = CreateInstanceRequest { name: format!("b{k}"), private_ip: Some(ip(addr)), ..Default::default() };
        match c.create_instance(&req, None).await {
            Ok(i) => instances.push(i.id),
            Err(e) => api(&format!("instance at {addr}"), e)?,
        }
    }
    let req = CreateLoadBalancerRequest {
        name: "hostile".into(),
        listeners: h
            .listeners
            .iter()
            .map(|(protocol, port, backend_port)| Listener {
                protocol: *protocol,
                port: *port,
                backend_port: *backend_port,
            })
            .collect(),
        backends: instances,
        health_check: h.health_path.map(|p| HealthCheck {
            protocol: HealthCheckProtocol::Http,
            port: ports.1,
            path: Some(p.to_string()),
            interval_seconds: 1,
        }),
        source_ranges: h.source_ranges.iter().map(|r| r.to_string()).collect(),
        ..Default::default()
    };
    let lb = match c.create_load_balancer(&req, None).await {
        Ok(lb) => Some(lb),
        Err(e) => {
            api("load balancer", e)?;
            None
        }
    };
    let mut met = false;
    if let Some(lb) = &lb {
        // Its listeners are served once the data plane has followed the create: within a second, or later on a
        // busy machine, so look until they are (or a hang) rather than at a fixed moment.
        let started = std::time::Instant::now();
        let served = loop {
            let served = c.get_load_balancer(&lb.id).await.map_err(|e| format!("get: {e}"))?;
            if (served.address.is_some() && !served.listener_status.is_empty()) || started.elapsed() > HANG {
                break served;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if let Some(vip) = served.address {
            met = !served.listener_status.is_empty();
            for b in &h.clients {
                let (_, port, _) = h.listeners[0];
                behave(b, SocketAddr::new(vip, port)).await;
            }
        }
        c.get_load_balancer(&lb.id).await.map_err(|e| format!("get after the clients: {e}"))?;
    }
    c.list_load_balancers(&Default::default()).await.map_err(|e| format!("list: {e}"))?;
    admin.reset().await.map_err(|e| format!("reset: {e}"))?;
    Ok(met)
}

async fn behave(b: &Behaviour, to: SocketAddr) {
    let from = ip("127.79.16.7");
    let connect = || async {
        let socket = TcpSocket::new_v4().ok()?;
        socket.bind(SocketAddr::new(from, 0)).ok()?;
        tokio::time::timeout(TRY, socket.connect(to)).await.ok()?.ok()
    };
    match b {
        Behaviour::ConnectAndClose => drop(connect().await),
        Behaviour::Trickle(n) => {
            if let Some(mut s) = connect().await {
                for _ in 0..*n {
                    if s.write_all(b"x").await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            }
        }
        Behaviour::Reset => {
            if let Some(s) = connect().await {
                let _ = s.set_zero_linger();
            }
        }
        Behaviour::HalfClose => {
            if let Some(mut s) = connect().await {
                let _ = s.shutdown().await;
                let mut buf = [0u8; 64];
                let _ = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await;
            }
        }
        Behaviour::Flood(n) => {
            let mut held = Vec::new();
            for _ in 0..*n {
                held.extend(connect().await);
            }
        }
        Behaviour::UdpBurst(n) => {
            for k in 0..*n {
                if let Ok(s) = tokio::net::UdpSocket::bind((ip(&format!("127.79.16.{}", 10 + k)), 0)).await {
                    let _ = s.send_to(b"burst", to).await;
                }
            }
        }
    }
}

/// Load balancers, backends and clients as a careless CI job or an attacker would make them: whatever they do,
/// the emulator answers every API call with no 5xx, never panics, and stays up (a bounded number of cases).
#[test]
fn hostile_load_balancers_and_clients_never_take_the_emulator_down() {
    use proptest::test_runner::{Config, TestError, TestRunner};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut emu, c, log) = rt.block_on(emulator(&dir.path().join("fc.db"), 16));
    let admin = Client::new(c.endpoint(), ADMIN).unwrap();
    // Backends that answer on 127.78.16.1-2, for the cases that reach them.
    let ports = rt.block_on(free_ports(ip("127.78.16.1")));
    let _servers = rt.block_on(async {
        let mut servers = Vec::new();
        for (name, addr) in [("b1", "127.78.16.1"), ("b2", "127.78.16.2")] {
            servers.push(Backend::start(name, ip(addr), ports.0, ports.1).await);
        }
        servers
    });
    let config = Config { cases: 24, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(
        config,
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let served = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&hostile(), |h| {
        let met =
            rt.block_on(hostile_case(&c, &admin, &h, ports)).map_err(proptest::test_runner::TestCaseError::fail)?;
        served.fetch_add(u32::from(met), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    });
    if let Err(TestError::Fail(why, case)) = result {
        panic!("{why}\ncase: {case:?}");
    }
    // The generator is only useful if clients meet served load balancers in a fair share of the cases.
    let served = served.into_inner();
    assert!(served >= 6, "clients met a served load balancer in only {served} of 24 cases");
    assert!(emu.try_wait().unwrap().is_none(), "the emulator exited");
    let log = log.lock().unwrap().clone();
    assert!(!log.contains("panicked"), "the emulator panicked: {log}");
}

/// An EC2 call to the emulator at `c`'s endpoint, signed with its user's key: the body of its answer.
async fn ec2_call(c: &Client, form: &str) -> String {
    let keys = fakecloud_emulator::aws::credentials::Keys::of(&fakecloud_emulator::auth::Tokens {
        user: USER.into(),
        admin: String::new(),
    });
    let url = c.endpoint().trim_end_matches('/').to_string();
    let signer =
        (keys.access_key_id.as_str(), keys.secret_access_key.as_str(), "local-1", std::time::SystemTime::now());
    let resp =
        crate::aws::signed(&url, signer, "POST", "", &format!("{form}&Version=2016-11-15")).send().await.unwrap();
    let (status, body) = (resp.status(), resp.text().await.unwrap());
    assert!(status.is_success(), "{form}: {body}");
    body
}

/// A load balancer attached to a security group admits whom the group's rules admit to each listener's port,
/// instead of its source ranges: no rule, no client; a rule for its network, the client; a rule for another
/// port, or ICMP, not. Each rule change reaches the running listener as an update of source ranges does.
#[tokio::test]
async fn a_load_balancers_security_groups_decide_who_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fc.db");
    let (_emu, c, _log) = emulator(&db, 30).await;
    let bs = backends(&c, 30, &["b1"]).await;
    let lb = create_lb(
        &c,
        CreateLoadBalancerRequest {
            name: "guarded".into(),
            listeners: vec![tcp(18030, bs.port)],
            backends: bs.instances.clone(),
            ..Default::default()
        },
    )
    .await;
    let to = SocketAddr::new(lb.address.unwrap(), 18030);
    let (inside, outside) = (Some(ip("127.79.30.10")), Some(ip("127.79.30.200")));
    // No groups: its source ranges (none) decide, and every client gets in.
    eventually(FOLLOW, "a client to get an answer", || async { hello_from(outside, to).await.map(drop) }).await;

    let xml = ec2_call(&c, "Action=CreateSecurityGroup&GroupName=k8s-elb-guarded&GroupDescription=guard").await;
    let group = crate::aws::all(&xml, "groupId").concat();
    // As the classic ELB and ELBv2 faces attach a load balancer's groups, in a transaction of the database.
    let store =
        fakecloud_emulator::db::Db::open(&fakecloud_emulator::config::DbLocation::File(db.clone())).await.unwrap();
    let mut tx = store.write().await.unwrap();
    fakecloud_emulator::store::security_groups::attach_load_balancer(&mut tx, &lb.id, std::slice::from_ref(&group))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    store.close().await;
    refuses(to).await;

    // A rule for another port and ICMP's path-MTU rule admit no one to this listener.
    let permission = |n: u8, protocol: &str, from: u16, to: u16, cidr: &str| {
        format!(
            "&IpPermissions.{n}.IpProtocol={protocol}&IpPermissions.{n}.FromPort={from}&IpPermissions.{n}.ToPort={to}\
             &IpPermissions.{n}.IpRanges.1.CidrIp={cidr}"
        )
    };
    let other = format!(
        "Action=AuthorizeSecurityGroupIngress&GroupId={group}{}{}",
        permission(1, "tcp", 18031, 18040, "127.79.30.0%2F24"),
        permission(2, "icmp", 3, 4, "0.0.0.0%2F0")
    );
    ec2_call(&c, &other).await;
    let rule = format!("GroupId={group}{}", permission(1, "tcp", 18000, 18030, "127.79.30.0%2F25"));
    ec2_call(&c, &format!("Action=AuthorizeSecurityGroupIngress&{rule}")).await;
    eventually(FOLLOW, "a client in the rule's network to be let in", || async {
        hello_from(inside, to).await.map(drop)
    })
    .await;
    assert!(hello_from(outside, to).await.is_none(), "a client outside the group's rules got an answer");
    assert!(metrics(&c).await.contains("outcome=\"refused_source\""));

    // Revoked, the listener follows: no one again.
    ec2_call(&c, &format!("Action=RevokeSecurityGroupIngress&{rule}")).await;
    eventually(FOLLOW, "the revoked client to be refused", || async {
        hello_from(inside, to).await.is_none().then_some(())
    })
    .await;
}

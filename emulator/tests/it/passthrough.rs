//! Passthrough load balancers against a real kernel: the emulator process in a network namespace of the
//! test's own (as in its container on kind, holding the public pool and forwarding), and a "node" in another,
//! joined by a veth pair. The node has the VIP on its loopback, standing in for kube-proxy, which serves a
//! LoadBalancer's address on every node; its listener on the VIP says which address and port a connection
//! arrived at, and so whether the packets came unchanged (passthrough) or from a proxy (to its NodePort).
//! Without the privilege to make namespaces (not root) it says why and checks nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::Duration;

use fakecloud_api::{
    Client, CreateInstanceRequest, CreateLoadBalancerRequest, Forwarding, HealthCheck, HealthCheckProtocol, IpMode,
    Listener, ListenerState, Protocol, Scheme, UpdateLoadBalancerRequest,
};
use futures::TryStreamExt;
use rtnetlink::{LinkUnspec, LinkVeth};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{HANG, USER, eventually, spawn_emulator_with};
use fakecloud_emulator::dataplane::passthrough;
use rtnetlink::packet_route::rule::RuleAttribute;

const LB_SIDE: Ipv4Addr = Ipv4Addr::new(10, 91, 0, 1);
const NODE: Ipv4Addr = Ipv4Addr::new(10, 91, 0, 2);
const POOL: &str = "198.51.100.0/24";
const NODE_PORT: u16 = 30080;
const HEALTH_PORT: u16 = 10256;

/// Bring `name` up (with `addr`/24 when given) in this thread's namespace.
async fn up(handle: &rtnetlink::Handle, name: &str, addr: Option<Ipv4Addr>) {
    let link = handle.link().get().match_name(name).execute().try_next().await.unwrap().unwrap();
    let index = link.header.index;
    if let Some(addr) = addr {
        handle.address().add(index, IpAddr::V4(addr), 24).execute().await.unwrap();
    }
    handle.link().set(LinkUnspec::new_with_index(index).up().build()).execute().await.unwrap();
}

/// The node: in a namespace of its own, `node0` at [`NODE`], the VIP on lo (what kube-proxy serves), one
/// server on every address that answers with the address and port the connection arrived at, and kube-proxy's
/// health port. Hands back its namespace, then serves until `stop` says so.
fn node(vip: Ipv4Addr, ns: mpsc::Sender<OwnedFd>, ready: mpsc::Receiver<()>, stop: mpsc::Receiver<()>) {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    ns.send(std::fs::File::open("/proc/thread-self/ns/net").unwrap().into()).unwrap();
    ready.recv().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let (conn, handle, _) = rtnetlink::new_connection().unwrap();
        tokio::spawn(conn);
        up(&handle, "lo", None).await;
        up(&handle, "node0", Some(NODE)).await;
        let lo = handle.link().get().match_name("lo").execute().try_next().await.unwrap().unwrap().header.index;
        handle.address().add(lo, IpAddr::V4(vip), 32).execute().await.unwrap();
        let mut servers = Vec::new();
        for at in
            [SocketAddr::from((vip, 80)), SocketAddr::from((NODE, NODE_PORT)), SocketAddr::from((NODE, HEALTH_PORT))]
        {
            let l = TcpListener::bind(at).await.unwrap();
            servers.push(tokio::spawn(async move {
                while let Ok((mut s, peer)) = l.accept().await {
                    let local = s.local_addr().unwrap();
                    let _ = s.write_all(format!("{local} from {}", peer.ip()).as_bytes()).await;
                }
            }));
        }
        tokio::task::spawn_blocking(move || stop.recv()).await.unwrap().ok();
    });
}

/// What the node says about a connection to `to`, or why there is none.
async fn ask(to: SocketAddr) -> Result<String, String> {
    let connect = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(to)).await;
    let mut s = connect.map_err(|_| "timed out".to_string())?.map_err(|e| e.to_string())?;
    let mut got = String::new();
    tokio::time::timeout(HANG, s.read_to_string(&mut got)).await.unwrap().map_err(|e| e.to_string())?;
    Ok(got)
}

/// Wait until what `to` answers is as `want` says.
async fn until(to: SocketAddr, want: impl Fn(&Result<String, String>) -> bool, what: &str) {
    eventually(HANG, what, || async { want(&ask(to).await).then_some(()) }).await;
}

async fn check_in_this_namespace(node_ns: OwnedFd, ready: mpsc::Sender<()>) {
    let (conn, handle, _) = rtnetlink::new_connection().unwrap();
    tokio::spawn(conn);
    up(&handle, "lo", None).await;
    handle.link().add(LinkVeth::new("lb0", "node0").build()).execute().await.unwrap();
    let peer = LinkUnspec::new_with_name("node0").setns_by_fd(node_ns.as_raw_fd()).build();
    handle.link().set(peer).execute().await.unwrap();
    up(&handle, "lb0", Some(LB_SIDE)).await;
    ready.send(()).unwrap();
    // As `docker run --sysctl net.ipv4.ip_forward=1` sets it in the emulator's container on kind.
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").unwrap();

    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--serve-load-balancers",
        "--hold-public-pool",
        "--public-pool",
        POOL,
        "--adopt-networks",
        "10.91.0.0/24",
        "--lb-provision-delay",
        "0s",
    ];
    let (_emu, url, log) = spawn_emulator_with(&dir.path().join("fc.db"), &flags, None).await;
    let c = Client::new(&url, USER).unwrap();
    let req = CreateInstanceRequest { name: "node".into(), private_ip: Some(IpAddr::V4(NODE)), ..Default::default() };
    let instance = c.create_instance(&req, None).await.unwrap().id;
    let check = HealthCheck { protocol: HealthCheckProtocol::Tcp, port: HEALTH_PORT, path: None, interval_seconds: 1 };
    let req = CreateLoadBalancerRequest {
        name: "pass".into(),
        scheme: Scheme::InternetFacing,
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: NODE_PORT }],
        backends: vec![instance],
        health_check: Some(check.clone()),
        forwarding: Forwarding::Passthrough,
        requested_ip: Some("198.51.100.7".parse().unwrap()),
        ..Default::default()
    };
    let lb = c.create_load_balancer(&req, None).await.unwrap();
    let vip = SocketAddr::from((Ipv4Addr::new(198, 51, 100, 7), 80));

    // Unchanged: the node's server on the VIP itself answers, and sees this side's own address as the client.
    until(vip, Result::is_ok, "the VIP to be routed to the node").await;
    assert_eq!(ask(vip).await, Ok(format!("{vip} from {LB_SIDE}")), "log: {}", log.lock().unwrap());
    let shown = c.get_load_balancer(&lb.id).await.unwrap();
    assert_eq!(shown.ip_mode, IpMode::Vip);
    assert_eq!(shown.listener_status[0].state, ListenerState::Listening, "{:?}", shown.listener_status);
    // Another port of the address is not routed: it stays this host's, where nothing listens.
    let other = ask(SocketAddr::from((Ipv4Addr::new(198, 51, 100, 7), 81))).await;
    assert!(other.is_err_and(|e| e.contains("refused")), "port 81 is not a listener's");

    // No healthy node: the address leads nowhere, at once.
    let broken = UpdateLoadBalancerRequest {
        health_check: Some(HealthCheck { port: HEALTH_PORT + 1, ..check.clone() }),
        ..Default::default()
    };
    c.update_load_balancer(&lb.id, &broken).await.unwrap();
    let unreachable = |got: &Result<String, String>| got.as_ref().is_err_and(|e| e.contains("No route to host"));
    until(vip, unreachable, "the VIP to lead nowhere (no route to host) once its node is unhealthy").await;

    // In place to a proxy: the same address, now a connection of the emulator's own to the NodePort.
    let to_proxy = UpdateLoadBalancerRequest {
        health_check: Some(check),
        forwarding: Some(Forwarding::Proxy),
        ..Default::default()
    };
    let updated = c.update_load_balancer(&lb.id, &to_proxy).await.unwrap();
    assert_eq!((updated.address, updated.ip_mode), (lb.address, IpMode::Proxy));
    let proxied = format!("{}:{NODE_PORT} from {LB_SIDE}", NODE);
    until(vip, |got| got.as_deref() == Ok(proxied.as_str()), "the proxy to forward to the NodePort").await;
    // And back: the kernel's rules are set again.
    let back = UpdateLoadBalancerRequest { forwarding: Some(Forwarding::Passthrough), ..Default::default() };
    c.update_load_balancer(&lb.id, &back).await.unwrap();
    let direct = format!("{vip} from {LB_SIDE}");
    until(vip, |got| got.as_deref() == Ok(direct.as_str()), "passthrough again").await;

    // Deleted: no rule of it is left.
    c.delete_load_balancer(&lb.id).await.unwrap();
    eventually(HANG, "its rules to go", || async {
        let rules: Vec<_> = handle.rule().get(rtnetlink::IpVersion::V4).execute().try_collect().await.unwrap();
        let ours = rules.iter().filter(|r| {
            r.attributes.iter().any(|a| matches!(a, RuleAttribute::Priority(p) if *p == passthrough::RULE_PRIORITY))
        });
        (ours.count() == 0).then_some(())
    })
    .await;
}

#[test]
fn a_passthrough_load_balancer_routes_packets_unchanged_to_its_healthy_node() {
    let (ns_tx, ns_rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            eprintln!("SKIPPED: cannot create a network namespace ({e}); this test needs root");
            return;
        }
        let vip = Ipv4Addr::new(198, 51, 100, 7);
        let node = std::thread::spawn(move || node(vip, ns_tx, ready_rx, stop_rx));
        let node_ns = ns_rx.recv().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check_in_this_namespace(node_ns, ready_tx));
        drop(stop_tx);
        node.join().unwrap();
    })
    .join()
    .unwrap();
}

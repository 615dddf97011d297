//! `cargo bench -p fakecloud-emulator --bench api -- --dataplane`: what the load balancer data plane adds, on
//! loopback. An echo server is the backend (an instance at 127.88.0.1, `--loopback-instances`); a load balancer
//! on the pool 127.89.0.0/24 forwards to it. Each row is measured twice, straight to the backend and through the
//! load balancer's address, in one run:
//! - round trips of 64 bytes on one kept-alive connection (sequential): the latency the proxy adds per request;
//! - new connections, 32 at a time (connect, one byte each way, close): connections per second.
//!
//! Then what a flood of the data plane does to the API: sequential API calls (get-instance) on a quiet
//! emulator, then while [`FLOOD_TCP`] connections and [`FLOOD_UDP`] UDP clients are held open to the load
//! balancer, more than its budget of files (`--lb-max-files` [`FLOOD_FILES`]) takes, and new connections keep
//! coming (each refused at once).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use fakecloud_api::{CreateInstanceRequest, CreateLoadBalancerRequest, Listener, LoadBalancerState, Protocol};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Stats, print_table, run, start_emulator, summarize};

const BACKEND: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 88, 0, 1));
const ROUND_TRIPS: usize = 20_000;
const CONNECTIONS: usize = 10_000;
const PAYLOAD: [u8; 64] = [b'x'; 64];
/// The data plane's budget of files in the flood rows, and the flood: more connections than it holds.
const FLOOD_FILES: &str = "2000";
const FLOOD_TCP: usize = 3000;
const FLOOD_UDP: usize = 1000;
const API_CALLS: usize = 2000;

/// Echo everything back, on every connection.
async fn echo_server() -> u16 {
    let listener = TcpListener::bind((BACKEND, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// `ROUND_TRIPS` sequential round trips on one connection to `to`.
async fn round_trips(to: SocketAddr) -> Stats {
    let mut s = TcpStream::connect(to).await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = [0u8; 64];
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    let wall = Instant::now();
    for _ in 0..ROUND_TRIPS {
        let t = Instant::now();
        s.write_all(&PAYLOAD).await.unwrap();
        s.read_exact(&mut buf).await.unwrap();
        samples.push(t.elapsed());
    }
    summarize(samples, wall.elapsed())
}

/// `CONNECTIONS` new connections to `to`, 32 at a time, each exchanging one byte.
async fn new_connections(to: SocketAddr) -> Stats {
    let (samples, wall) = run(0..CONNECTIONS, 32, |_| async move {
        let mut s = TcpStream::connect(to).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        s.read_exact(&mut one).await.unwrap();
    })
    .await;
    summarize(samples, wall)
}

/// `API_CALLS` sequential get-instance calls of `id`.
async fn api_calls(c: &fakecloud_api::Client, id: &str) -> Stats {
    let (samples, wall) = run(0..API_CALLS, 1, |_| async move {
        c.get_instance(id).await.unwrap();
    })
    .await;
    summarize(samples, wall)
}

/// Hold `FLOOD_TCP` connections and `FLOOD_UDP` UDP clients open to `tcp` and `udp`, then keep opening more
/// (each refused: the budget is spent) until the returned sender is dropped; resolves once all are open.
async fn flood(tcp: SocketAddr, udp: SocketAddr) -> tokio::sync::oneshot::Sender<()> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, opened) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut held = Vec::with_capacity(FLOOD_TCP);
        for _ in 0..FLOOD_TCP {
            if let Ok(s) = TcpStream::connect(tcp).await {
                held.push(s);
            }
        }
        let mut clients = Vec::with_capacity(FLOOD_UDP);
        for _ in 0..FLOOD_UDP {
            let s = tokio::net::UdpSocket::bind((Ipv4Addr::new(127, 90, 0, 1), 0)).await.unwrap();
            let _ = s.send_to(b"flood", udp).await;
            clients.push(s);
        }
        let _ = ready.send(held.len());
        let churn = async {
            loop {
                if let Ok(s) = TcpStream::connect(tcp).await {
                    drop(s);
                }
            }
        };
        tokio::select! {
            _ = stopped => {}
            () = churn => {}
        }
    });
    let held = opened.await.unwrap_or(0);
    println!("flood: {held} TCP connections and {FLOOD_UDP} UDP clients held open, and new connections coming on");
    stop
}

pub async fn run_bench(dir: &Path) {
    fakecloud_emulator::listener::raise_fd_limit();
    let port = echo_server().await;
    let extra = [
        "--serve-load-balancers",
        "--loopback-instances",
        "--public-pool",
        "127.89.0.0/24",
        "--lb-max-files",
        FLOOD_FILES,
    ];
    let (child, c) = start_emulator(dir, &extra).await;
    let backend = c
        .create_instance(
            &CreateInstanceRequest { name: "backend".into(), private_ip: Some(BACKEND), ..Default::default() },
            None,
        )
        .await
        .unwrap();
    let lb = CreateLoadBalancerRequest {
        name: "bench".into(),
        listeners: vec![
            Listener { protocol: Protocol::Tcp, port: 80, backend_port: port },
            Listener { protocol: Protocol::Udp, port: 53, backend_port: port },
        ],
        backends: vec![backend.id.clone()],
        ..Default::default()
    };
    let lb = c.create_load_balancer(&lb, None).await.unwrap();
    let vip = loop {
        let now = c.get_load_balancer(&lb.id).await.unwrap();
        if let (LoadBalancerState::Active, Some(addr)) = (now.state, now.address) {
            let to = SocketAddr::new(addr, 80);
            if TcpStream::connect(to).await.is_ok() {
                break to;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let direct = SocketAddr::new(BACKEND, port);
    let mut rows = vec![
        ("64-byte round trip, kept-alive, direct", round_trips(direct).await),
        ("64-byte round trip, kept-alive, through the load balancer", round_trips(vip).await),
        ("new connection (32 at a time), direct", new_connections(direct).await),
        ("new connection (32 at a time), through the load balancer", new_connections(vip).await),
    ];
    rows.push(("API get-instance, data plane quiet", api_calls(&c, &backend.id).await));
    let held = flood(vip, SocketAddr::new(vip.ip(), 53)).await;
    rows.push(("API get-instance, during the flood", api_calls(&c, &backend.id).await));
    drop(held);
    print_table(&rows);
    let added = rows[1].1.p50_ms - rows[0].1.p50_ms;
    println!("\nthe load balancer adds {:.3} ms p50 per kept-alive round trip", added);
    println!("new connections through the load balancer: {:.0}/s", rows[3].1.rps);
    println!(
        "API calls during a flood past the data plane's budget ({FLOOD_FILES} files): p99 {:.3} ms (quiet: {:.3} ms)",
        rows[5].1.p99_ms, rows[4].1.p99_ms
    );
    drop(child);
}

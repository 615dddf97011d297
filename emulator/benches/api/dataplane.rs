//! `cargo bench -p fakecloud-emulator --bench api -- --dataplane`: what the load balancer data plane adds, on
//! loopback. An echo server is the backend (an instance at 127.88.0.1, `--loopback-instances`); a load balancer
//! on the pool 127.89.0.0/24 forwards to it. Each row is measured twice, straight to the backend and through the
//! load balancer's address, in one run:
//! - round trips of 64 bytes on one kept-alive connection (sequential): the latency the proxy adds per request;
//! - new connections, 32 at a time (connect, one byte each way, close): connections per second.

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

pub async fn run_bench(dir: &Path) {
    let port = echo_server().await;
    let extra = ["--serve-load-balancers", "--loopback-instances", "--public-pool", "127.89.0.0/24"];
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
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: port }],
        backends: vec![backend.id],
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
    let rows = vec![
        ("64-byte round trip, kept-alive, direct", round_trips(direct).await),
        ("64-byte round trip, kept-alive, through the load balancer", round_trips(vip).await),
        ("new connection (32 at a time), direct", new_connections(direct).await),
        ("new connection (32 at a time), through the load balancer", new_connections(vip).await),
    ];
    print_table(&rows);
    let added = rows[1].1.p50_ms - rows[0].1.p50_ms;
    println!("\nthe load balancer adds {:.3} ms p50 per kept-alive round trip", added);
    println!("new connections through the load balancer: {:.0}/s", rows[3].1.rps);
    drop(child);
}

//! `serve --hold-public-pool` against a real kernel, in a network namespace of the test's own (a thread
//! unshares its network namespace; it goes when the thread ends): before, no address of the pool can be bound;
//! after, every one can, and a connection to it arrives — as a load balancer's address in the emulator's
//! container on kind. Without the privilege to make a namespace (not root) it says why and checks nothing.
#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};

use fakecloud_emulator::dataplane::pool;
use futures::TryStreamExt;
use rtnetlink::LinkUnspec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn check_in_this_namespace() {
    // A new namespace's loopback is down.
    let (conn, handle, _) = rtnetlink::new_connection().unwrap();
    tokio::spawn(conn);
    let lo = handle.link().get().match_name("lo").execute().try_next().await.unwrap().unwrap().header.index;
    handle.link().set(LinkUnspec::new_with_index(lo).up().build()).execute().await.unwrap();

    let vip = SocketAddr::from((Ipv4Addr::new(198, 51, 100, 77), 8080));
    let before = TcpListener::bind(vip).await;
    assert!(before.is_err(), "an address of the pool is not this host's before the hold");

    let pool = "198.51.100.0/24".parse().unwrap();
    pool::hold(pool).await.unwrap();
    pool::hold(pool).await.expect("holding twice is fine (a restart of the emulator in the same container)");

    let listener = TcpListener::bind(vip).await.expect("every address of the pool can be bound");
    let also = TcpListener::bind((Ipv4Addr::new(198, 51, 100, 254), 8080)).await;
    assert!(also.is_ok(), "the last usable address too: {also:?}");
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        s.write_all(b"hello").await.unwrap();
    });
    let mut client = TcpStream::connect(vip).await.unwrap();
    let mut got = String::new();
    client.read_to_string(&mut got).await.unwrap();
    assert_eq!(got, "hello");
    server.await.unwrap();
}

#[test]
fn holding_the_public_pool_makes_its_addresses_this_hosts() {
    std::thread::spawn(|| {
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            eprintln!("SKIPPED: cannot create a network namespace ({e}); this test needs root");
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check_in_this_namespace());
    })
    .join()
    .unwrap();
}

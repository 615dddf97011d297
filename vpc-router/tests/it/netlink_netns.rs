//! The apply step against a real kernel. It runs in a network namespace of the test's own: a thread
//! unshares its network namespace, and the namespace goes when the thread ends. It uses a dummy
//! interface (a veth pair where the kernel has no dummy driver) with an address of each family as the
//! "node network", so gateways are on-link as on a kind node. It checks that routes appear with the
//! right gateway and our protocol, are replaced and removed, and that other routes are never touched.
//!
//! A second test runs the whole route loop in such a namespace: a real emulator on the namespace's
//! loopback, [`Router::sync_once`] reading its route table, and the host table checked after each step.
//!
//! Without the privilege to make a namespace (not root, no CAP_SYS_ADMIN/CAP_NET_ADMIN) the test says
//! why on stderr and passes without checking anything.

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use fakecloud_api::{
    Client, CreateInstanceRequest, CreateRouteRequest, OutageScope, QuotaName, Service, SetRateLimitRequest,
    StartOutageRequest,
};
use fakecloud_emulator::auth::Tokens;
use fakecloud_emulator::config::{Config, DbLocation, Timings};
use fakecloud_emulator::server::Server;
use fakecloud_vpc_router::Error;
use fakecloud_vpc_router::netlink::Netlink;
use fakecloud_vpc_router::node::NodeInfo;
use fakecloud_vpc_router::router::{Router, Settings};
use fakecloud_vpc_router::routes::{HostRoute, ROUTE_PROTOCOL, WantedRoute};
use futures::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::packet_route::address::AddressHeaderFlags;
use rtnetlink::{LinkDummy, LinkUnspec, LinkVeth, RouteMessageBuilder};

/// Run `f` on a thread of its own in a new network namespace, on a runtime of that thread (the netlink
/// sockets must be opened there). `None`, with the reason printed, when no namespace can be made.
fn in_new_netns<F, Fut>(f: F) -> Option<Fut::Output>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future,
    Fut::Output: Send + 'static,
{
    std::thread::spawn(move || {
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            eprintln!(
                "SKIPPED: cannot create a network namespace ({e}); this test needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
            );
            return None;
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        Some(rt.block_on(f()))
    })
    .join()
    .expect("the namespace thread")
}

fn net(s: &str) -> IpNet {
    s.parse().expect("a CIDR")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP")
}

fn wanted(dest: &str, gw: &str, id: &str) -> WantedRoute {
    WantedRoute { destination: net(dest), gateway: ip(gw), route_id: id.into(), node: format!("node-of-{id}") }
}

/// The node network: an interface with 172.18.0.2/16 and fc00:f853::2/64, up.
async fn node_network(handle: &rtnetlink::Handle) -> &'static str {
    let link = match handle.link().add(LinkDummy::new("node0").up().build()).execute().await {
        Ok(()) => "node0",
        Err(e) => {
            eprintln!("no dummy interfaces in this kernel ({e}); using a veth pair instead");
            handle.link().add(LinkVeth::new("node0", "node0-peer").up().build()).execute().await.expect("a veth pair");
            handle.link().set(LinkUnspec::new_with_name("node0-peer").up().build()).execute().await.expect("peer up");
            "node0"
        }
    };
    let index = handle
        .link()
        .get()
        .match_name(link.to_string())
        .execute()
        .try_next()
        .await
        .expect("the link")
        .expect("the link exists")
        .header
        .index;
    handle.address().add(index, ip("172.18.0.2"), 16).execute().await.expect("the IPv4 address");
    let mut v6 = handle.address().add(index, ip("fc00:f853::2"), 64);
    // No duplicate address detection: the address (and its on-link route) is usable at once.
    v6.message_mut().header.flags = AddressHeaderFlags::Nodad;
    v6.execute().await.expect("the IPv6 address");
    link
}

/// Add a route that is not ours (an operator's static route), through netlink directly.
async fn add_foreign(handle: &rtnetlink::Handle, dest: &str, gw: &str) {
    let d = net(dest);
    let msg = RouteMessageBuilder::<IpAddr>::new()
        .destination_prefix(d.addr(), d.prefix_len())
        .expect("a prefix")
        .gateway(ip(gw))
        .expect("a gateway")
        .build();
    handle.route().add(msg).execute().await.expect("the foreign route");
}

fn find<'a>(routes: &'a [HostRoute], dest: &str) -> Vec<&'a HostRoute> {
    routes.iter().filter(|r| r.destination == net(dest)).collect()
}

#[test]
fn routes_are_added_replaced_and_removed_in_a_real_network_namespace() {
    let ran = in_new_netns(|| async {
        let (conn, handle, _) = rtnetlink::new_connection().expect("a netlink socket");
        tokio::spawn(conn);
        node_network(&handle).await;
        add_foreign(&handle, "10.244.9.0/24", "172.18.0.99").await;
        let router = Netlink::connect().expect("the router's netlink socket");

        // 1. Two nodes' pod CIDRs, one of each family.
        let first = [wanted("10.244.1.0/24", "172.18.0.3", "r-1"), wanted("fd00:10:244:2::/64", "fc00:f853::4", "r-2")];
        let (plan, applied) = router.reconcile(&first).await.expect("reconcile");
        assert_eq!((plan.adds.len(), applied.changed, applied.failed), (2, 2, 0), "{plan:?}");
        let routes = router.main_table_routes().await.expect("the table");
        let v4 = find(&routes, "10.244.1.0/24");
        assert_eq!(v4.len(), 1, "{routes:?}");
        assert_eq!((v4[0].gateway, v4[0].protocol), (Some(ip("172.18.0.3")), ROUTE_PROTOCOL));
        let v6 = find(&routes, "fd00:10:244:2::/64");
        assert_eq!(v6.len(), 1, "{routes:?}");
        assert_eq!((v6[0].gateway, v6[0].protocol), (Some(ip("fc00:f853::4")), ROUTE_PROTOCOL));

        // 2. Steady state: nothing to do.
        let (plan, applied) = router.reconcile(&first).await.expect("reconcile");
        assert!(plan.is_empty() && applied.changed == 0, "{plan:?}");

        // 3. The v4 route moves to another node, the v6 one leaves the cloud, and a route to a CIDR the
        // host already routes another way (the operator's) is a conflict, left alone.
        let second = [wanted("10.244.1.0/24", "172.18.0.5", "r-1"), wanted("10.244.9.0/24", "172.18.0.3", "r-9")];
        let (plan, applied) = router.reconcile(&second).await.expect("reconcile");
        assert_eq!((plan.replaces.len(), plan.deletes.len(), plan.conflicts.len()), (1, 1, 1), "{plan:?}");
        assert_eq!((applied.changed, applied.failed), (2, 0));
        let routes = router.main_table_routes().await.expect("the table");
        let v4 = find(&routes, "10.244.1.0/24");
        assert_eq!(v4.len(), 1, "replaced in place, not added beside: {routes:?}");
        assert_eq!((v4[0].gateway, v4[0].protocol), (Some(ip("172.18.0.5")), ROUTE_PROTOCOL));
        assert!(find(&routes, "fd00:10:244:2::/64").is_empty(), "{routes:?}");
        let theirs = find(&routes, "10.244.9.0/24");
        assert_eq!(theirs.len(), 1);
        assert_eq!(theirs[0].gateway, Some(ip("172.18.0.99")), "the operator's route is untouched");
        assert_ne!(theirs[0].protocol, ROUTE_PROTOCOL);

        // 4. The cloud's table is empty: every route of ours goes; the kernel's and the operator's stay.
        let (_, applied) = router.reconcile(&[]).await.expect("reconcile");
        assert_eq!((applied.changed, applied.failed), (1, 0));
        let routes = router.main_table_routes().await.expect("the table");
        assert!(routes.iter().all(|r| !r.is_ours()), "{routes:?}");
        assert_eq!(find(&routes, "10.244.9.0/24").len(), 1);
        assert_eq!(find(&routes, "172.18.0.0/16").len(), 1, "the node network's own route is kept");
        assert_eq!(find(&routes, "fc00:f853::/64").len(), 1);

        // 5. A route deleted behind the router's back is put back at the next reconcile, and deleting
        // one that is already gone is not an error.
        let (_, applied) = router.reconcile(&first[..1]).await.expect("reconcile");
        assert_eq!(applied.changed, 1);
        let gone = router.main_table_routes().await.expect("the table");
        let ours = find(&gone, "10.244.1.0/24")[0].clone();
        let plan = fakecloud_vpc_router::routes::plan(&[], &gone);
        assert_eq!(router.apply(&plan).await.failed, 0);
        assert_eq!(router.apply(&plan).await.failed, 0, "deleting a route that is gone is no failure");
        assert!(router.main_table_routes().await.expect("the table").iter().all(|r| r != &ours));
        let (_, applied) = router.reconcile(&first[..1]).await.expect("reconcile");
        assert_eq!(applied.changed, 1);
    });
    // The namespace (and all in it) went with its thread; the host's own table never saw these routes.
    if ran.is_some() {
        eprintln!("ran in a network namespace of its own");
    }
}

const USER: &str = "user-token-0123456789abcdef";
const ADMIN: &str = "admin-token-0123456789abcdef";

async fn instance(admin: &Client, name: &str, ip: &str) -> String {
    let req =
        CreateInstanceRequest { name: name.into(), private_ip: Some(ip.parse().expect("an IP")), ..Default::default() };
    admin.create_instance(&req, None).await.expect("an instance").id
}

async fn route(user: &Client, dest: &str, target: &str) -> Result<String, fakecloud_api::ClientError> {
    let req = CreateRouteRequest {
        name: format!("kubernetes-{dest}"),
        destination: dest.into(),
        target_instance: target.into(),
    };
    user.create_route("main", &req, None).await.map(|r| r.id)
}

/// Our routes on the host, as (destination, gateway) text.
async fn ours(netlink: &Netlink) -> Vec<(String, String)> {
    let mut v: Vec<_> = netlink
        .main_table_routes()
        .await
        .expect("the table")
        .into_iter()
        .filter(HostRoute::is_ours)
        .map(|r| (r.destination.to_string(), r.gateway.map(|g| g.to_string()).unwrap_or_default()))
        .collect();
    v.sort();
    v
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn the_route_loop_follows_the_emulators_route_table_onto_the_host() {
    // The router's own log lines, in the test's output (`--nocapture` shows them).
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_ansi(false)
        .with_env_filter("fakecloud_vpc_router=info")
        .try_init();
    in_new_netns(|| async {
        let (conn, handle, _) = rtnetlink::new_connection().expect("a netlink socket");
        tokio::spawn(conn);
        // The emulator listens on this namespace's loopback.
        handle.link().set(LinkUnspec::new_with_name("lo").up().build()).execute().await.expect("lo up");
        node_network(&handle).await;
        let dir = tempfile::tempdir().expect("a temp dir");
        // The node network, where the emulator adopts the nodes' machines (as kind-up's emulator does).
        let adopt_networks = vec![net("172.18.0.0/16"), net("fc00:f853::/64")];
        let cfg = Config { timings: Timings::instant(), adopt_networks, ..Config::default() };
        let tokens = Tokens { user: USER.into(), admin: ADMIN.into() };
        let server = Server::start("127.0.0.1:0", &DbLocation::File(dir.path().join("fc.db")), cfg, tokens)
            .await
            .expect("the emulator");
        let (user, admin) =
            (Client::new(&server.url(), USER).expect("client"), Client::new(&server.url(), ADMIN).expect("client"));

        // Three kind nodes adopted as instances; this host is kind-control-plane.
        let me = instance(&admin, "kind-control-plane", "172.18.0.2").await;
        let w1 = instance(&admin, "kind-worker", "172.18.0.3").await;
        let w2 = instance(&admin, "kind-worker2", "172.18.0.4").await;
        route(&user, "10.244.0.0/24", &me).await.expect("route");
        route(&user, "10.244.1.0/24", &w1).await.expect("route");
        let r2 = route(&user, "10.244.2.0/24", &w2).await.expect("route");
        // Dual-stack: the instance has only an IPv4 private IP, so this one is skipped with a warning.
        route(&user, "fd00:10:244:1::/64", &w1).await.expect("route");

        let node = NodeInfo {
            name: "kind-control-plane".into(),
            pod_cidrs: vec!["10.244.0.0/24".parse().expect("cidr")],
            internal_ips: vec![ip("172.18.0.2")],
            provider_id: None,
        };
        let (_tx, rx) = tokio::sync::watch::channel(Some(node));
        let netlink = Netlink::connect().expect("netlink");
        let settings = Settings { route_table: "main".into(), period: Duration::from_secs(2) };
        let mut router = Router::new(user.clone(), netlink.clone(), rx, settings);

        // Every other node's pod CIDR via its private IP; none for this node's own CIDR.
        let applied = router.sync_once().await.expect("sync");
        assert_eq!(applied.changed, 2);
        assert_eq!(ours(&netlink).await, pairs(&[("10.244.1.0/24", "172.18.0.3"), ("10.244.2.0/24", "172.18.0.4")]));
        assert_eq!(router.sync_once().await.expect("sync").changed, 0, "steady state");

        // A route removed from the cloud leaves the host.
        user.delete_route("main", &r2).await.expect("delete");
        assert_eq!(router.sync_once().await.expect("sync").changed, 1);
        assert_eq!(ours(&netlink).await, pairs(&[("10.244.1.0/24", "172.18.0.3")]));

        // The route quota: kind-worker2's route cannot be created again, so its pods stay unreachable.
        admin.set_quota(QuotaName::RoutesPerRouteTable, 3).await.expect("quota");
        let refused = route(&user, "10.244.2.0/24", &w2).await.expect_err("over the quota");
        assert_eq!(refused.code(), Some("RouteLimitExceeded"));
        router.sync_once().await.expect("sync");
        assert_eq!(ours(&netlink).await, pairs(&[("10.244.1.0/24", "172.18.0.3")]));
        admin.set_quota(QuotaName::RoutesPerRouteTable, 50).await.expect("quota");
        route(&user, "10.244.2.0/24", &w2).await.expect("route");
        router.sync_once().await.expect("sync");
        assert_eq!(ours(&netlink).await, pairs(&[("10.244.1.0/24", "172.18.0.3"), ("10.244.2.0/24", "172.18.0.4")]));

        // Throttled (429) and an outage (503): the Retry-After is passed on, and the routes stay.
        let bucket = SetRateLimitRequest { capacity: 1, refill_per_second: Some(0.01), ..Default::default() };
        admin.set_rate_limit("tight", &bucket).await.expect("rate limit");
        let _ = router.sync_once().await;
        let e = router.sync_once().await.expect_err("throttled");
        assert!(matches!(&e, Error::Cloud(c) if c.status() == Some(429)), "{e}");
        assert!(e.retry_after().is_some_and(|d| d > Duration::from_secs(1)), "{e:?}");
        assert_eq!(ours(&netlink).await.len(), 2, "the routes are kept while throttled");
        admin.delete_rate_limit("tight").await.expect("rate limit");
        let outage = StartOutageRequest {
            scope: OutageScope::Service,
            service: Some(Service::Network),
            zone: None,
            duration_seconds: Some(60.0),
        };
        let outage = admin.start_outage(&outage).await.expect("outage");
        let e = router.sync_once().await.expect_err("the network API is down");
        assert!(e.retry_after().is_some_and(|d| d > Duration::from_secs(30)), "{e:?}");
        assert_eq!(ours(&netlink).await.len(), 2, "the routes are kept through an outage");
        admin.stop_outage(&outage.id).await.expect("outage over");
        router.sync_once().await.expect("sync");

        // A terminated target: its route is a blackhole in the cloud, and the host drops it.
        admin.terminate_instance(&w1).await.expect("terminate");
        router.sync_once().await.expect("sync");
        assert_eq!(ours(&netlink).await, pairs(&[("10.244.2.0/24", "172.18.0.4")]));
        server.shutdown().await;
    });
}

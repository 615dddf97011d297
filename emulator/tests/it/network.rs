//! Route tables and routes, including the route quota under concurrency.
#![allow(clippy::unwrap_used)]

use crate::common::{Emu, wait_state};
use fakecloud_api::{CreateRouteRequest, CreateRouteTableRequest, InstanceState, QuotaName, RouteState, codes};

fn route(dest: &str, target: &str) -> CreateRouteRequest {
    CreateRouteRequest {
        name: format!("r-{}", dest.replace(['/', '.'], "-")),
        destination: dest.into(),
        target_instance: target.into(),
    }
}

#[tokio::test]
async fn routes_are_created_listed_and_deleted() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    let r = emu.user.create_route("main", &route("10.244.1.0/24", &node.id), None).await.unwrap();
    assert_eq!((r.destination.as_str(), r.state), ("10.244.1.0/24", RouteState::Active));
    let v6 = emu.user.create_route("main", &route("fd00:10:244:1::/64", &node.id), None).await.unwrap();
    assert_eq!(v6.destination, "fd00:10:244:1::/64");
    assert_eq!(emu.user.list_routes("main").await.unwrap().items.len(), 2);
    let tables = emu.user.list_route_tables().await.unwrap().items;
    assert_eq!((tables.len(), tables[0].main, tables[0].route_count), (1, true, 2));
    emu.user.delete_route("main", &r.id).await.unwrap();
    let err = emu.user.delete_route("main", &r.id).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(404), Some(codes::ROUTE_NOT_FOUND)));
    assert_eq!(emu.user.list_routes(&tables[0].id).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn bad_routes_are_refused_with_the_reason() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    emu.user.create_route("main", &route("10.244.1.0/24", &node.id), None).await.unwrap();
    let cases = [
        (route("10.244.1.0/24", &node.id), 409, codes::ROUTE_ALREADY_EXISTS),
        (route("10.244.1.7/24", &node.id), 400, codes::INVALID_CIDR),
        (route("10.244.300.0/24", &node.id), 400, codes::INVALID_CIDR),
        (route("10.244.2.0/24", "i-missing"), 400, codes::INVALID_ROUTE_TARGET),
    ];
    for (req, status, code) in cases {
        let err = emu.user.create_route("main", &req, None).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(status), Some(code)), "{req:?}: {err}");
    }
    let err = emu.user.list_routes("rtb-nope").await.unwrap_err();
    assert_eq!(err.code(), Some(codes::ROUTE_TABLE_NOT_FOUND));
}

#[tokio::test]
async fn a_route_to_a_terminated_instance_is_a_blackhole() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    emu.user.create_route("main", &route("10.244.1.0/24", &node.id), None).await.unwrap();
    emu.user.terminate_instance(&node.id).await.unwrap();
    wait_state(&emu.user, &node.id, InstanceState::Terminated).await;
    assert_eq!(emu.user.list_routes("main").await.unwrap().items[0].state, RouteState::Blackhole);
}

#[tokio::test]
async fn the_route_quota_is_atomic_under_concurrency() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    assert_eq!(emu.user.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit, 50, "AWS's default");
    let tasks: Vec<_> = (0..100)
        .map(|n| {
            let c = emu.user.clone();
            let req = route(&format!("10.{}.{}.0/24", 100 + n / 200, n % 200), &node.id);
            tokio::spawn(async move { c.create_route("main", &req, None).await })
        })
        .collect();
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!((e.status(), e.code()), (Some(422), Some(codes::ROUTE_LIMIT_EXCEEDED)), "{e}");
                assert!(e.to_string().contains("routes-per-route-table") && e.to_string().contains("limit 50"), "{e}");
                limited += 1;
            }
        }
    }
    assert_eq!((ok, limited), (50, 50));
    assert_eq!(emu.user.list_routes("main").await.unwrap().items.len(), 50);
    // Raising the quota lets the next one in.
    emu.admin.set_quota(QuotaName::RoutesPerRouteTable, 51).await.unwrap();
    emu.user.create_route("main", &route("10.99.0.0/24", &node.id), None).await.unwrap();
}

#[tokio::test]
async fn route_tables_can_be_added_and_removed_when_empty() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    let t = emu.user.create_route_table(&CreateRouteTableRequest { name: "pods".into() }).await.unwrap();
    assert!(!t.main);
    let err = emu.user.create_route_table(&CreateRouteTableRequest { name: "pods".into() }).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::ROUTE_TABLE_ALREADY_EXISTS));
    let r = emu.user.create_route(&t.id, &route("10.244.0.0/24", &node.id), None).await.unwrap();
    assert_eq!(emu.user.delete_route_table(&t.id).await.unwrap_err().code(), Some(codes::DEPENDENCY_VIOLATION));
    emu.user.delete_route(&t.id, &r.id).await.unwrap();
    emu.user.delete_route_table(&t.id).await.unwrap();
    assert_eq!(emu.user.delete_route_table("main").await.unwrap_err().code(), Some(codes::DEPENDENCY_VIOLATION));
}

/// A table has one route per network, however the network is written: destinations are stored canonically,
/// and a second route to a network names the one it has. IPv4 octets with leading zeros (octal to some
/// parsers, decimal to others) are refused rather than guessed at.
#[tokio::test]
async fn one_route_per_network_whatever_its_spelling() {
    let emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    let first = emu.user.create_route("main", &route("FD00:0::/64", &node.id), None).await.unwrap();
    assert_eq!(first.destination, "fd00::/64");
    for same in ["fd00::/64", "fd00:0::/64", "FD00::/64", "fd00:0000:0000::/64"] {
        let err = emu.user.create_route("main", &route(same, &node.id), None).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(409), Some(codes::ROUTE_ALREADY_EXISTS)), "{same}: {err}");
        assert!(err.to_string().contains(&first.id), "{same}: the existing route is not named in {err}");
    }
    let v4 = emu.user.create_route("main", &route("10.244.1.0/24", &node.id), None).await.unwrap();
    for zeros in ["10.244.01.0/24", "010.244.1.0/24", "10.244.1.00/24"] {
        let err = emu.user.create_route("main", &route(zeros, &node.id), None).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_CIDR)), "{zeros}: {err}");
        assert!(err.to_string().contains("leading zero"), "{zeros}: {err}");
    }
    let listed: Vec<String> = emu.user.list_routes("main").await.unwrap().items.into_iter().map(|r| r.id).collect();
    assert_eq!(listed, [first.id, v4.id]);
}

/// Routes stored as written, by an emulator from before destinations were kept canonical, are rewritten at
/// start, so the one-route-per-network rule holds for them too.
#[tokio::test]
async fn destinations_stored_as_written_are_made_canonical_at_start() {
    let mut emu = Emu::start().await;
    let node = emu.instance("node-1").await;
    let old = emu.user.create_route("main", &route("fd00::/64", &node.id), None).await.unwrap();
    if let Some(s) = emu.server.take() {
        s.shutdown().await;
    }
    let db = sqlx::SqlitePool::connect(&format!("sqlite:{}", emu.db_path().display())).await.unwrap();
    sqlx::query("UPDATE routes SET destination = 'FD00:0::/64'").execute(&db).await.unwrap();
    db.close().await;
    emu.restart().await;
    assert_eq!(emu.user.list_routes("main").await.unwrap().items[0].destination, "fd00::/64");
    let err = emu.user.create_route("main", &route("fd00::/64", &node.id), None).await.unwrap_err();
    assert!(err.to_string().contains(&old.id), "{err}");
}

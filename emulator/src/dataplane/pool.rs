//! `serve --hold-public-pool`: make every address of the public pool this host's own, so that a load balancer's
//! address answers on the network the emulator sits on — on kind, a slice of the kind network, reached by the
//! host and by the pods through the emulator's container. One `local` route in the kernel's local table (as
//! `ip route add local <pool> dev lo`): the kernel then accepts, and answers ARP for, every address of the range,
//! with no interface address per VIP. It lives in the emulator's network namespace, so it goes with the
//! container and comes back with every start. Needs `CAP_NET_ADMIN` there (`docker run --cap-add NET_ADMIN`).

use std::net::Ipv4Addr;

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::RouteMessageBuilder;
use rtnetlink::packet_route::route::{RouteProtocol, RouteScope, RouteType};

/// The kernel's `local` routing table (`RT_TABLE_LOCAL`), where the addresses of this host are.
const LOCAL_TABLE: u32 = 255;

#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error("cannot open a netlink socket to hold the public pool {pool}: {source}")]
    Socket {
        pool: Ipv4Net,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot hold the public pool {pool} (a local route on lo; the emulator needs CAP_NET_ADMIN, e.g. docker run --cap-add NET_ADMIN): {source}"
    )]
    Netlink {
        pool: Ipv4Net,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("cannot hold the public pool {pool}: this network namespace has no loopback interface")]
    NoLoopback { pool: Ipv4Net },
}

/// Add (or keep) the local route for `pool` on `lo`. Idempotent: a route already there is replaced by the same.
pub async fn hold(pool: Ipv4Net) -> Result<(), HoldError> {
    let (conn, handle, _) = rtnetlink::new_connection().map_err(|source| HoldError::Socket { pool, source })?;
    let driver = tokio::spawn(conn);
    let netlink = |source| HoldError::Netlink { pool, source };
    let result = async {
        let lo = handle.link().get().match_name("lo").execute().try_next().await.map_err(netlink)?;
        let lo = lo.ok_or(HoldError::NoLoopback { pool })?.header.index;
        let route = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(pool.network(), pool.prefix_len())
            .output_interface(lo)
            .table_id(LOCAL_TABLE)
            .kind(RouteType::Local)
            .scope(RouteScope::Host)
            .protocol(RouteProtocol::Static)
            .build();
        handle.route().add(route).replace().execute().await.map_err(netlink)
    }
    .await;
    driver.abort();
    result
}

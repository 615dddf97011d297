//! One bound listener of a load balancer, TCP or UDP: its socket's loop runs until the listener is dropped,
//! and its route is swapped in place when the load balancer changes.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use fakecloud_api::Protocol;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::budget::Limit;
use super::context::{AbortOnDrop, Ctx, Route, Shared};
use super::{tcp, udp};

/// A bound listener, TCP or UDP. Dropping it closes the socket and every connection (session) it forwards.
#[derive(Debug)]
pub struct Listener {
    route: watch::Sender<Arc<Route>>,
    _accept: AbortOnDrop,
    /// Its socket's file, in the data plane's budget.
    _file: OwnedSemaphorePermit,
}

impl Listener {
    /// Bind `addr` for `protocol` and start accepting (TCP) or receiving (UDP, see [`udp`]).
    pub async fn start(
        lb: &str,
        protocol: Protocol,
        addr: SocketAddr,
        route: Route,
        shared: Shared,
    ) -> io::Result<Self> {
        let Some(file) = shared.budget.for_listener() else {
            let spent = Limit::Files.describe(&shared.budget.limits);
            return Err(io::Error::other(format!("{spent} is spent")));
        };
        let (tx, rx) = watch::channel(Arc::new(route));
        let Shared { healthy, metrics, faults, budget, caps, status } = shared;
        let ctx = Ctx { metrics, faults, lb: lb.to_string(), protocol, port: addr.port(), budget, caps, status };
        let accept = match protocol {
            Protocol::Tcp => tokio::spawn(tcp::accept_loop(TcpListener::bind(addr).await?, rx, healthy, ctx)),
            Protocol::Udp => tokio::spawn(udp::receive_loop(UdpSocket::bind(addr).await?, rx, healthy, ctx)),
        };
        Ok(Self { route: tx, _accept: AbortOnDrop(accept), _file: file })
    }

    /// Forward new connections as `route` says; established ones are left alone.
    pub fn update(&self, route: Route) {
        self.route.send_if_modified(|r| {
            let changed = **r != route;
            if changed {
                *r = Arc::new(route);
            }
            changed
        });
    }
}

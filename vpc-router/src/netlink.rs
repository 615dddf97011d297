//! The host's main routing table through rtnetlink: read it, and apply a [`Plan`] to it. Only
//! routes with [`ROUTE_PROTOCOL`] are ever changed. Every add, replace and delete carries the
//! protocol. On a delete the kernel also matches on it, so a route that is not ours cannot be removed
//! even if the plan were wrong.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::RouteMessageBuilder;
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteVia,
};

use crate::Error;
use crate::routes::{HostRoute, Plan, ROUTE_PROTOCOL, WantedRoute};

const MAIN_TABLE: u8 = RouteHeader::RT_TABLE_MAIN;
/// `ESRCH`: what the kernel answers when a route to delete is not there.
const ESRCH: i32 = 3;

/// A netlink connection in the network namespace of the thread that opened it.
#[derive(Clone)]
pub struct Netlink {
    handle: rtnetlink::Handle,
}

/// What applying a plan did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    pub changed: usize,
    pub failed: usize,
}

impl Netlink {
    /// Open a route-netlink socket and drive it on the current tokio runtime. The socket belongs to
    /// the calling thread's network namespace at this moment, and stays in it.
    pub fn connect() -> Result<Self, Error> {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(Error::Socket)?;
        tokio::spawn(conn);
        Ok(Self { handle })
    }

    /// Every route of the main table, both families.
    pub async fn main_table_routes(&self) -> Result<Vec<HostRoute>, Error> {
        let mut out = Vec::new();
        let dumps = [RouteMessageBuilder::<Ipv4Addr>::new().build(), RouteMessageBuilder::<Ipv6Addr>::new().build()];
        for dump in dumps {
            let mut routes = self.handle.route().get(dump).execute();
            while let Some(msg) = routes.try_next().await? {
                out.extend(host_route(&msg));
            }
        }
        Ok(out)
    }

    /// Read the table, plan, apply: one reconcile of the host with what the cloud wants.
    pub async fn reconcile(&self, desired: &[WantedRoute]) -> Result<(Plan, Applied), Error> {
        let current = self.main_table_routes().await?;
        let plan = crate::routes::plan(desired, &current);
        let applied = self.apply(&plan).await;
        Ok((plan, applied))
    }

    /// Apply each change of `plan` and log it. A change that fails is logged and counted, and the
    /// others still run: one bad route must not hold back the rest. Conflicts are not changes. The
    /// caller reports them, once rather than every period.
    pub async fn apply(&self, plan: &Plan) -> Applied {
        let mut applied = Applied::default();
        for (want, old) in &plan.replaces {
            match self.add(want, true).await {
                Ok(()) => {
                    applied.changed += 1;
                    tracing::info!(route_id = %want.route_id, node = %want.node,
                        "route changed {} via {}, was via {} (cloud route {}, node {})",
                        want.destination, want.gateway, show(old.gateway), want.route_id, want.node);
                }
                Err(e) => {
                    applied.failed += 1;
                    tracing::warn!(route_id = %want.route_id, error = %e, "cannot change route {} to via {}", want.destination, want.gateway);
                }
            }
        }
        for want in &plan.adds {
            match self.add(want, false).await {
                Ok(()) => {
                    applied.changed += 1;
                    tracing::info!(route_id = %want.route_id, node = %want.node,
                        "route added {} via {} (cloud route {}, node {})",
                        want.destination, want.gateway, want.route_id, want.node);
                }
                Err(e) => {
                    applied.failed += 1;
                    tracing::warn!(route_id = %want.route_id, error = %e, "cannot add route {} via {}", want.destination, want.gateway);
                }
            }
        }
        for old in &plan.deletes {
            match self.delete(old).await {
                Ok(()) => {
                    applied.changed += 1;
                    tracing::info!(
                        "route removed {} via {} (no active cloud route for it any more)",
                        old.destination,
                        show(old.gateway)
                    );
                }
                Err(e) => {
                    applied.failed += 1;
                    tracing::warn!(error = %e, "cannot remove route {} via {}", old.destination, show(old.gateway));
                }
            }
        }
        applied
    }

    async fn add(&self, want: &WantedRoute, replace: bool) -> Result<(), Error> {
        let msg = route_message(want.destination, Some(want.gateway), 0)?;
        let req = self.handle.route().add(msg);
        // Replace swaps the gateway in one step, so traffic is never without a route. A plain add is
        // exclusive, so a route that appeared since the table was read is not overwritten.
        Ok(if replace { req.replace() } else { req }.execute().await?)
    }

    async fn delete(&self, old: &HostRoute) -> Result<(), Error> {
        let msg = route_message(old.destination, old.gateway, old.metric)?;
        match self.handle.route().del(msg).execute().await {
            // Already gone: the goal is reached.
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -ESRCH => Ok(()),
            r => Ok(r?),
        }
    }
}

/// A message for one route of ours in the main table. `metric` 0 means "none": the kernel's default
/// (0 for IPv4, 1024 for IPv6).
fn route_message(destination: IpNet, gateway: Option<IpAddr>, metric: u32) -> Result<RouteMessage, Error> {
    let mut msg = match (destination, gateway) {
        (IpNet::V4(d), None) => {
            RouteMessageBuilder::<Ipv4Addr>::new().destination_prefix(d.addr(), d.prefix_len()).build()
        }
        (IpNet::V4(d), Some(IpAddr::V4(g))) => {
            RouteMessageBuilder::<Ipv4Addr>::new().destination_prefix(d.addr(), d.prefix_len()).gateway(g).build()
        }
        (IpNet::V6(d), None) => {
            RouteMessageBuilder::<Ipv6Addr>::new().destination_prefix(d.addr(), d.prefix_len()).build()
        }
        (IpNet::V6(d), Some(IpAddr::V6(g))) => {
            RouteMessageBuilder::<Ipv6Addr>::new().destination_prefix(d.addr(), d.prefix_len()).gateway(g).build()
        }
        (destination, Some(gateway)) => return Err(Error::FamilyMismatch { destination, gateway }),
    };
    msg.header.table = MAIN_TABLE;
    msg.header.protocol = RouteProtocol::from(ROUTE_PROTOCOL);
    if metric != 0 {
        msg.attributes.push(RouteAttribute::Priority(metric));
    }
    Ok(msg)
}

/// The route in a dump message, if it is in the main table and has a destination of either family.
fn host_route(msg: &RouteMessage) -> Option<HostRoute> {
    let mut table = u32::from(msg.header.table);
    let (mut dest, mut gateway, mut metric) = (None, None, 0);
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(RouteAddress::Inet(a)) => dest = Some(IpAddr::V4(*a)),
            RouteAttribute::Destination(RouteAddress::Inet6(a)) => dest = Some(IpAddr::V6(*a)),
            RouteAttribute::Gateway(RouteAddress::Inet(a)) => gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Gateway(RouteAddress::Inet6(a)) => gateway = Some(IpAddr::V6(*a)),
            RouteAttribute::Via(RouteVia::Inet(a)) => gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Via(RouteVia::Inet6(a)) => gateway = Some(IpAddr::V6(*a)),
            RouteAttribute::Priority(p) => metric = *p,
            _ => {}
        }
    }
    if table != u32::from(MAIN_TABLE) {
        return None;
    }
    let len = msg.header.destination_prefix_length;
    // No destination attribute: the default route of the message's family.
    let dest = match (dest, msg.header.address_family) {
        (Some(d), _) => d,
        (None, rtnetlink::packet_route::AddressFamily::Inet) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (None, rtnetlink::packet_route::AddressFamily::Inet6) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        (None, _) => return None,
    };
    let destination = IpNet::new(dest, len).ok()?;
    Some(HostRoute { destination, gateway, protocol: u8::from(msg.header.protocol), metric })
}

fn show(gateway: Option<IpAddr>) -> String {
    gateway.map_or_else(|| "-".to_string(), |g| g.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_our_protocol_and_the_main_table() {
        let msg = route_message("10.244.2.0/24".parse().unwrap(), Some("172.18.0.3".parse().unwrap()), 0).unwrap();
        assert_eq!(u8::from(msg.header.protocol), ROUTE_PROTOCOL);
        assert_eq!(msg.header.table, MAIN_TABLE);
        let back = host_route(&msg).unwrap();
        assert_eq!(back.destination, "10.244.2.0/24".parse::<IpNet>().unwrap());
        assert_eq!(back.gateway, Some("172.18.0.3".parse().unwrap()));
        assert!(back.is_ours());
        let v6 = route_message("fd00:10:244:2::/64".parse().unwrap(), Some("fc00::3".parse().unwrap()), 1024).unwrap();
        assert_eq!(host_route(&v6).unwrap().metric, 1024);
        let mixed = route_message("10.244.2.0/24".parse().unwrap(), Some("fc00::3".parse().unwrap()), 0);
        assert!(matches!(mixed, Err(Error::FamilyMismatch { .. })));
    }
}

//! Passthrough load balancers (`forwarding: passthrough`, Kubernetes' `ipMode: VIP`): the data plane routes a
//! client's packets to a healthy backend unchanged, still addressed to the load balancer's address and port,
//! and kube-proxy on that node serves the address (as it does for every LoadBalancer ingress IP without
//! `ipMode: Proxy`). No NodePort is needed and the pod sees the client's own address. The replies go from the
//! node to the client directly.
//!
//! In the kernel of the emulator's own network namespace (`--hold-public-pool`, on kind), where the pool is
//! this host's through one `local` route (see [`super::pool`]):
//! - the `local` table's rule moves from priority 0 to [`LOCAL_PRIORITY`], so that rules may come before it;
//! - each listener of a passthrough load balancer is a rule at [`RULE_PRIORITY`], `to <VIP> ipproto <P>
//!   dport <port> [from <source range>]`, that looks up [`TABLE`]; any other packet to the address (another
//!   port, a client outside the source ranges) still finds the `local` table, and nothing listens there;
//! - [`TABLE`] has a route to each such VIP through its healthy backends (a multipath route: the kernel's
//!   default hash of source and destination address keeps each client on one node, which ClientIP affinity
//!   needs), or an `unreachable` route when none is healthy, which the client hears as "no route to host".
//!
//! Forwarding needs `net.ipv4.ip_forward=1` there (`docker run --sysctl`); with it off the load balancer is
//! reported as not served, with the reason. Everything of ours is removed at start (a restarted emulator
//! finds its predecessor's rules) and set again from the database.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};

use fakecloud_api::Protocol;
use futures::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteNextHop, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleMessage, RulePortRange};
use rtnetlink::packet_route::{AddressFamily, IpProtocol};
use rtnetlink::{Handle, IpVersion, RouteMessageBuilder};

use super::context::{AbortOnDrop, Sources};

/// Where the passthrough rules sit: before the `local` table's rule.
pub const RULE_PRIORITY: u32 = 100;
/// Where the `local` table's rule moves to from 0.
pub const LOCAL_PRIORITY: u32 = 200;
/// The routing table of the passthrough VIPs.
pub const TABLE: u32 = 1000;
const LOCAL_TABLE: u32 = 255;

/// What one passthrough load balancer asks of the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// (protocol, port, source range) per rule: a listener once per source range, or once with none.
    pub matches: BTreeSet<(Protocol, u16, Option<Ipv4Net>)>,
    /// The healthy backends' addresses; none routes the VIP nowhere.
    pub nexthops: BTreeSet<Ipv4Addr>,
}

impl Want {
    /// `listeners`, each from the clients its sources admit (the IPv4 ones), to `healthy`.
    pub fn new(listeners: &[(Protocol, u16, Sources)], healthy: impl Iterator<Item = IpAddr>) -> Self {
        let mut matches = BTreeSet::new();
        for (protocol, port, sources) in listeners {
            match sources {
                Sources::Any => {
                    matches.insert((*protocol, *port, None));
                }
                // IPv6 ranges admit no client of an IPv4 address: only the IPv4 ones become rules; none, no rule,
                // so the address's packets find nothing listening.
                Sources::Only(nets) => matches.extend(
                    nets.iter()
                        .filter_map(|r| if let ipnet::IpNet::V4(n) = r { Some(*n) } else { None })
                        .map(|r| (*protocol, *port, Some(r))),
                ),
            }
        }
        let nexthops = healthy.filter_map(|ip| if let IpAddr::V4(v4) = ip { Some(v4) } else { None }).collect();
        Self { matches, nexthops }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "passthrough needs the emulator to hold the public pool in a network namespace of its own \
         (serve --hold-public-pool, as on kind), where it routes"
    )]
    NotHolding,
    #[error("passthrough serves IPv4 addresses; {0} is not one")]
    NotIpv4(IpAddr),
    #[error(
        "net.ipv4.ip_forward is 0 in the emulator's network namespace, so it cannot route passthrough traffic \
         (docker run --sysctl net.ipv4.ip_forward=1)"
    )]
    NoForwarding,
    #[error("cannot open a netlink socket for passthrough routing: {0}")]
    Socket(#[source] std::io::Error),
    #[error("passthrough routing: {what}: {source}")]
    Netlink {
        what: &'static str,
        #[source]
        source: rtnetlink::Error,
    },
}

fn netlink(what: &'static str) -> impl FnOnce(rtnetlink::Error) -> Error {
    move |source| Error::Netlink { what, source }
}

/// The kernel's passthrough state, as this process has set it.
pub struct Kernel {
    handle: Handle,
    _connection: AbortOnDrop,
    applied: HashMap<Ipv4Addr, Want>,
}

impl Kernel {
    /// Take over the namespace's routing: the `local` rule moved, and no rule or route of ours left from before.
    pub async fn start() -> Result<Self, Error> {
        let forwarding = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap_or_default();
        if forwarding.trim() != "1" {
            return Err(Error::NoForwarding);
        }
        let (conn, handle, _) = rtnetlink::new_connection().map_err(Error::Socket)?;
        let kernel = Self { handle, _connection: AbortOnDrop(tokio::spawn(conn)), applied: HashMap::new() };
        let rules: Vec<RuleMessage> =
            kernel.handle.rule().get(IpVersion::V4).execute().try_collect().await.map_err(netlink("list rules"))?;
        let local = |r: &RuleMessage| rule_table(r) == LOCAL_TABLE;
        if !rules.iter().any(|r| local(r) && priority(r) == LOCAL_PRIORITY) {
            let add = kernel.handle.rule().add().v4().table_id(LOCAL_TABLE).priority(LOCAL_PRIORITY);
            add.action(RuleAction::ToTable)
                .execute()
                .await
                .map_err(netlink("add the local table's rule after the passthrough rules"))?;
        }
        for rule in rules {
            // Ours from before, and the local table's first rule (the one above took its place).
            if priority(&rule) == RULE_PRIORITY || (priority(&rule) == 0 && local(&rule)) {
                kernel.handle.rule().del(rule).execute().await.map_err(netlink("remove a rule"))?;
            }
        }
        let routes: Vec<RouteMessage> = kernel
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().table_id(TABLE).build())
            .execute()
            .try_collect()
            .await
            .map_err(netlink("list routes"))?;
        for route in routes.into_iter().filter(|r| table(r) == TABLE) {
            kernel.handle.route().del(route).execute().await.map_err(netlink("remove a route"))?;
        }
        Ok(kernel)
    }

    /// Route `vip` as `want` says (nothing to do when it already is). On failure it is forgotten, so the next
    /// call sets it whole again.
    pub async fn set(&mut self, vip: Ipv4Addr, want: &Want) -> Result<(), Error> {
        if self.applied.get(&vip) == Some(want) {
            return Ok(());
        }
        match self.program(vip, want).await {
            Ok(()) => {
                tracing::info!(%vip, rules = want.matches.len(), nexthops = ?want.nexthops, "data plane: passthrough set");
                self.applied.insert(vip, want.clone());
                Ok(())
            }
            Err(e) => {
                self.applied.remove(&vip);
                Err(e)
            }
        }
    }

    /// Stop routing every VIP but `keep`'s.
    pub async fn retain(&mut self, keep: &HashSet<Ipv4Addr>) {
        let gone: Vec<Ipv4Addr> = self.applied.keys().filter(|vip| !keep.contains(vip)).copied().collect();
        for vip in gone {
            match self.remove(vip).await {
                Ok(()) => {
                    tracing::info!(%vip, "data plane: passthrough removed");
                    self.applied.remove(&vip);
                }
                // Kept, so the next call tries again.
                Err(e) => tracing::warn!(%vip, error = %e, "data plane: cannot remove a passthrough address"),
            }
        }
    }

    /// `vip`'s rules and route, from what was applied to `want`: the rules that go first, then the route, so
    /// a new rule never finds an empty table.
    async fn program(&self, vip: Ipv4Addr, want: &Want) -> Result<(), Error> {
        let before = self.applied.get(&vip);
        let old = before.map(|w| &w.matches);
        for m in old.into_iter().flatten().filter(|m| !want.matches.contains(m)) {
            self.remove_rule(vip, *m).await?;
        }
        if before.map(|w| &w.nexthops) != Some(&want.nexthops) {
            let route = route(vip, &want.nexthops);
            self.handle.route().add(route).replace().execute().await.map_err(netlink("set a route"))?;
        }
        for m in want.matches.iter().filter(|m| old.is_none_or(|o| !o.contains(m))) {
            let mut add = self.handle.rule().add().v4();
            *add.message_mut() = rule(vip, *m);
            add.execute().await.or_else(exists).map_err(netlink("add a rule"))?;
        }
        Ok(())
    }

    /// `vip`'s rules, then its route.
    async fn remove(&self, vip: Ipv4Addr) -> Result<(), Error> {
        let Some(applied) = self.applied.get(&vip) else { return Ok(()) };
        for m in &applied.matches {
            self.remove_rule(vip, *m).await?;
        }
        let route = route(vip, &applied.nexthops);
        self.handle.route().del(route).execute().await.or_else(missing).map_err(netlink("remove a route"))
    }

    /// One of `vip`'s rules; one already gone is removed.
    async fn remove_rule(&self, vip: Ipv4Addr, m: (Protocol, u16, Option<Ipv4Net>)) -> Result<(), Error> {
        self.handle.rule().del(rule(vip, m)).execute().await.or_else(missing).map_err(netlink("remove a rule"))
    }
}

/// `to vip ipproto P dport N [from range] lookup TABLE` at [`RULE_PRIORITY`].
fn rule(vip: Ipv4Addr, (protocol, port, from): (Protocol, u16, Option<Ipv4Net>)) -> RuleMessage {
    let mut msg = RuleMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.action = RuleAction::ToTable;
    msg.header.dst_len = 32;
    msg.attributes.push(RuleAttribute::Destination(IpAddr::V4(vip)));
    if let Some(from) = from {
        msg.header.src_len = from.prefix_len();
        msg.attributes.push(RuleAttribute::Source(IpAddr::V4(from.network())));
    }
    msg.attributes.push(RuleAttribute::IpProtocol(match protocol {
        Protocol::Tcp => IpProtocol::Tcp,
        Protocol::Udp => IpProtocol::Udp,
    }));
    msg.attributes.push(RuleAttribute::DestinationPortRange(RulePortRange { start: port, end: port }));
    msg.attributes.push(RuleAttribute::Priority(RULE_PRIORITY));
    msg.attributes.push(RuleAttribute::Table(TABLE));
    msg.header.table = 0; // the table is in the attribute: it does not fit the header's byte
    msg
}

/// `vip/32` in [`TABLE`] through `nexthops` (multipath when several), or `unreachable` when there are none.
fn route(vip: Ipv4Addr, nexthops: &BTreeSet<Ipv4Addr>) -> RouteMessage {
    let builder = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(vip, 32)
        .table_id(TABLE)
        .protocol(RouteProtocol::Static);
    let mut hops = nexthops.iter();
    match (hops.next(), hops.next()) {
        (None, _) => builder.kind(RouteType::Unreachable).scope(RouteScope::Universe).build(),
        (Some(one), None) => builder.gateway(*one).build(),
        (Some(_), Some(_)) => builder
            .multipath(
                nexthops
                    .iter()
                    .map(|gw| {
                        let mut hop = RouteNextHop::default();
                        hop.attributes.push(RouteAttribute::Gateway(RouteAddress::Inet(*gw)));
                        hop
                    })
                    .collect(),
            )
            .build(),
    }
}

fn priority(rule: &RuleMessage) -> u32 {
    rule.attributes.iter().find_map(|a| if let RuleAttribute::Priority(p) = a { Some(*p) } else { None }).unwrap_or(0)
}

fn rule_table(rule: &RuleMessage) -> u32 {
    rule.attributes
        .iter()
        .find_map(|a| if let RuleAttribute::Table(t) = a { Some(*t) } else { None })
        .unwrap_or(u32::from(rule.header.table))
}

fn table(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|a| if let RouteAttribute::Table(t) = a { Some(*t) } else { None })
        .unwrap_or(u32::from(route.header.table))
}

/// A removal of what is already gone is done.
fn missing(e: rtnetlink::Error) -> Result<(), rtnetlink::Error> {
    match &e {
        rtnetlink::Error::NetlinkError(m) if m.to_io().kind() == std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

/// An addition of what is already there is done.
fn exists(e: rtnetlink::Error) -> Result<(), rtnetlink::Error> {
    match &e {
        rtnetlink::Error::NetlinkError(m) if m.to_io().kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        _ => Err(e),
    }
}

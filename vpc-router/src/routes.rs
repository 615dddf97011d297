//! The reconcile plan, with no I/O: which routes the cloud's table wants on this host
//! ([`desired`]), and what to change on the host to get there ([`plan`]).
//!
//! The router owns only the routes it installed. It marks them with [`ROUTE_PROTOCOL`] and never
//! changes a route with another protocol. That includes the kernel's connected routes, `cni0`'s route
//! to this node's own pods, and anything an operator added.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;

use fakecloud_api::{Instance, Route, RouteState};
use ipnet::IpNet;

/// The routing protocol number (`ip route ... proto 211`) that marks this router's routes in the
/// main table. The kernel does not interpret values above `RTPROT_STATIC` (4). 211 is not in
/// iproute2's `rt_protos` list of known daemons (8–192), so another routing daemon on the node is
/// unlikely to use it. Every delete and replace is limited to routes that carry it.
pub const ROUTE_PROTOCOL: u8 = 211;

/// A main-table route as netlink reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoute {
    pub destination: IpNet,
    pub gateway: Option<IpAddr>,
    pub protocol: u8,
    /// `RTA_PRIORITY`. IPv4 routes without one are 0; IPv6 routes always have one (1024 by default).
    pub metric: u32,
}

impl HostRoute {
    pub fn is_ours(&self) -> bool {
        self.protocol == ROUTE_PROTOCOL
    }
}

/// A route the cloud's table wants on this host: `destination via gateway`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedRoute {
    pub destination: IpNet,
    /// The target instance's private IP.
    pub gateway: IpAddr,
    /// The cloud route's ID, for logs.
    pub route_id: String,
    /// The target instance's name (a kind node's name), for logs.
    pub node: String,
}

/// A cloud route that is not programmed on this host, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Skipped {
    pub route_id: String,
    pub destination: String,
    pub reason: SkipReason,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipReason {
    /// The destination is not a network in CIDR form with its host bits zero.
    BadDestination,
    /// The cloud says the target is gone (terminated or deleted). A cloud drops that traffic. Without a
    /// route, the host does too: it has no path to the CIDR.
    Blackhole { target: String },
    /// The target is not among the cloud's instances.
    UnknownTarget { target: String },
    /// The target has no address of the destination's family (a single-stack instance), so there is
    /// nothing to route through.
    NoAddressOfFamily { target: String, address: IpAddr },
    /// The destination overlaps this node's own pod CIDR. Routing it away would cut this node's own
    /// pods off.
    OverlapsOwnPodCidr { own: IpNet },
    /// Another cloud route has the same destination and was kept instead.
    DuplicateDestination { kept: String },
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (id, dest) = (&self.route_id, &self.destination);
        match &self.reason {
            SkipReason::BadDestination => write!(f, "cloud route {id}: destination {dest:?} is not a network CIDR"),
            SkipReason::Blackhole { target } => {
                write!(f, "cloud route {id} ({dest}) is a blackhole: its target {target} is gone")
            }
            SkipReason::UnknownTarget { target } => {
                write!(f, "cloud route {id} ({dest}): target instance {target} is not in the cloud")
            }
            SkipReason::NoAddressOfFamily { target, address } => write!(
                f,
                "cloud route {id} ({dest}): target instance {target} has no address of that family (its private IP is {address})"
            ),
            SkipReason::OverlapsOwnPodCidr { own } => {
                write!(f, "cloud route {id} ({dest}) overlaps this node's own pod CIDR {own}")
            }
            SkipReason::DuplicateDestination { kept } => {
                write!(f, "cloud route {id} ({dest}) has the same destination as cloud route {kept}, which is used")
            }
        }
    }
}

/// What the cloud's table wants on this host.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Desired {
    pub routes: Vec<WantedRoute>,
    pub skipped: Vec<Skipped>,
}

/// The routes of the cloud's table that this host programs. A route to this node's own instance is
/// left out: its pods sit behind `cni0`, which the bridge plugin routes. `instances` maps instance
/// IDs to instances, and `me` is this node's instance ID.
pub fn desired(routes: &[Route], instances: &HashMap<String, Instance>, me: &str, own_pod_cidrs: &[IpNet]) -> Desired {
    let mut out = Desired::default();
    // The order is fixed (by route ID) so a duplicate destination resolves the same way every period.
    let mut sorted: Vec<&Route> = routes.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    let mut seen: BTreeMap<IpNet, String> = BTreeMap::new();
    for r in sorted {
        if r.target_instance == me {
            continue;
        }
        let skip = |reason| Skipped { route_id: r.id.clone(), destination: r.destination.clone(), reason };
        let destination = match r.destination.parse::<IpNet>() {
            Ok(d) if d.trunc() == d => d,
            _ => {
                out.skipped.push(skip(SkipReason::BadDestination));
                continue;
            }
        };
        if r.state == RouteState::Blackhole {
            out.skipped.push(skip(SkipReason::Blackhole { target: r.target_instance.clone() }));
            continue;
        }
        let Some(target) = instances.get(&r.target_instance) else {
            out.skipped.push(skip(SkipReason::UnknownTarget { target: r.target_instance.clone() }));
            continue;
        };
        let Some(gateway) = target.address_like(destination.addr()) else {
            let reason = SkipReason::NoAddressOfFamily { target: target.id.clone(), address: target.private_ip };
            out.skipped.push(skip(reason));
            continue;
        };
        if let Some(own) = own_pod_cidrs.iter().find(|o| o.contains(&destination) || destination.contains(*o)) {
            out.skipped.push(skip(SkipReason::OverlapsOwnPodCidr { own: *own }));
            continue;
        }
        if let Some(kept) = seen.get(&destination) {
            out.skipped.push(skip(SkipReason::DuplicateDestination { kept: kept.clone() }));
            continue;
        }
        seen.insert(destination, r.id.clone());
        out.routes.push(WantedRoute { destination, gateway, route_id: r.id.clone(), node: target.name.clone() });
    }
    out
}

/// What to change on the host.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    pub adds: Vec<WantedRoute>,
    /// Routes of ours whose gateway changed, with the old one (one atomic `NLM_F_REPLACE` each).
    pub replaces: Vec<(WantedRoute, HostRoute)>,
    /// Routes of ours that the cloud no longer has (or extra copies of one it has).
    pub deletes: Vec<HostRoute>,
    /// Wanted routes whose destination already has a route that is not ours. That route is left alone
    /// and the wanted one is not installed.
    pub conflicts: Vec<(WantedRoute, HostRoute)>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.adds.is_empty() && self.replaces.is_empty() && self.deletes.is_empty()
    }
}

/// The changes that take `current` (the host's main table) to `desired`, touching only routes with
/// [`ROUTE_PROTOCOL`].
pub fn plan(desired: &[WantedRoute], current: &[HostRoute]) -> Plan {
    let mut out = Plan::default();
    let mut ours: BTreeMap<IpNet, Vec<&HostRoute>> = BTreeMap::new();
    for r in current.iter().filter(|r| r.is_ours()) {
        ours.entry(r.destination).or_default().push(r);
    }
    for want in desired {
        match ours.remove(&want.destination) {
            Some(have) => {
                // Keep the one with the right gateway. Otherwise replace one in place. Any other copies go.
                let keep = have.iter().position(|h| h.gateway == Some(want.gateway));
                match keep {
                    Some(_) => {}
                    None => out.replaces.push((want.clone(), have[0].clone())),
                }
                let kept = keep.unwrap_or(0);
                out.deletes.extend(have.iter().enumerate().filter(|(i, _)| *i != kept).map(|(_, h)| (*h).clone()));
            }
            None => match current.iter().find(|c| !c.is_ours() && c.destination == want.destination) {
                Some(theirs) => out.conflicts.push((want.clone(), theirs.clone())),
                None => out.adds.push(want.clone()),
            },
        }
    }
    out.deletes.extend(ours.into_values().flatten().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakecloud_api::{InstanceState, Market};

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn instance(id: &str, name: &str, addr: &str) -> Instance {
        Instance {
            id: id.into(),
            name: name.into(),
            zone: "local-1a".into(),
            region: "local-1".into(),
            instance_type: "t1.small".into(),
            market: Market::OnDemand,
            state: InstanceState::Running,
            private_ip: ip(addr),
            ipv6_address: None,
            provider_id: format!("fakecloud://local-1a/{id}"),
            tags: Default::default(),
            created_at: String::new(),
            state_changed_at: String::new(),
            state_reason: None,
            interruption_at: None,
        }
    }

    fn route(id: &str, dest: &str, target: &str) -> Route {
        Route {
            id: id.into(),
            route_table_id: "rtb-main".into(),
            name: format!("kubernetes-{id}"),
            destination: dest.into(),
            target_instance: target.into(),
            state: RouteState::Active,
            created_at: String::new(),
        }
    }

    fn instances() -> HashMap<String, Instance> {
        [
            instance("i-me", "kind-control-plane", "172.18.0.2"),
            instance("i-w1", "kind-worker", "172.18.0.3"),
            instance("i-w2", "kind-worker2", "172.18.0.4"),
            instance("i-v6", "v6-only", "fc00::5"),
        ]
        .into_iter()
        .map(|i| (i.id.clone(), i))
        .collect()
    }

    fn wanted(dest: &str, gw: &str, id: &str, node: &str) -> WantedRoute {
        WantedRoute { destination: net(dest), gateway: ip(gw), route_id: id.into(), node: node.into() }
    }

    fn host(dest: &str, gw: Option<&str>, protocol: u8) -> HostRoute {
        HostRoute { destination: net(dest), gateway: gw.map(ip), protocol, metric: 0 }
    }

    #[test]
    fn every_other_nodes_route_goes_via_its_private_ip_and_ours_is_left_to_the_bridge() {
        let routes = [
            route("r-1", "10.244.0.0/24", "i-me"),
            route("r-2", "10.244.1.0/24", "i-w1"),
            route("r-3", "10.244.2.0/24", "i-w2"),
        ];
        let d = desired(&routes, &instances(), "i-me", &[net("10.244.0.0/24")]);
        assert_eq!(
            d.routes,
            [
                wanted("10.244.1.0/24", "172.18.0.3", "r-2", "kind-worker"),
                wanted("10.244.2.0/24", "172.18.0.4", "r-3", "kind-worker2")
            ]
        );
        assert!(d.skipped.is_empty());
    }

    #[test]
    fn a_dual_stack_instance_takes_each_familys_routes_via_its_address_of_that_family() {
        let mut dual = instance("i-d", "kind-worker3", "172.18.0.6");
        dual.ipv6_address = Some("fc00:f853:ccd:e793::6".parse().unwrap());
        let mut all = instances();
        all.insert(dual.id.clone(), dual);
        let routes = [route("r-1", "10.244.3.0/24", "i-d"), route("r-2", "fd00:10:244:3::/64", "i-d")];
        let d = desired(&routes, &all, "i-me", &[net("10.244.0.0/24"), net("fd00:10:244::/64")]);
        assert_eq!(
            d.routes,
            [
                wanted("10.244.3.0/24", "172.18.0.6", "r-1", "kind-worker3"),
                wanted("fd00:10:244:3::/64", "fc00:f853:ccd:e793::6", "r-2", "kind-worker3")
            ]
        );
        assert!(d.skipped.is_empty());
    }

    #[test]
    fn routes_that_cannot_be_programmed_are_skipped_with_the_reason() {
        let mut gone = route("r-6", "10.244.6.0/24", "i-w2");
        gone.state = RouteState::Blackhole;
        let routes = [
            route("r-1", "10.244.1.0/24", "i-w1"),
            route("r-2", "fd00:10:244:1::/64", "i-w1"),
            route("r-3", "10.244.3.0/24", "i-nope"),
            route("r-4", "10.244.4.1/24", "i-w1"),
            route("r-5", "10.244.0.0/16", "i-w1"),
            gone,
            route("r-7", "10.244.1.0/24", "i-w2"),
            route("r-8", "fd00:10:244:8::/64", "i-v6"),
            route("r-9", "10.244.9.0/24", "i-v6"),
        ];
        let d = desired(&routes, &instances(), "i-me", &[net("10.244.0.0/24")]);
        assert_eq!(
            d.routes,
            [
                wanted("10.244.1.0/24", "172.18.0.3", "r-1", "kind-worker"),
                wanted("fd00:10:244:8::/64", "fc00::5", "r-8", "v6-only")
            ]
        );
        let reasons: Vec<_> = d.skipped.iter().map(|s| (s.route_id.as_str(), s.reason.clone())).collect();
        assert_eq!(
            reasons,
            [
                ("r-2", SkipReason::NoAddressOfFamily { target: "i-w1".into(), address: ip("172.18.0.3") }),
                ("r-3", SkipReason::UnknownTarget { target: "i-nope".into() }),
                ("r-4", SkipReason::BadDestination),
                ("r-5", SkipReason::OverlapsOwnPodCidr { own: net("10.244.0.0/24") }),
                ("r-6", SkipReason::Blackhole { target: "i-w2".into() }),
                ("r-7", SkipReason::DuplicateDestination { kept: "r-1".into() }),
                ("r-9", SkipReason::NoAddressOfFamily { target: "i-v6".into(), address: ip("fc00::5") }),
            ]
        );
        let text = d.skipped[0].to_string();
        assert!(text.contains("r-2") && text.contains("no address of that family"), "{text}");
    }

    #[test]
    fn missing_routes_are_added_and_present_ones_left_alone() {
        let want =
            [wanted("10.244.1.0/24", "172.18.0.3", "r-1", "w1"), wanted("10.244.2.0/24", "172.18.0.4", "r-2", "w2")];
        let current =
            [host("10.244.1.0/24", Some("172.18.0.3"), ROUTE_PROTOCOL), host("0.0.0.0/0", Some("172.18.0.1"), 4)];
        let p = plan(&want, &current);
        assert_eq!(p.adds, [want[1].clone()]);
        assert!(p.replaces.is_empty() && p.deletes.is_empty() && p.conflicts.is_empty());
        assert!(plan(&want[..1], &current).is_empty(), "steady state: nothing to do");
    }

    #[test]
    fn a_moved_route_is_replaced_and_a_removed_one_deleted() {
        let want = [wanted("10.244.1.0/24", "172.18.0.9", "r-1", "w1")];
        let current = [
            host("10.244.1.0/24", Some("172.18.0.3"), ROUTE_PROTOCOL),
            host("10.244.2.0/24", Some("172.18.0.4"), ROUTE_PROTOCOL),
            host("fd00:10:244:2::/64", Some("fc00::4"), ROUTE_PROTOCOL),
        ];
        let p = plan(&want, &current);
        assert_eq!(p.replaces, [(want[0].clone(), current[0].clone())]);
        assert_eq!(p.deletes, [current[1].clone(), current[2].clone()]);
        assert!(p.adds.is_empty());
        // The cloud's table emptied (or the quota dropped every route): all of ours go.
        assert_eq!(plan(&[], &current).deletes.len(), 3);
    }

    #[test]
    fn routes_that_are_not_ours_are_never_touched() {
        let current = [
            host("10.244.0.0/24", None, 2),                // cni0's connected route
            host("10.244.5.0/24", Some("172.18.0.7"), 4),  // an operator's static route
            host("0.0.0.0/0", Some("172.18.0.1"), 3),      // the default route
            host("10.244.6.0/24", Some("172.18.0.8"), 80), // another routing daemon's
        ];
        let p = plan(&[], &current);
        assert!(p.is_empty() && p.conflicts.is_empty());
        // A wanted route whose destination is taken by someone else's is a conflict, not a replace.
        let want = [wanted("10.244.5.0/24", "172.18.0.3", "r-5", "w1")];
        let p = plan(&want, &current);
        assert!(p.is_empty());
        assert_eq!(p.conflicts, [(want[0].clone(), current[1].clone())]);
    }

    #[test]
    fn duplicate_copies_of_our_route_are_reduced_to_the_right_one() {
        let mut second = host("10.244.1.0/24", Some("172.18.0.3"), ROUTE_PROTOCOL);
        second.metric = 100;
        let current = [host("10.244.1.0/24", Some("172.18.0.8"), ROUTE_PROTOCOL), second.clone()];
        let want = [wanted("10.244.1.0/24", "172.18.0.3", "r-1", "w1")];
        let p = plan(&want, &current);
        assert!(p.replaces.is_empty() && p.adds.is_empty());
        assert_eq!(p.deletes, [current[0].clone()]);
    }
}

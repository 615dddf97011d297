//! Which addresses a machine may have — and so which addresses the load balancer data plane may forward a
//! client's bytes to. Checked when an instance is given a fixed address, and again by the data plane before a
//! backend gets traffic (a database written by an older emulator may hold any address).
//!
//! A machine's address is one a machine can be reached at (not unspecified, multicast, broadcast or
//! link-local), never a load balancer's (the public pool, the internal load balancers' subnet: a backend there
//! would make the data plane connect to itself, again and again), and inside the VPC, like a real cloud's — or
//! inside a network the emulator is told it adopts machines from (`serve --adopt-networks`, a kind network; not
//! its network or broadcast address, as in the VPC's subnets), or
//! on loopback when `serve --loopback-instances` says that machines are processes on this host. When the
//! emulator serves load balancers, never this host's own address either (but loopback, as that flag allows): the
//! data plane would forward a client's bytes to its host's services and report, through health checks, which
//! ports answer. Without the data plane a load balancer is a record, and a machine that shares the emulator's
//! host (as in a test that runs both in one network namespace) harms nothing.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::config::{Config, Pool};

/// The addresses of this host's interfaces, as the kernel lists them now.
#[derive(Debug, Default)]
pub struct HostAddresses(Vec<(IpAddr, String)>);

impl HostAddresses {
    pub fn read() -> Self {
        let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
            tracing::warn!("cannot list this host's addresses; machines' addresses are not checked against them");
            return Self::default();
        };
        let addresses = interfaces
            .filter_map(|i| {
                let a = i.address?;
                let ip = match (a.as_sockaddr_in(), a.as_sockaddr_in6()) {
                    (Some(v4), _) => IpAddr::V4(v4.ip()),
                    (_, Some(v6)) => IpAddr::V6(v6.ip()),
                    _ => return None,
                };
                Some((ip, i.interface_name))
            })
            .collect();
        Self(addresses)
    }

    fn interface_of(&self, ip: IpAddr) -> Option<&str> {
        self.0.iter().find(|(a, _)| *a == ip).map(|(_, name)| name.as_str())
    }
}

/// Why `ip` (in its canonical form, see `fakecloud_api::net`) cannot be a machine's address; `None` when it
/// can. Inside the VPC any zone's subnet passes here: the caller checks it is the instance's zone's.
pub fn refusal(ip: IpAddr, cfg: &Config, host: &HostAddresses) -> Option<String> {
    let topo = &cfg.topology;
    let kind = match ip {
        _ if ip.is_unspecified() => Some("the unspecified address"),
        _ if ip.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("a link-local address"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("a link-local address"),
        _ => None,
    };
    if let Some(kind) = kind {
        return Some(format!("{ip} is {kind}; a machine's address must be one it can be reached at"));
    }
    if let IpAddr::V4(v4) = ip {
        for (net, what) in
            [(topo.public.net, "the public pool"), (topo.internal_lb.net, "the internal load balancers' subnet")]
        {
            if net.contains(&v4) {
                return Some(format!("{ip} is in {what} {net}, where load balancers' addresses are, not machines'"));
            }
        }
    }
    if ip.is_loopback() {
        return (!cfg.loopback_instances).then(|| {
            format!("{ip} is a loopback address (accepted only with `fakecloud serve --loopback-instances`)")
        });
    }
    if cfg.serve_load_balancers
        && let Some(interface) = host.interface_of(ip)
    {
        return Some(format!(
            "{ip} is this host's own address (on {interface}): the load balancers' traffic for the machine would \
             reach the emulator's host"
        ));
    }
    let in_vpc = matches!(ip, IpAddr::V4(v4) if topo.vpc.contains(&v4));
    if in_vpc {
        // Its subnet's reserved addresses are refused when it is leased there (`Pool::offset_of`).
        return None;
    }
    if cfg.adopt_networks.iter().any(|n| n.contains(&ip)) {
        return not_a_host(ip, &cfg.adopt_networks);
    }
    let adopted = match cfg.adopt_networks.as_slice() {
        [] => "none".to_string(),
        nets => nets.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
    };
    Some(format!(
        "{ip} is outside the VPC {}; a machine outside it can be adopted only from a network the emulator is \
         started with (`fakecloud serve --adopt-networks`, e.g. the kind network; now: {adopted})",
        topo.vpc
    ))
}

/// Why `ip` cannot be a machine of the adopted networks it is in: it is one's network or broadcast address —
/// no machine's, as in the VPC's subnets (the same rule: [`Pool::hosts`]).
fn not_a_host(ip: IpAddr, adopted: &[IpNet]) -> Option<String> {
    let IpAddr::V4(v4) = ip else { return None };
    adopted.iter().find_map(|net| {
        let IpNet::V4(net) = *net else { return None };
        let hosts = Pool::hosts("adopted", net);
        if !net.contains(&v4) || hosts.offset_of(v4).is_some() {
            return None;
        }
        let which = if v4 == net.network() { "network" } else { "broadcast" };
        Some(format!(
            "{ip} is the {which} address of the adopted network {net} (`fakecloud serve --adopt-networks`), no \
             machine's: its machines' addresses are {} to {}",
            hosts.addr(hosts.first),
            hosts.addr(hosts.last)
        ))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn machines_live_in_the_vpc_the_adopted_networks_or_on_loopback_when_allowed() {
        let host = HostAddresses(vec![(ip("192.168.9.4"), "eth0".into())]);
        let mut cfg = Config { serve_load_balancers: true, ..Config::default() };
        assert_eq!(refusal(ip("10.0.64.9"), &cfg, &host), None);
        for (bad, says) in [
            ("0.0.0.0", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("169.254.0.1", "link-local"),
            ("203.0.113.5", "public pool"),
            ("10.0.192.9", "internal load balancers"),
            ("127.0.0.1", "--loopback-instances"),
            ("192.168.9.4", "this host's own address (on eth0)"),
            ("172.18.0.3", "--adopt-networks"),
            ("fc00:f853:ccd:e793::3", "outside the VPC"),
        ] {
            let why = refusal(ip(bad), &cfg, &host).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(why.contains(says), "{bad}: {why}");
        }
        cfg.adopt_networks = vec!["172.18.0.0/16".parse().unwrap(), "fc00:f853:ccd:e793::/64".parse().unwrap()];
        cfg.loopback_instances = true;
        for good in ["172.18.0.3", "172.18.0.255", "172.18.255.254", "fc00:f853:ccd:e793::3", "127.78.0.1", "::1"] {
            assert_eq!(refusal(ip(good), &cfg, &host), None, "{good}");
        }
        // An adopted network's own addresses are no machine's; a /31 or a /32 has none (RFC 3021).
        for (bad, says) in [("172.18.0.0", "network address"), ("172.18.255.255", "broadcast address")] {
            let why = refusal(ip(bad), &cfg, &host).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(why.contains(says) && why.contains("172.18.0.0/16"), "{bad}: {why}");
            assert!(why.contains("172.18.0.1 to 172.18.255.254"), "{bad}: {why}");
        }
        let nets = ["192.0.2.10/31", "192.0.2.20/32", "0.0.0.0/0"];
        cfg.adopt_networks.extend(nets.map(|n| n.parse::<IpNet>().unwrap()));
        for good in ["192.0.2.10", "192.0.2.11", "192.0.2.20"] {
            assert_eq!(refusal(ip(good), &cfg, &host), None, "{good}");
        }
        assert!(refusal(ip("0.0.0.0"), &cfg, &host).unwrap().contains("unspecified"));
        cfg.adopt_networks.truncate(2);
        // Without the data plane nothing is forwarded: the host's own address may be a machine's, if adopted.
        cfg.adopt_networks.push("192.168.9.0/24".parse().unwrap());
        assert!(refusal(ip("192.168.9.4"), &cfg, &host).is_some());
        cfg.serve_load_balancers = false;
        assert_eq!(refusal(ip("192.168.9.4"), &cfg, &host), None);
        // Still never a load balancer's address, even on loopback.
        cfg.topology = crate::config::Topology::new(
            "r",
            &["a".to_string()],
            "10.0.0.0/16".parse().unwrap(),
            "127.77.0.0/24".parse().unwrap(),
        )
        .unwrap();
        assert!(refusal(ip("127.77.0.1"), &cfg, &host).unwrap().contains("public pool"));
    }
}

//! Addresses in one form. An IPv4-mapped IPv6 address (`::ffff:10.0.0.2`) is the IPv4 address it maps: a socket
//! reaches the same machine through either. Compared as written, the two forms would be two addresses — one in
//! use, the other free; one a load balancer's, the other a backend's — so every address the API takes is
//! brought to its IPv4 form where it enters, and stored and compared only in that form.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net};
use serde::{Deserialize, Deserializer};

/// `ip` in its one form: an IPv4-mapped IPv6 address as the IPv4 address it maps, anything else as it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `net` in its one form: a network inside `::ffff:0:0/96` as the IPv4 network it maps (`::ffff:10.0.0.0/104`
/// is `10.0.0.0/8`), anything else as it is.
pub fn canonical_net(net: IpNet) -> IpNet {
    match (net, canonical(net.addr())) {
        (IpNet::V6(v6), IpAddr::V4(v4)) if v6.prefix_len() >= 96 => {
            Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, IpNet::V4)
        }
        _ => net,
    }
}

/// For `#[serde(deserialize_with)]` on an optional address a request carries: read it in its one form.
pub fn deserialize_canonical<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    Ok(Option::<IpAddr>::deserialize(d)?.map(canonical))
}

/// An instance's private DNS name, as EC2 names it: `ip-10-0-1-5.<region>.compute.internal` (IP-based naming), or
/// `<id>.<region>.compute.internal` for one whose private address is IPv6 (resource-based naming, as EC2 names
/// IPv6-only instances). What the emulator's DNS resolves and its EC2 face answers, and what a simulated kubelet
/// names its Node for cloud-provider-aws, as a kubelet on EC2 does.
pub fn private_dns_name(id: &str, private_ip: IpAddr, region: &str) -> String {
    match private_ip {
        IpAddr::V4(v4) => format!("ip-{}.{region}.compute.internal", v4.to_string().replace('.', "-")),
        IpAddr::V6(_) => format!("{id}.{region}.compute.internal"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn mapped_addresses_and_networks_are_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        assert_eq!(canonical(ip("::ffff:127.5.0.1")), ip("127.5.0.1"));
        assert_eq!(canonical(ip("10.0.0.2")), ip("10.0.0.2"));
        assert_eq!(canonical(ip("2001:db8::1")), ip("2001:db8::1"));
        // `::1` and `::` are IPv6's own (loopback, unspecified), not mapped.
        assert_eq!(canonical(ip("::1")), ip("::1"));
        assert_eq!(canonical_net(net("::ffff:127.0.0.1/128")), net("127.0.0.1/32"));
        assert_eq!(canonical_net(net("::ffff:10.0.0.0/104")), net("10.0.0.0/8"));
        assert_eq!(canonical_net(net("::ffff:0:0/96")), net("0.0.0.0/0"));
        // Wider than the mapped block: IPv6 networks that hold more than IPv4.
        assert_eq!(canonical_net(net("::/0")), net("::/0"));
        assert_eq!(canonical_net(net("::ffff:0:0/95")), net("::ffff:0:0/95"));
    }
}

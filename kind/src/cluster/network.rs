//! Where the emulator and the load balancers live on the kind network.

use std::net::Ipv4Addr;

use anyhow::{Context as _, bail};
use ipnet::{IpNet, Ipv4Net};

/// The emulator's place on the kind network.
#[derive(Debug, PartialEq, Eq)]
pub struct Addresses {
    /// A fixed address near the top of the network's IPv4 range (away from the nodes, which Docker numbers from
    /// the bottom): pods and nodes reach the emulator there without DNS for container names, and a `docker kill`
    /// + `docker start` (the suite's emulator crash) brings it back at the same place.
    pub emulator: Ipv4Addr,
    /// The load balancers' public pool: the /24 below the one the emulator sits in, far above the nodes.
    pub lb_pool: Ipv4Net,
    /// Every subnet of the network: the emulator adopts the kind nodes there (`fakecloud adopt`), as a real
    /// cloud takes private IPs only inside its own networks.
    pub adopt: Vec<IpNet>,
}

/// The addresses on a network with `subnets` (`docker network inspect`'s, space-separated).
pub fn on(subnets: &str) -> anyhow::Result<Addresses> {
    let adopt: Vec<IpNet> = subnets
        .split_whitespace()
        .map(|s| s.parse().with_context(|| format!("the kind network's subnet '{s}' is not a network")))
        .collect::<anyhow::Result<_>>()?;
    let v4 = adopt
        .iter()
        .find_map(|n| match n {
            IpNet::V4(n) => Some(*n),
            IpNet::V6(_) => None,
        })
        .context("the kind network has no IPv4 subnet")?;
    if v4.prefix_len() > 22 {
        bail!(
            "the kind network {v4} is too small for the nodes, the emulator and a /24 of load balancer addresses (kind makes a /16; 'docker network rm kind' and run again)"
        );
    }
    let top = u32::from(v4.broadcast());
    let lb_pool = Ipv4Net::new(Ipv4Addr::from(top - 511), 24)?.trunc();
    Ok(Addresses { emulator: Ipv4Addr::from(top - 5), lb_pool, adopt })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulator_sits_near_the_top_and_the_pool_below_it() {
        let a = on("172.18.0.0/16 fc00:f853:ccd:e793::/64 ").unwrap();
        assert_eq!(a.emulator, Ipv4Addr::new(172, 18, 255, 250));
        assert_eq!(a.lb_pool, "172.18.254.0/24".parse().unwrap());
        assert_eq!(a.adopt.len(), 2);
        // The smallest network that holds them: a /22.
        let small = on("10.1.4.0/22").unwrap();
        assert_eq!((small.emulator, small.lb_pool), (Ipv4Addr::new(10, 1, 7, 250), "10.1.6.0/24".parse().unwrap()));
    }

    #[test]
    fn a_network_without_room_is_refused_with_what_to_do() {
        assert!(on("10.1.4.0/23").unwrap_err().to_string().contains("docker network rm kind"));
        assert!(on("fd00::/64").unwrap_err().to_string().contains("no IPv4"));
        assert!(on("nonsense").is_err());
    }
}

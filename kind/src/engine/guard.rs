//! The private engine's egress guard: before dockerd starts, a DOCKER-USER chain that drops everything
//! forwarded out of the host's external interface(s). dockerd keeps an existing DOCKER-USER chain and jumps to it
//! first, so containers reach each other, the host and ports published on loopback, and nothing else.

use crate::run::cmd;

const COMMENT: &str = "fakecloud egress guard";

/// Interfaces that lead off this machine: those of the default routes (IPv4 and IPv6).
pub fn external_interfaces() -> Vec<String> {
    let mut routes = String::new();
    for family in ["-4", "-6"] {
        if let Ok(out) = cmd("ip", [family, "route", "show", "default"]).output() {
            routes.push_str(&out);
            routes.push('\n');
        }
    }
    interfaces_of_routes(&routes)
}

/// The `dev` of each route line, sorted, once each.
fn interfaces_of_routes(routes: &str) -> Vec<String> {
    let mut out: Vec<String> = routes
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.windows(2).find(|w| w[0] == "dev").map(|w| w[1].to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn drop_rule(iface: &str) -> [&str; 8] {
    ["-o", iface, "-m", "comment", "--comment", COMMENT, "-j", "DROP"]
}

/// Put the guard in place (idempotent), for IPv4 and IPv6.
pub fn install() -> anyhow::Result<()> {
    let ifaces = external_interfaces();
    if ifaces.is_empty() {
        tracing::info!("this machine has no default route: nothing leads off it, the guard has nothing to drop");
    }
    for tool in ["iptables", "ip6tables"] {
        if crate::host::on_path(tool).is_none() {
            continue;
        }
        // An existing chain is fine: -N fails on it.
        let _ = cmd(tool, ["-N", "DOCKER-USER"]).succeeds();
        if !cmd(tool, ["-C", "FORWARD", "-j", "DOCKER-USER"]).succeeds() {
            cmd(tool, ["-I", "FORWARD", "1", "-j", "DOCKER-USER"]).run()?;
        }
        for iface in &ifaces {
            if !cmd(tool, ["-C", "DOCKER-USER"]).args(drop_rule(iface)).succeeds() {
                cmd(tool, ["-I", "DOCKER-USER", "1"]).args(drop_rule(iface)).run()?;
            }
        }
    }
    Ok(())
}

/// Whether the DROP rule is in DOCKER-USER for every external interface and FORWARD reaches DOCKER-USER before
/// dockerd's own ACCEPT rules.
pub fn in_place() -> bool {
    let forward = cmd("iptables", ["-S", "FORWARD"]).output().unwrap_or_default();
    external_interfaces()
        .iter()
        .all(|iface| cmd("iptables", ["-C", "DOCKER-USER"]).args(drop_rule(iface)).succeeds() && jumps_first(&forward))
}

/// `iptables -S FORWARD`'s first rule (after the policy line) is the jump to DOCKER-USER.
fn jumps_first(forward: &str) -> bool {
    forward.lines().nth(1) == Some("-A FORWARD -j DOCKER-USER")
}

/// `iptables -S DOCKER-USER`, for `engine status`.
pub fn listing() -> String {
    cmd("iptables", ["-S", "DOCKER-USER"]).output().unwrap_or_else(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_external_interfaces_are_the_default_routes_devices() {
        let routes = "default via 10.0.0.1 dev eth0 proto dhcp src 10.0.0.5 metric 100\n\
                      default via fe80::1 dev eth0 proto ra metric 1024 expires 1798sec\n\
                      default dev wg0 scope link\n\n";
        assert_eq!(interfaces_of_routes(routes), ["eth0", "wg0"]);
        assert!(interfaces_of_routes("").is_empty());
    }

    #[test]
    fn the_guard_must_be_the_first_rule_of_forward() {
        assert!(jumps_first("-P FORWARD DROP\n-A FORWARD -j DOCKER-USER\n-A FORWARD -j DOCKER-FORWARD"));
        assert!(!jumps_first("-P FORWARD DROP\n-A FORWARD -j DOCKER-FORWARD\n-A FORWARD -j DOCKER-USER"));
        assert!(!jumps_first("-P FORWARD ACCEPT"));
    }
}

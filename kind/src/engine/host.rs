//! What dockerd changes on the host, saved before it starts and put back after it stops: the firewall rules
//! (the whole nftables ruleset where iptables is nft's, as on Debian: tables dockerd creates go again too), the
//! forwarding sysctls, and the bridges and veths it made.

use std::path::Path;

use anyhow::Context as _;

use crate::run::cmd;

const SYSCTLS: [&str; 3] = ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding", "net.ipv6.conf.default.forwarding"];

/// The host's network links by name (`ip -o link show`, without the `@peer` part).
fn links() -> anyhow::Result<Vec<String>> {
    Ok(link_names(&cmd("ip", ["-o", "link", "show"]).output()?))
}

fn link_names(ip_link: &str) -> Vec<String> {
    ip_link
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .collect()
}

/// The links made since `saved` that are dockerd's to make: its default bridge, a bridge per network, veths.
fn made_by_dockerd<'a>(now: &'a [String], saved: &[String]) -> Vec<&'a str> {
    now.iter()
        .filter(|l| !saved.contains(l))
        .filter(|l| *l == "docker0" || l.starts_with("br-") || l.starts_with("veth"))
        .map(String::as_str)
        .collect()
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    // Written whole or not at all: a half snapshot would be restored as the host's state.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// Remember the rules, links and sysctls dockerd will change. An engine that died without `stop` left the first
/// snapshot: it is kept, as it is the host before any engine.
pub fn save(saved: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(saved)?;
    if saved.join("nft").exists() || saved.join("iptables").exists() {
        return Ok(());
    }
    if cmd("iptables", ["-V"]).output()?.contains("nf_tables") {
        write(&saved.join("nft"), &cmd("nft", ["list", "ruleset"]).output()?)?;
    } else {
        if let Ok(v6) = cmd("ip6tables-save", [""; 0]).output() {
            write(&saved.join("ip6tables"), &v6)?;
        }
        write(&saved.join("iptables"), &cmd("iptables-save", [""; 0]).output()?)?;
    }
    write(&saved.join("links"), &(links()?.join("\n") + "\n"))?;
    let sysctls: String =
        SYSCTLS.iter().map(|s| format!("{s}={}\n", cmd("sysctl", ["-n", s]).output().unwrap_or_default())).collect();
    write(&saved.join("sysctls"), &sysctls)
}

/// Put the host back as `save` found it, and forget the snapshot.
pub fn restore(saved: &Path) -> anyhow::Result<()> {
    if !saved.is_dir() {
        return Ok(());
    }
    let read = |name: &str| std::fs::read_to_string(saved.join(name)).ok();
    if let Some(rules) = read("nft") {
        cmd("nft", ["flush", "ruleset"]).run()?;
        cmd("nft", ["-f", "-"]).stdin(rules).run()?;
    } else if let Some(rules) = read("iptables") {
        cmd("iptables-restore", [""; 0]).stdin(rules).run()?;
        if let Some(v6) = read("ip6tables") {
            cmd("ip6tables-restore", [""; 0]).stdin(v6).run()?;
        }
    }
    let before: Vec<String> = read("links").unwrap_or_default().lines().map(str::to_string).collect();
    let now = links()?;
    for link in made_by_dockerd(&now, &before) {
        // Gone already with its peer, or never deletable: nothing else to do about it.
        let _ = cmd("ip", ["link", "delete", link]).succeeds();
    }
    for line in read("sysctls").unwrap_or_default().lines() {
        // A sysctl the kernel lacks (no IPv6) was saved empty.
        if line.split_once('=').is_some_and(|(_, v)| !v.is_empty()) {
            let _ = cmd("sysctl", ["-qw", line]).succeeds();
        }
    }
    std::fs::remove_dir_all(saved).with_context(|| format!("removing {}", saved.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_named_without_their_peer() {
        let out = "1: lo: <LOOPBACK,UP> mtu 65536\n\
                   7: veth12ab@if6: <BROADCAST> mtu 1500\n\
                   4: br-3f2a: <NO-CARRIER> mtu 1500\n";
        assert_eq!(link_names(out), ["lo", "veth12ab", "br-3f2a"]);
    }

    #[test]
    fn only_what_dockerd_makes_and_was_not_there_before_is_deleted() {
        let saved = vec!["lo".to_string(), "eth0".to_string(), "br-users".to_string()];
        let now: Vec<String> =
            ["lo", "eth0", "br-users", "docker0", "br-9a", "veth1", "wg0"].iter().map(|s| s.to_string()).collect();
        assert_eq!(made_by_dockerd(&now, &saved), ["docker0", "br-9a", "veth1"]);
    }
}

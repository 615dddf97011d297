//! The cloud's names in the cluster: the emulator answers DNS for the cloud's zones (`fakecloud serve
//! --dns-listen`, emulator/src/dns.rs), and CoreDNS forwards just those zones to it, as a cluster on AWS resolves
//! `*.elb.amazonaws.com` through its VPC's resolver; so a pod reaches a load balancer by the hostname a CCM writes
//! to a Service's status. The host reaches the emulator's address on the kind network, as it reaches the load
//! balancers': its test runner asks there, without editing the host's resolver.

use std::net::Ipv4Addr;

/// The zones the emulator answers (emulator/src/dns.rs): load balancers' names (classic ELBs' and NLBs' as AWS
/// names them: `….elb.amazonaws.com` and `….elb.<region>.amazonaws.com`, whichever region), and instances' private
/// DNS names (`<region>.compute.internal`). The emulator refuses other names in them; the cluster has no other way
/// out to AWS's anyway.
const ZONES: &str = "lb.fakecloud.test amazonaws.com compute.internal";

/// `corefile` (kubeadm's CoreDNS configuration) with a server block that forwards the cloud's zones to the
/// emulator at `emulator`, port 53, in place of one an earlier `kind-up` added (CoreDNS refuses a zone served
/// twice). No `cache`: the emulator's answers carry their own short TTL, and none for a name not there yet.
pub fn with_cloud_zones(corefile: &str, emulator: Ipv4Addr) -> String {
    let mut kept = Vec::new();
    let mut in_ours = false;
    for line in corefile.lines() {
        // Every block this adds, now or before, starts with the load balancers' zone.
        in_ours = in_ours || line.starts_with("lb.fakecloud.test ");
        if !in_ours {
            kept.push(line);
        }
        in_ours = in_ours && line.trim() != "}";
    }
    format!("{}\n{ZONES} {{\n    errors\n    forward . {emulator}:53\n}}\n", kept.join("\n").trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cloud_zones_are_forwarded_once_and_the_rest_kept() {
        let kubeadms = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n    reload\n}\n";
        let with = with_cloud_zones(kubeadms, Ipv4Addr::new(172, 18, 255, 250));
        assert_eq!(
            with,
            ".:53 {\n    errors\n    forward . /etc/resolv.conf\n    reload\n}\n\
             lb.fakecloud.test amazonaws.com compute.internal {\n    errors\n    forward . 172.18.255.250:53\n}\n"
        );
        assert_eq!(with_cloud_zones(&with, Ipv4Addr::new(172, 18, 255, 250)), with);
        // An earlier kind-up's block, with fewer zones, is replaced.
        let earlier = format!(
            "{}\nlb.fakecloud.test compute.internal {{\n    errors\n    forward . 10.0.0.1:53\n}}\n",
            kubeadms.trim_end()
        );
        assert_eq!(with_cloud_zones(&earlier, Ipv4Addr::new(172, 18, 255, 250)), with);
    }
}

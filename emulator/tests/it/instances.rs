//! Instance lifecycle, addressing, filters and pagination over real HTTP.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::common::{Emu, kind_config, wait_state};
use fakecloud_api::{CreateInstanceRequest, InstanceState, ListInstancesQuery, Market, codes};
use fakecloud_emulator::config::{Config, Timings};

fn req(name: &str) -> CreateInstanceRequest {
    CreateInstanceRequest { name: name.into(), ..Default::default() }
}

#[tokio::test]
async fn lifecycle_goes_through_the_timed_states() {
    let t = Timings {
        boot_delay: Duration::from_millis(300),
        stop_delay: Duration::from_millis(300),
        terminate_delay: Duration::from_millis(300),
        ..Timings::instant()
    };
    let emu = Emu::with_timings(t).await;
    let i = emu
        .user
        .create_instance(
            &CreateInstanceRequest { zone: Some("local-1b".into()), market: Market::Spot, ..req("node-1") },
            None,
        )
        .await
        .unwrap();
    assert_eq!(i.state, InstanceState::Pending);
    assert_eq!(i.provider_id, format!("fakecloud://local-1b/{}", i.id));
    assert_eq!(i.region, "local-1");
    assert_eq!(i.market, Market::Spot);
    assert!(i.private_ip.to_string().starts_with("10.0.64."), "zone b's subnet is 10.0.64.0/18, got {}", i.private_ip);
    wait_state(&emu.user, &i.id, InstanceState::Running).await;

    assert_eq!(emu.user.stop_instance(&i.id).await.unwrap().state, InstanceState::Stopping);
    wait_state(&emu.user, &i.id, InstanceState::Stopped).await;
    // Starting a stopping/stopped instance twice is fine; starting a terminated one is not.
    assert_eq!(emu.user.start_instance(&i.id).await.unwrap().state, InstanceState::Pending);
    wait_state(&emu.user, &i.id, InstanceState::Running).await;

    assert_eq!(emu.user.terminate_instance(&i.id).await.unwrap().state, InstanceState::ShuttingDown);
    let gone = wait_state(&emu.user, &i.id, InstanceState::Terminated).await;
    assert_eq!(gone.name, "node-1");
    let err = emu.user.start_instance(&i.id).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::INCORRECT_INSTANCE_STATE)));
    // Terminated instances stay listable, and their name is free again.
    let listed = emu
        .user
        .list_instances(&ListInstancesQuery { state: Some(InstanceState::Terminated), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    emu.instance("node-1").await;
}

#[tokio::test]
async fn the_instance_quota_counts_live_instances() {
    let emu = Emu::start().await;
    emu.admin.set_quota(fakecloud_api::QuotaName::Instances, 2).await.unwrap();
    let a = emu.instance("a").await;
    emu.instance("b").await;
    let err = emu.user.create_instance(&req("c"), None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(422), Some(codes::INSTANCE_LIMIT_EXCEEDED)));
    assert!(err.to_string().contains("instances (limit 2)"), "{err}");
    assert_eq!(emu.user.get_quota(fakecloud_api::QuotaName::Instances).await.unwrap().usage, Some(2));
    emu.user.terminate_instance(&a.id).await.unwrap();
    wait_state(&emu.user, &a.id, InstanceState::Terminated).await;
    emu.instance("c").await;
}

#[tokio::test]
async fn names_are_unique_among_live_instances() {
    let emu = Emu::start().await;
    emu.instance("node-1").await;
    let err = emu.user.create_instance(&req("node-1"), None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::INSTANCE_NAME_IN_USE)));
    assert!(err.to_string().contains("node-1"));
}

#[tokio::test]
async fn private_ips_come_from_the_zone_and_are_never_shared() {
    let emu = Emu::start().await;
    let mut ips = HashSet::new();
    for n in 0..20 {
        let i = emu
            .user
            .create_instance(&CreateInstanceRequest { zone: Some("local-1c".into()), ..req(&format!("n{n}")) }, None)
            .await
            .unwrap();
        assert!(i.private_ip.to_string().starts_with("10.0.1"), "{}", i.private_ip); // 10.0.128.0/18
        assert!(ips.insert(i.private_ip), "duplicate {}", i.private_ip);
    }
}

#[tokio::test]
async fn fixed_private_ips_adopt_machines() {
    let emu = Emu::adopting().await;
    // A kind node's address, outside the VPC but in a network the emulator adopts from: accepted as is.
    let adopted = CreateInstanceRequest { private_ip: Some("172.18.0.3".parse().unwrap()), ..req("kind-worker") };
    assert_eq!(emu.user.create_instance(&adopted, None).await.unwrap().private_ip.to_string(), "172.18.0.3");
    let twice = CreateInstanceRequest { private_ip: Some("172.18.0.3".parse().unwrap()), ..req("kind-worker2") };
    let err = emu.user.create_instance(&twice, None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::ADDRESS_IN_USE)));
    // Inside the VPC it must be in the zone's subnet.
    let wrong_zone = CreateInstanceRequest {
        zone: Some("local-1a".into()),
        private_ip: Some("10.0.64.9".parse().unwrap()),
        ..req("x")
    };
    let err = emu.user.create_instance(&wrong_zone, None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_ADDRESS)));
    let right = CreateInstanceRequest {
        zone: Some("local-1b".into()),
        private_ip: Some("10.0.64.9".parse().unwrap()),
        ..req("y")
    };
    assert_eq!(emu.user.create_instance(&right, None).await.unwrap().private_ip.to_string(), "10.0.64.9");
}

/// An adopted network's network and broadcast addresses are no machine's, as in the VPC's subnets (issue #47); a
/// /31 or a /32 has no such addresses (RFC 3021), so all of its addresses are machines'.
#[tokio::test]
async fn an_adopted_networks_own_addresses_are_no_machines() {
    let mut cfg = kind_config();
    cfg.adopt_networks.extend(["192.0.2.10/31", "192.0.2.20/32"].map(|n| n.parse::<ipnet::IpNet>().unwrap()));
    let emu = Emu::with_config(cfg).await;
    let adopt = |name: &str, ip: &str| CreateInstanceRequest { private_ip: Some(ip.parse().unwrap()), ..req(name) };
    for (ip, says) in [
        ("172.18.0.0", "the network address of the adopted network 172.18.0.0/16"),
        ("::ffff:172.18.0.0", "the network address of the adopted network 172.18.0.0/16"),
        ("172.18.255.255", "the broadcast address of the adopted network 172.18.0.0/16"),
        // The VPC's subnets refuse theirs as they did.
        ("10.0.0.0", "not a usable address of 10.0.0.0/18"),
        ("10.0.63.255", "not a usable address of 10.0.0.0/18"),
    ] {
        let err = emu.user.create_instance(&adopt("n", ip), None).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_ADDRESS)), "{ip}: {err}");
        assert!(err.to_string().contains(says), "{ip}: {err}");
        if !ip.starts_with("10.") {
            assert!(err.to_string().contains("private_ip: "), "names the field: {err}");
        }
    }
    for (n, ip) in ["172.18.0.1", "172.18.255.254", "192.0.2.10", "192.0.2.11", "192.0.2.20"].into_iter().enumerate() {
        let made = emu.user.create_instance(&adopt(&format!("m{n}"), ip), None).await.unwrap();
        assert_eq!(made.private_ip.to_string(), ip);
    }
}

#[tokio::test]
async fn dual_stack_machines_are_adopted_with_both_addresses() {
    let emu = Emu::adopting().await;
    let v6 = |s: &str| Some(s.parse::<std::net::Ipv6Addr>().unwrap());
    let dual = CreateInstanceRequest {
        private_ip: Some("172.18.0.3".parse().unwrap()),
        ipv6_address: v6("fc00:f853:ccd:e793::3"),
        ..req("kind-worker")
    };
    let a = emu.user.create_instance(&dual, None).await.unwrap();
    assert_eq!(a.ipv6_address, v6("fc00:f853:ccd:e793::3"));
    let got = emu.user.get_instance(&a.id).await.unwrap();
    let addrs: Vec<String> = got.addresses().map(|a| a.to_string()).collect();
    assert_eq!(addrs, ["172.18.0.3", "fc00:f853:ccd:e793::3"]);
    // One machine per address, of either family; written in another form, it is the same address.
    let same_v6 = CreateInstanceRequest {
        private_ip: Some("172.18.0.4".parse().unwrap()),
        ipv6_address: v6("fc00:f853:0ccd:e793:0::3"),
        ..req("kind-worker2")
    };
    let err = emu.user.create_instance(&same_v6, None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::ADDRESS_IN_USE)), "{err}");
    // An IPv6 address goes beside an IPv4 private IP, and must be one a machine is reached at.
    for (private_ip, ipv6_address, why) in [
        ("fc00::9", "fc00::10", "is IPv6 already"),
        ("172.18.0.5", "::1", "loopback"),
        ("172.18.0.5", "fe80::1", "link-local"),
        ("172.18.0.5", "::ffff:172.18.0.6", "IPv4-mapped"),
    ] {
        let bad = CreateInstanceRequest {
            private_ip: Some(private_ip.parse().unwrap()),
            ipv6_address: v6(ipv6_address),
            ..req("bad")
        };
        let err = emu.user.create_instance(&bad, None).await.unwrap_err();
        assert_eq!(err.status(), Some(400), "{ipv6_address}: {err}");
        assert!(err.to_string().contains("ipv6_address") && err.to_string().contains(why), "{err}");
    }
    // Terminated, the machine gives its IPv6 address back too.
    emu.user.terminate_instance(&a.id).await.unwrap();
    wait_state(&emu.user, &a.id, InstanceState::Terminated).await;
    let again = CreateInstanceRequest { ipv6_address: v6("fc00:f853:ccd:e793::3"), ..same_v6 };
    assert_eq!(emu.user.create_instance(&again, None).await.unwrap().ipv6_address, v6("fc00:f853:ccd:e793::3"));
}

#[tokio::test]
async fn terminated_instances_give_their_address_back() {
    let emu = Emu::start().await;
    let pinned = CreateInstanceRequest { private_ip: Some("10.0.0.50".parse().unwrap()), ..req("a") };
    let a = emu.user.create_instance(&pinned, None).await.unwrap();
    emu.user.terminate_instance(&a.id).await.unwrap();
    wait_state(&emu.user, &a.id, InstanceState::Terminated).await;
    let again = CreateInstanceRequest { private_ip: Some("10.0.0.50".parse().unwrap()), ..req("b") };
    assert_eq!(emu.user.create_instance(&again, None).await.unwrap().private_ip.to_string(), "10.0.0.50");
}

#[tokio::test]
async fn list_filters_and_pages() {
    let emu = Emu::start().await;
    for n in 0..25 {
        let tags = BTreeMap::from([("pool".to_string(), if n % 5 == 0 { "gpu" } else { "cpu" }.to_string())]);
        let zone = ["local-1a", "local-1b"][n % 2];
        emu.user
            .create_instance(&CreateInstanceRequest { zone: Some(zone.into()), tags, ..req(&format!("n{n:02}")) }, None)
            .await
            .unwrap();
    }
    let mut names = Vec::new();
    let mut q = ListInstancesQuery { page_size: Some(10), ..Default::default() };
    let mut pages = 0;
    loop {
        let page = emu.user.list_instances(&q).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 10);
        names.extend(page.items.into_iter().map(|i| i.name));
        match page.next_page_token {
            Some(t) => q.page_token = Some(t),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..25).map(|n| format!("n{n:02}")).collect();
    assert_eq!(names, expected, "pages are in creation order with nothing lost or repeated");

    let gpu = emu
        .user
        .list_all_instances(&ListInstancesQuery { tag: Some("pool=gpu".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(gpu.len(), 5);
    let has_tag = emu
        .user
        .list_all_instances(&ListInstancesQuery { tag: Some("pool".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(has_tag.len(), 25);
    let zone_b = emu
        .user
        .list_all_instances(&ListInstancesQuery { zone: Some("local-1b".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(zone_b.len(), 12);
    let one = emu
        .user
        .list_all_instances(&ListInstancesQuery { name: Some("n07".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(one.len(), 1);
    let running = emu
        .user
        .list_all_instances(&ListInstancesQuery { state: Some(InstanceState::Running), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(running.len(), 25);
}

#[tokio::test]
async fn unknown_instances_are_404_with_a_specific_code() {
    let emu = Emu::start().await;
    for res in [
        emu.user.get_instance("i-nope").await,
        emu.user.stop_instance("i-nope").await,
        emu.user.terminate_instance("i-nope").await,
    ] {
        let err = res.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(404), Some(codes::INSTANCE_NOT_FOUND)));
    }
}

#[tokio::test]
async fn region_describes_zones_and_types() {
    let emu = Emu::start().await;
    let r = emu.user.region().await.unwrap();
    assert_eq!(r.name, "local-1");
    let zones: Vec<&str> = r.zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(zones, ["local-1a", "local-1b", "local-1c"]);
    assert!(r.instance_types.iter().any(|t| t.name == "fc.small"));
    let err = emu
        .user
        .create_instance(&CreateInstanceRequest { instance_type: Some("huge".into()), ..req("x") }, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("instance_type") && err.to_string().contains("fc.small"), "{err}");
}

/// An adopted machine's address must be one it can be reached at: not unspecified, broadcast, loopback,
/// multicast or link-local (in either family).
#[tokio::test]
async fn unusable_private_ips_are_refused() {
    let emu = Emu::adopting().await;
    for ip in [
        "0.0.0.0",
        "255.255.255.255",
        "127.0.0.1",
        "127.12.0.9",
        "224.0.0.1",
        "239.255.255.250",
        "169.254.169.254",
        "::",
        "::1",
        "ff02::1",
        "fe80::1",
        "::ffff:127.0.0.1",
    ] {
        let req = CreateInstanceRequest {
            name: "adopted".into(),
            private_ip: Some(ip.parse().unwrap()),
            ..Default::default()
        };
        let err = emu.user.create_instance(&req, None).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_ADDRESS)), "{ip}: {err}");
        assert!(err.to_string().contains("private_ip"), "{ip}: {err}");
    }
    // An ordinary address outside the VPC, in a network the emulator adopts from (a kind node's), is adopted.
    let req = CreateInstanceRequest {
        name: "kind-node".into(),
        private_ip: Some("172.18.0.2".parse().unwrap()),
        ..Default::default()
    };
    emu.user.create_instance(&req, None).await.unwrap();
}

/// `serve --loopback-instances`: loopback addresses are accepted (backends that are processes on the emulator's
/// host); everything else that cannot be a machine's address is still refused.
#[tokio::test]
async fn loopback_private_ips_are_accepted_only_when_the_emulator_allows_them() {
    let cfg = Config { timings: Timings::instant(), loopback_instances: true, ..Config::default() };
    let emu = Emu::with_config(cfg).await;
    let adopt = |name: &str, ip: &str| CreateInstanceRequest {
        name: name.into(),
        private_ip: Some(ip.parse().unwrap()),
        ..Default::default()
    };
    let local = emu.user.create_instance(&adopt("local", "127.78.0.1"), None).await.unwrap();
    assert_eq!(local.private_ip.to_string(), "127.78.0.1");
    let err = emu.user.create_instance(&adopt("again", "127.78.0.1"), None).await.unwrap_err();
    assert_eq!(err.status(), Some(409), "{err}");
    let err = emu.user.create_instance(&adopt("multicast", "224.0.0.1"), None).await.unwrap_err();
    assert_eq!(err.code(), Some(codes::INVALID_ADDRESS), "{err}");
}

/// A machine's address is one a real cloud would give it: in the VPC (or a network the emulator adopts machines
/// from), never a load balancer's, never the emulator host's own, whichever way it is written.
#[tokio::test]
async fn machines_are_only_where_machines_can_be() {
    let host_ip = nix::ifaddrs::getifaddrs()
        .unwrap()
        .filter_map(|i| i.address?.as_sockaddr_in().map(|a| std::net::IpAddr::V4(a.ip())))
        .find(|ip| !ip.is_loopback());
    // The emulator serves load balancers, and adopts from the kind network and from the host's own network (as
    // a user might, by mistake).
    let mut cfg = Config { serve_load_balancers: true, ..kind_config() };
    if let Some(ip) = host_ip {
        cfg.adopt_networks.push(ipnet::IpNet::new(ip, 32).unwrap());
    }
    let emu = Emu::with_config(cfg).await;
    let adopt = |name: &str, ip: &str| CreateInstanceRequest { private_ip: Some(ip.parse().unwrap()), ..req(name) };
    let refused = async |name: &str, ip: &str, says: &str| {
        let err = emu.user.create_instance(&adopt(name, ip), None).await.unwrap_err();
        assert_eq!((err.status(), err.code()), (Some(400), Some(codes::INVALID_ADDRESS)), "{ip}: {err}");
        assert!(err.to_string().contains(says), "{ip}: {err}");
    };
    // An IPv4-mapped address is the IPv4 address it maps: in use is in use.
    let first = emu.user.create_instance(&adopt("a", "10.0.0.2"), None).await.unwrap();
    assert_eq!(first.private_ip.to_string(), "10.0.0.2");
    let err = emu.user.create_instance(&adopt("b", "::ffff:10.0.0.2"), None).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::ADDRESS_IN_USE)), "{err}");
    let mapped = emu.user.create_instance(&adopt("c", "::ffff:172.18.0.9"), None).await.unwrap();
    assert_eq!(mapped.private_ip.to_string(), "172.18.0.9", "stored in its IPv4 form");
    // Off the VPC and the adopted networks, as a real cloud refuses a private IP outside its subnets.
    for off in ["198.51.100.9", "0.0.0.1", "::ffff:198.51.100.9", "2001:db8::5"] {
        refused("d", off, "--adopt-networks").await;
    }
    // A load balancer's addresses: the public pool and the internal load balancers' subnet, in either form.
    refused("e", "203.0.113.7", "public pool").await;
    refused("e", "::ffff:203.0.113.7", "public pool").await;
    refused("e", "10.0.192.5", "internal load balancers").await;
    // The emulator's host's own address, even inside a network it adopts from: load balancer traffic would go there.
    if let Some(ip) = host_ip {
        refused("f", &ip.to_string(), "this host's own address").await;
    }
}

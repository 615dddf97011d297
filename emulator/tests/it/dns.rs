//! The cloud's names over DNS (`serve --dns-listen`), asked as a client asks them: hickory's resolver, over UDP
//! and TCP, pointed at the emulator's DNS address.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};

use fakecloud_api::{CreateLoadBalancerRequest, InstanceState, Listener, LoadBalancerState, Protocol};
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::{Resolver, TokioResolver};

use crate::common::{Emu, HANG, eventually, wait_state};

/// A resolver that asks only the emulator, over `transport`, and keeps nothing: each lookup is the store's answer.
fn resolver(dns: SocketAddr, mut transport: ConnectionConfig) -> TokioResolver {
    transport.port = dns.port();
    let mut server = NameServerConfig::udp(dns.ip());
    server.connections = vec![transport];
    let mut builder = Resolver::builder_with_config(
        ResolverConfig::from_parts(None, vec![], vec![server]),
        TokioRuntimeProvider::default(),
    );
    builder.options_mut().cache_size = 0;
    builder.build().unwrap()
}

async fn addresses(r: &TokioResolver, name: &str) -> Result<Vec<IpAddr>, hickory_resolver::net::NetError> {
    r.lookup_ip(name).await.map(|found| found.iter().collect())
}

#[tokio::test]
async fn a_load_balancers_name_answers_its_address_while_it_is_active() {
    let mut emu = Emu::start().await;
    let dns = emu.server.as_mut().unwrap().serve_dns("127.0.0.1:0").await.unwrap();
    let node = emu.instance("web-1").await;
    let req = CreateLoadBalancerRequest {
        name: "web".into(),
        listeners: vec![Listener { protocol: Protocol::Tcp, port: 80, backend_port: 30080 }],
        backends: vec![node.id.clone()],
        ..Default::default()
    };
    let created = emu.user.create_load_balancer(&req, None).await.unwrap();
    let active = eventually(HANG, "the load balancer to be active", || async {
        let lb = emu.user.get_load_balancer(&created.id).await.unwrap();
        (lb.state == LoadBalancerState::Active).then_some(lb)
    })
    .await;
    let name = active.dns_name.clone().unwrap();
    for transport in [ConnectionConfig::udp(), ConnectionConfig::tcp()] {
        let r = resolver(dns, transport);
        assert_eq!(addresses(&r, &name).await.unwrap(), vec![active.address.unwrap()]);
        // Case does not matter in DNS.
        assert_eq!(addresses(&r, &name.to_ascii_uppercase()).await.unwrap(), vec![active.address.unwrap()]);
    }
    let r = resolver(dns, ConnectionConfig::udp());
    let other = name.replacen("web-", "webx-", 1);
    assert!(addresses(&r, &other).await.unwrap_err().is_nx_domain(), "{other} is no load balancer's");

    emu.user.delete_load_balancer(&created.id).await.unwrap();
    eventually(HANG, "the deleted load balancer's name to be gone", || async {
        addresses(&r, &name).await.err().filter(|e| e.is_nx_domain())
    })
    .await;
}

#[tokio::test]
async fn a_classic_elbs_name_in_aws_zone_answers_its_address() {
    let mut emu = Emu::start().await;
    let dns = emu.server.as_mut().unwrap().serve_dns("127.0.0.1:0").await.unwrap();
    let subnets = crate::aws_elb::subnets(&emu).await;
    crate::aws_elb::call(&emu, &crate::aws_elb::create_form(&subnets[0], "classic", 80, 30080)).await;
    let lb = emu.user.find_load_balancer("classic").await.unwrap().unwrap();
    let name = lb.dns_name.clone().unwrap();
    assert!(name.starts_with("classic-") && name.ends_with(".local-1.elb.amazonaws.com"), "{name}");
    let r = resolver(dns, ConnectionConfig::udp());
    assert_eq!(addresses(&r, &name).await.unwrap(), vec![lb.address.unwrap()]);
    // The rest of AWS's zone is not the cloud's to answer.
    let other = "sts.amazonaws.com";
    let refused = addresses(&r, other).await.unwrap_err();
    assert!(!refused.is_nx_domain(), "{other} is refused, not said to be missing: {refused}");
}

#[tokio::test]
async fn an_nlbs_name_in_aws_form_answers_its_address() {
    let mut emu = Emu::start().await;
    let dns = emu.server.as_mut().unwrap().serve_dns("127.0.0.1:0").await.unwrap();
    crate::aws_elbv2::create_nlb(&emu, "network").await;
    let lb = emu.user.find_load_balancer("network").await.unwrap().unwrap();
    let name = lb.dns_name.clone().unwrap();
    assert!(name.ends_with(".elb.local-1.amazonaws.com"), "{name}");
    let r = resolver(dns, ConnectionConfig::udp());
    let address =
        eventually(HANG, "the NLB's address", || async { emu.user.find_load_balancer("network").await.ok()??.address })
            .await;
    assert_eq!(addresses(&r, &name).await.unwrap(), vec![address]);
    // Another region's NLB zone is not this cloud's.
    let other = name.replace(".local-1.", ".elsewhere-1.");
    assert!(!addresses(&r, &other).await.unwrap_err().is_nx_domain(), "{other} is refused");
}

#[tokio::test]
async fn an_instances_private_name_answers_until_it_is_terminated() {
    let mut emu = Emu::start().await;
    let dns = emu.server.as_mut().unwrap().serve_dns("127.0.0.1:0").await.unwrap();
    let node = emu.instance("node-1").await;
    let IpAddr::V4(ip) = node.private_ip else { panic!("an IPv4 private address: {node:?}") };
    let name = format!("ip-{}.{}.compute.internal", ip.to_string().replace('.', "-"), node.region);
    let r = resolver(dns, ConnectionConfig::udp());
    assert_eq!(addresses(&r, &name).await.unwrap(), vec![node.private_ip]);

    emu.user.terminate_instance(&node.id).await.unwrap();
    wait_state(&emu.user, &node.id, InstanceState::Terminated).await;
    assert!(addresses(&r, &name).await.unwrap_err().is_nx_domain());
}

#[tokio::test]
async fn names_outside_the_clouds_zones_are_refused() {
    let mut emu = Emu::start().await;
    let dns = emu.server.as_mut().unwrap().serve_dns("127.0.0.1:0").await.unwrap();
    let r = resolver(dns, ConnectionConfig::udp());
    let e = addresses(&r, "example.com").await.unwrap_err();
    assert!(
        matches!(
            &e,
            hickory_resolver::net::NetError::Dns(hickory_resolver::net::DnsError::ResponseCode(ResponseCode::Refused))
        ),
        "{e:?}"
    );
}

//! Conformance: a LoadBalancer Service's EXTERNAL-IP carries traffic. The emulator's data plane
//! (`fakecloud serve --serve-load-balancers`) accepts on the load balancer's address and forwards to the nodes'
//! NodePort, where kube-proxy sends it on to the Service's pods (upstream's `agnhost netexec`, which says which
//! pod answered). What the cases show: the address answers from the host and from a pod, and so does the load
//! balancer's DNS name (the host asks the emulator's DNS, the pod its cluster DNS, which forwards the cloud's
//! zone there: `FAKECLOUD_E2E_DNS`, as `make kind-up` serves it); the cloud's health
//! checks decide which nodes get traffic (`externalTrafficPolicy: Local`: only nodes with an endpoint); a port
//! removed, source ranges, and the type switched away change what answers and nothing else; a CCM restart
//! under throttling, adding a port, drops no connection on the unchanged one; a Service without NodePorts is
//! served by a passthrough load balancer, which keeps the client's address.
//!
//! Against cloud-provider-aws every case states what its classic ELB does instead, from its source (v1.37.1,
//! `pkg/providers/v1/aws.go`): the ingress is the ELB's DNS name, source ranges are its security group's rules, a
//! port without a NodePort or a UDP port beside a TCP one is refused, and a UDP port takes an NLB.
//!
//! Needs real pods and an emulator that serves its load balancers on addresses this host reaches (kind:
//! `make e2e-kind`, whose emulator holds a slice of the kind network); skipped where the kubelets are simulated.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fakecloud_api::{BackendState, Forwarding, ListenerState, LoadBalancer, RateLimitScope, SetRateLimitRequest};
use fakecloud_e2e::traffic::{self, Conn};
use fakecloud_e2e::{Env, HANG, Setup, case, lb, until};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Node, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
const WAIT: Duration = HANG;
/// The second port of the cases that add or remove one: a port a classic ELB may listen on (25, 80, 443, 465, 587
/// or 1024-65535, CreateLoadBalancerListeners), so the cases hold under cloud-provider-aws too.
const ALT_PORT: u16 = 8081;

/// The Service's load balancer in the cloud, once the data plane serves it (its listeners have a status).
async fn cloud_lb(env: &Env, svc: &Service) -> LoadBalancer {
    let name = lb::name(svc);
    let found = env.cloud.find_load_balancer(&name).await.unwrap().expect("the Service's load balancer");
    if found.listener_status.is_empty() {
        panic!(
            "the emulator does not serve load balancers (no listener_status on {}): run it with \
             --serve-load-balancers and a public pool this host reaches, as make kind-up does",
            found.id
        );
    }
    found
}

/// A LoadBalancer Service `name` (to pods labelled `app: name`, port 8080) in `services`' namespace; the address
/// its load balancer answers at ([`Env::wait_for_vip`]) once `GET /hostname` answers there.
async fn expose(env: &Env, services: &Api<Service>, name: &str, extra_spec: serde_json::Value) -> (Service, String) {
    let svc = services.create(&PostParams::default(), &lb::service(name, 80, extra_spec)).await.unwrap();
    let ip = env.wait_for_vip(services, name, HANG).await.to_string();
    until(WAIT, &format!("http://{ip}/hostname answering"), async || {
        traffic::get(&ip, 80, "/hostname").await.ok().filter(|a| a.status == 200)
    })
    .await;
    (svc, ip)
}

fn instance_of(node: &Node) -> String {
    fakecloud_e2e::instance_id(node)
        .unwrap_or_else(|| panic!("node {} has no providerID of the cloud's", node_name(node)))
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap()
}

/// Wait until the cloud's health checks give `instance` the `state`.
async fn backend_turns(env: &Env, lb_id: &str, instance: &str, state: BackendState) {
    until(WAIT, &format!("backend {instance} of {lb_id} {state:?}"), async || {
        let lb = env.cloud.get_load_balancer(lb_id).await.ok()?;
        lb.backend_health.iter().any(|b| b.instance == instance && b.state == state).then_some(())
    })
    .await;
}

/// A namespace of the case's own with one netexec pod, `web` (`app: web`), on the first node that runs pods;
/// the namespace and its Services.
async fn one_pod(env: &Env, base: &str) -> (String, Api<Service>) {
    let node = node_name(&env.pod_nodes().await[0]);
    let ns = env.namespace(base).await;
    traffic::start_netexec(&Api::<Pod>::namespaced(env.client(), &ns), "web", "web", &node).await;
    let services = Api::<Service>::namespaced(env.client(), &ns);
    (ns, services)
}

/// Wait for the CCM's `SyncLoadBalancerFailed` on Service `name`: a Warning whose message contains `what`, while
/// the Service is still `<pending>`.
async fn refused(env: &Env, ns: &str, services: &Api<Service>, name: &str, what: &str) {
    let failed = env.event(ns, name, "SyncLoadBalancerFailed", HANG).await;
    let msg = failed.message.unwrap_or_default();
    assert_eq!(failed.type_.as_deref(), Some("Warning"), "{msg}");
    assert!(msg.contains(what), "the CCM says why: {msg}");
    assert_eq!(lb::ingress(&services.get(name).await.unwrap()), None, "{name} stays <pending>");
}

/// A Service spec's `ports`: (name, port, protocol), each to netexec's port of that protocol.
fn ports(list: &[(&str, u16, &str)]) -> serde_json::Value {
    let ports: Vec<_> = list
        .iter()
        .map(|(name, port, protocol)| {
            let target = if *protocol == "UDP" { traffic::NETEXEC_UDP_PORT } else { traffic::NETEXEC_PORT };
            serde_json::json!({"name": name, "port": port, "targetPort": target, "protocol": protocol})
        })
        .collect();
    serde_json::json!({ "ports": ports })
}

async fn patch(services: &Api<Service>, name: &str, spec: serde_json::Value) {
    let body = serde_json::json!({ "spec": spec });
    services.patch(name, &PatchParams::default(), &Patch::Merge(&body)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_external_ip_answers_from_the_host_and_a_pod_until_the_service_is_no_load_balancer() {
    // Under cloud-provider-aws the Service's ingress is the classic ELB's DNS name, which resolves to the address
    // it answers at (`expose`); the rest is the same.
    case("lb-traffic", Setup::new(CCM).runs_pods_on(1).stated_for_aws(), async |env| {
        let (_, services) = one_pod(env, "lb-traffic").await;
        let (svc, ip) = expose(env, &services, "web", serde_json::json!({})).await;

        // From the host: through the emulator's listener, a node's NodePort and kube-proxy, to the pod.
        let answer = traffic::get(&ip, 80, "/hostname").await.unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (200, "web"), "the pod answers through the EXTERNAL-IP");
        let cloud = cloud_lb(env, &svc).await;
        assert!(
            cloud.listener_status.iter().any(|l| l.port == 80 && l.state == ListenerState::Listening),
            "the cloud shows its listener listening: {:?}",
            cloud.listener_status
        );
        // From a pod: netexec's /dial asks the pod itself to fetch /hostname from the EXTERNAL-IP.
        let dial = format!("/dial?request=hostname&protocol=http&host={ip}&port=80&tries=1");
        let answer = traffic::get(&ip, 80, &dial).await.unwrap();
        assert!(answer.status == 200 && answer.body.contains("\"web\""), "a pod reaches the EXTERNAL-IP: {answer:?}");

        // By the load balancer's DNS name, as on AWS: from this host, asking the cloud's DNS; and from the pod,
        // whose cluster DNS forwards the cloud's zone there.
        let dns = env.cloud_dns().unwrap_or_else(|| {
            panic!("the case resolves the load balancer's name: set FAKECLOUD_E2E_DNS to the emulator's DNS address (make kind-up serves it)")
        });
        let name = cloud.dns_name.clone().expect("an active load balancer has a DNS name");
        let found = fakecloud_controlplane::names::resolve(dns, &name, HANG).await.unwrap();
        assert_eq!(found, [ip.parse::<std::net::IpAddr>().unwrap()], "{name} resolves to the EXTERNAL-IP");
        let dial = format!("/dial?request=hostname&protocol=http&host={name}&port=80&tries=1");
        let answer = traffic::get(&ip, 80, &dial).await.unwrap();
        assert!(answer.status == 200 && answer.body.contains("\"web\""), "a pod reaches {name}: {answer:?}");

        // Not a LoadBalancer any more: the CCM deletes the load balancer, and its address stops answering.
        patch(&services, "web", serde_json::json!({"type": "ClusterIP"})).await;
        let gone = until(WAIT, &format!("http://{ip}:80 no longer answering"), async || {
            traffic::get(&ip, 80, "/hostname").await.err()
        })
        .await;
        eprintln!("after the type change: {gone}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_external_traffic_policy_local_only_nodes_with_endpoints_get_traffic_and_scaling_spreads_it() {
    // Under cloud-provider-aws the classic ELB's health check is the same HTTP check of the healthCheckNodePort
    // (aws.go L2756), and its ingress a DNS name.
    case("lb-etp-local", Setup::new(CCM).runs_pods_on(2).stated_for_aws(), async |env| {
        let nodes = env.pod_nodes().await;
        let (first, second) = (&nodes[0], &nodes[1]);
        let ns = env.namespace("lb-etp-local").await;
        let pods = Api::<Pod>::namespaced(env.client(), &ns);
        traffic::start_netexec(&pods, "web-a", "web", &node_name(first)).await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        let (svc, ip) = expose(env, &services, "web", serde_json::json!({"externalTrafficPolicy": "Local"})).await;
        let cloud = cloud_lb(env, &svc).await;
        let check = cloud.health_check.clone().expect("a health check");
        let hc_port = svc.spec.as_ref().and_then(|s| s.health_check_node_port).unwrap();
        assert_eq!((i32::from(check.port), check.path.as_deref()), (hc_port, Some("/healthz")), "{check:?}");

        // kube-proxy answers the healthCheckNodePort with 503 on the node without an endpoint: no traffic there.
        backend_turns(env, &cloud.id, &instance_of(first), BackendState::Healthy).await;
        backend_turns(env, &cloud.id, &instance_of(second), BackendState::Unhealthy).await;
        let answers = traffic::hostnames(&ip, 80, 20).await.unwrap();
        assert!(answers.iter().all(|a| a == "web-a"), "only web-a's node gets traffic: {answers:?}");
        // The proxy is L4 and opens its own connection to the node: the pod sees the load balancer's address,
        // not the client's. The cloud says so and the CCM passes it on as `ipMode: Proxy` (as cloud-provider-kind
        // does for its Envoy), which is when upstream's e2e skips its source-IP checks. cloud-provider-aws writes
        // the ELB's name alone (`toStatus`, aws.go L2879), and no node short-cuts a name: no `ipMode`.
        let client = traffic::get(&ip, 80, "/clientip").await.unwrap();
        eprintln!("web-a sees the client as {}", client.body);
        let ingress = ingress(&services).await;
        let mode = if env.ccm_is_aws() { None } else { Some("Proxy") };
        assert_eq!(ingress.ip_mode.as_deref(), mode, "{ingress:?}");

        // A pod on the second node: its health check turns healthy and the load balancer spreads across both.
        traffic::start_netexec(&pods, "web-b", "web", &node_name(second)).await;
        backend_turns(env, &cloud.id, &instance_of(second), BackendState::Healthy).await;
        let answers = traffic::hostnames(&ip, 80, 40).await.unwrap();
        let seen: BTreeSet<&str> = answers.iter().map(String::as_str).collect();
        assert_eq!(seen, BTreeSet::from(["web-a", "web-b"]), "both nodes get connections: {answers:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_node_ports_a_passthrough_load_balancer_keeps_the_clients_address_until_node_ports_come() {
    case("lb-passthrough", Setup::new(CCM).runs_pods_on(1).stated_for_aws(), async |env| {
        let (ns, services) = one_pod(env, "lb-passthrough").await;
        // `Local`: kube-proxy then does not masquerade, so the pod sees whoever's packets reach it.
        let spec = serde_json::json!({"allocateLoadBalancerNodePorts": false, "externalTrafficPolicy": "Local"});
        if env.ccm_is_aws() {
            return only_through_node_ports(env, &ns, &services, spec).await;
        }
        let (svc, ip) = expose(env, &services, "web", spec).await;
        let ports = svc.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
        assert!(ports.iter().all(|p| p.node_port.is_none()), "no NodePort: {ports:?}");
        let cloud = cloud_lb(env, &svc).await;
        assert_eq!(cloud.forwarding, Forwarding::Passthrough, "a port without a NodePort asks for passthrough");
        let ip_mode = ingress(&services).await.ip_mode;
        assert_eq!(
            ip_mode.as_deref(),
            Some("VIP"),
            "the apiserver's default, left alone: kube-proxy serves the address"
        );

        // Routed to the node unchanged: the pod sees this very socket's address as the client's.
        let mut conn = Conn::open(&ip, 80).await.unwrap();
        let me = conn.local_addr().unwrap();
        let seen = conn.get("/clientip").await.unwrap();
        assert_eq!((seen.status, seen.body.as_str()), (200, me.to_string().as_str()), "the client's own address");

        // NodePorts allocated: the same address, now a proxy, whose own connection the pod sees.
        patch(&services, "web", serde_json::json!({"allocateLoadBalancerNodePorts": true})).await;
        until(WAIT, "the load balancer to become a proxy", async || {
            let lb = env.cloud.get_load_balancer(&cloud.id).await.ok()?;
            (lb.forwarding == Forwarding::Proxy).then_some(())
        })
        .await;
        let proxied = until(WAIT, "the pod to see the proxy's address", async || {
            let seen = traffic::get(&ip, 80, "/clientip").await.ok().filter(|a| a.status == 200)?;
            (!seen.body.starts_with(&format!("{}:", me.ip()))).then_some(seen.body)
        })
        .await;
        eprintln!("through the proxy the pod sees {proxied}, not {me}");
        let now = ingress(&services).await;
        assert_eq!((now.ip.as_deref(), now.ip_mode.as_deref()), (Some(ip.as_str()), Some("Proxy")), "{now:?}");
    })
    .await;
}

/// cloud-provider-aws has no passthrough: it skips a port without a NodePort ("Ignoring port without NodePort
/// defined", aws.go L2409), and a classic ELB without a listener is refused (`ValidationError`). The Service is
/// `<pending>`, saying so, until NodePorts come; then the ELB proxies, and the pod sees its connection, not the
/// client's.
async fn only_through_node_ports(env: &Env, ns: &str, services: &Api<Service>, spec: serde_json::Value) {
    services.create(&PostParams::default(), &lb::service("web", 80, spec)).await.unwrap();
    refused(env, ns, services, "web", "ValidationError").await;

    patch(services, "web", serde_json::json!({"allocateLoadBalancerNodePorts": true})).await;
    let ip = env.wait_for_vip(services, "web", HANG).await.to_string();
    let mut conn = until(WAIT, &format!("http://{ip}/ answering"), async || {
        let mut conn = Conn::open(&ip, 80).await.ok()?;
        conn.get("/hostname").await.ok().filter(|a| a.status == 200)?;
        Some(conn)
    })
    .await;
    let me = conn.local_addr().unwrap();
    let seen = conn.get("/clientip").await.unwrap();
    assert!(!seen.body.starts_with(&format!("{}:", me.ip())), "the pod sees the ELB's connection, not {me}: {seen:?}");
}

/// The `web` Service's first ingress, as it is now.
async fn ingress(services: &Api<Service>) -> LoadBalancerIngress {
    lb::ingress(&services.get("web").await.unwrap()).cloned().expect("an ingress")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_port_stops_only_that_port_and_keeps_the_others_connections() {
    // The same against cloud-provider-aws: it deletes the ELB's listener and revokes its group's rule.
    case("lb-ports", Setup::new(CCM).runs_pods_on(1).stated_for_aws(), async |env| {
        let (_, services) = one_pod(env, "lb-ports").await;
        let (_, ip) = expose(env, &services, "web", ports(&[("web", 80, "TCP"), ("alt", ALT_PORT, "TCP")])).await;
        until(WAIT, &format!("port {ALT_PORT} answering"), async || {
            traffic::get(&ip, ALT_PORT, "/hostname").await.ok()
        })
        .await;
        let mut kept = Conn::open(&ip, 80).await.unwrap();
        assert_eq!(kept.get("/hostname").await.unwrap().status, 200);

        patch(&services, "web", ports(&[("web", 80, "TCP")])).await;
        let why = until(WAIT, &format!("port {ALT_PORT} no longer answering"), async || {
            traffic::get(&ip, ALT_PORT, "/hostname").await.err()
        })
        .await;
        eprintln!("port {ALT_PORT} after its removal: {why}");
        let again = kept.get("/hostname").await;
        assert_eq!(again.map(|a| a.status), Ok(200), "the connection on the unchanged port 80 lives on");
        assert_eq!(traffic::get(&ip, 80, "/hostname").await.map(|a| a.status), Ok(200), "port 80 takes new ones");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_port_answers_datagrams_from_a_pod() {
    case("lb-udp", Setup::new(CCM).runs_pods_on(1).stated_for_aws(), async |env| {
        let (ns, services) = one_pod(env, "lb-udp").await;
        if env.ccm_is_aws() {
            return udp_through_an_nlb(env, &ns, &services).await;
        }
        let (svc, ip) = expose(env, &services, "web", ports(&[("web", 80, "TCP"), ("dns-like", 53, "UDP")])).await;
        let answer =
            until(WAIT, &format!("udp://{ip}:53 answering"), async || traffic::udp_hostname(&ip, 53).await.ok()).await;
        assert_eq!(answer, "web", "the pod answers the datagram through the EXTERNAL-IP");
        let cloud = cloud_lb(env, &svc).await;
        assert!(
            cloud.listener_status.iter().any(|l| l.port == 53
                && l.protocol == fakecloud_api::Protocol::Udp
                && l.state == ListenerState::Listening),
            "{:?}",
            cloud.listener_status
        );
    })
    .await;
}

/// cloud-provider-aws refuses a Service of TCP and UDP ports ("mixed protocol is not supported", `checkMixedProtocol`,
/// aws.go L3723) and a classic ELB refuses UDP (`checkProtocol`, L3736); an NLB serves a UDP port. With
/// `externalTrafficPolicy: Local` its targets' health check is kube-proxy's HTTP one (`buildNLBHealthCheckConfiguration`,
/// L2178); otherwise it would be TCP on the UDP NodePort, where nothing listens, and only AWS's fail-open (an NLB
/// sends to every target when none is healthy), which fakecloud does not model, would let datagrams through.
async fn udp_through_an_nlb(env: &Env, ns: &str, services: &Api<Service>) {
    let mixed = lb::service("mixed", 80, ports(&[("web", 80, "TCP"), ("dns-like", 53, "UDP")]));
    services.create(&PostParams::default(), &mixed).await.unwrap();
    refused(env, ns, services, "mixed", "mixed protocol is not supported for LoadBalancer").await;

    let mut spec = ports(&[("dns-like", 53, "UDP")]);
    spec["externalTrafficPolicy"] = "Local".into();
    let svc = services.create(&PostParams::default(), &lb::with_aws_nlb(lb::service("web", 53, spec))).await.unwrap();
    let ip = env.wait_for_vip(services, "web", HANG).await.to_string();
    let answer =
        until(WAIT, &format!("udp://{ip}:53 answering"), async || traffic::udp_hostname(&ip, 53).await.ok()).await;
    assert_eq!(answer, "web", "the pod answers the datagram through the NLB");
    let cloud = cloud_lb(env, &svc).await;
    let udp = cloud.listener_status.iter().find(|l| l.port == 53 && l.protocol == fakecloud_api::Protocol::Udp);
    assert!(udp.is_some_and(|l| l.state == ListenerState::Listening), "{:?}", cloud.listener_status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_ranges_refuse_clients_outside_them() {
    // Under cloud-provider-aws the ranges are the ELB's security group's rules (`k8s-elb-<name>`), which the data
    // plane enforces as it does source ranges.
    case("lb-source-ranges", Setup::new(CCM).runs_pods_on(1).stated_for_aws(), async |env| {
        let (_, services) = one_pod(env, "lb-source-ranges").await;
        let (svc, ip) = expose(env, &services, "web", serde_json::json!({})).await;
        let lb_id = cloud_lb(env, &svc).await.id;

        // A range this host is not in (TEST-NET-1): its connections are closed at once.
        patch(&services, "web", serde_json::json!({"loadBalancerSourceRanges": ["192.0.2.0/24"]})).await;
        until(WAIT, "the source range in the cloud", async || {
            if env.ccm_is_aws() {
                let rules = env.elb_group_rules(&svc).await?;
                return (rules == lb::elb_rules(80, &["192.0.2.0/24"])).then_some(());
            }
            let lb = env.cloud.get_load_balancer(&lb_id).await.ok()?;
            (lb.source_ranges == ["192.0.2.0/24"]).then_some(())
        })
        .await;
        let refused = until(WAIT, "this host refused", async || traffic::get(&ip, 80, "/hostname").await.err()).await;
        eprintln!("outside the source ranges: {refused}");
        for _ in 0..5 {
            assert!(traffic::get(&ip, 80, "/hostname").await.is_err(), "every connection from outside is refused");
        }

        // The kind network this host reaches the EXTERNAL-IP on (a /16, as kind makes it): let in again.
        let inside: ipnet::IpNet = format!("{ip}/16").parse::<ipnet::IpNet>().unwrap().trunc();
        patch(&services, "web", serde_json::json!({"loadBalancerSourceRanges": [inside.to_string()]})).await;
        let answer = until(WAIT, &format!("this host let in by {inside}"), async || {
            traffic::get(&ip, 80, "/hostname").await.ok()
        })
        .await;
        assert_eq!(answer.status, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ccm_restart_under_throttling_drops_no_connection_on_an_unchanged_listener() {
    // The same against cloud-provider-aws, whose SDK retries each throttled call (EC2's `RequestLimitExceeded`,
    // ELB's `Throttling`) on its own backoff.
    case("lb-ccm-restart", Setup::new(CCM).runs_pods_on(1).kills_ccm().stated_for_aws(), async |env| {
        let (_, services) = one_pod(env, "lb-ccm-restart").await;
        let (_, ip) = expose(env, &services, "web", serde_json::json!({})).await;

        // The CCM's token throttled hard (a burst of 2, 1.5 calls a second: about what its loops need when
        // idle): the new leader's first resync of every Node, route and Service is answered with 429s, and its
        // update of the load balancer waits its turn. (Per token: the VPC router and the suite are not slowed.)
        let throttle = SetRateLimitRequest {
            scope: RateLimitScope::All,
            per_token: true,
            capacity: 2,
            refill_per_second: Some(1.5),
            ..Default::default()
        };
        env.cloud.set_rate_limit("lb-ccm-restart", &throttle).await.unwrap();

        // Traffic all along: one kept-alive connection and a new connection, every 200 ms.
        let stop = Arc::new(AtomicBool::new(false));
        let traffic_task = tokio::spawn({
            let (stop, ip) = (stop.clone(), ip.clone());
            async move {
                let mut kept = Conn::open(&ip, 80).await.map_err(|e| vec![format!("kept-alive connect: {e}")])?;
                let (mut failures, mut exchanges) = (Vec::new(), 0usize);
                while !stop.load(Ordering::Relaxed) {
                    for (what, result) in
                        [("kept-alive", kept.get("/hostname").await), ("new", traffic::get(&ip, 80, "/hostname").await)]
                    {
                        exchanges += 1;
                        match result {
                            Ok(a) if a.status == 200 => {}
                            other => failures.push(format!("{what}: {other:?}")),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                if failures.is_empty() { Ok(exchanges) } else { Err(failures) }
            }
        });

        env.kill_ccm_leader().await;
        // A new port while the new leader starts: it must update the load balancer through the throttle, and
        // the listener on port 80, unchanged, must not notice.
        patch(&services, "web", ports(&[("web", 80, "TCP"), ("alt", ALT_PORT, "TCP")])).await;
        until(HANG, &format!("port {ALT_PORT} answering (added by the new leader)"), async || {
            traffic::get(&ip, ALT_PORT, "/hostname").await.ok().filter(|a| a.status == 200)
        })
        .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.store(true, Ordering::Relaxed);
        let exchanges = traffic_task.await.unwrap().unwrap_or_else(|f| panic!("connections dropped: {f:?}"));
        let limits = env.cloud.list_rate_limits().await.unwrap().items;
        let refused: u64 = limits.iter().filter(|r| r.id == "lb-ccm-restart").map(|r| r.refused).sum();
        eprintln!("{exchanges} exchanges through the restart, none failed; the throttle refused {refused} calls");
        assert!(refused > 0, "the new leader was throttled");
        assert!(exchanges >= 20, "traffic ran through the restart ({exchanges} exchanges)");
    })
    .await;
}

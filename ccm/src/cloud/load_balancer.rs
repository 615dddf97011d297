//! What a `type: LoadBalancer` Service asks of a fakecloud load balancer: the name upstream's convention gives
//! it, listeners from its ports, source ranges, the requested IP, and the annotations for what has no field in
//! the Service spec. Pure, so every rule is unit-tested; [`super::fakecloud`] does the calls.

use std::collections::BTreeMap;
use std::net::IpAddr;

use fakecloud_api::{Forwarding, HealthCheck, HealthCheckProtocol, Listener, Protocol, Scheme, SessionAffinity};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;

/// `"true"`: an internal load balancer (a VIP from the internal pool) instead of an internet-facing one.
pub const ANNOTATION_INTERNAL: &str = "service.beta.kubernetes.io/fakecloud-load-balancer-internal";
/// An HTTP health check on this path (must start with `/`) of the first NodePort (or of the
/// `healthCheckNodePort`) instead of the default check (see [`desired`]'s health check).
pub const ANNOTATION_HEALTH_CHECK_PATH: &str = "service.beta.kubernetes.io/fakecloud-load-balancer-health-check-path";
/// Seconds between health checks, 1–300 (default 10); alone, a TCP check on the first NodePort.
pub const ANNOTATION_HEALTH_CHECK_INTERVAL: &str =
    "service.beta.kubernetes.io/fakecloud-load-balancer-health-check-interval";
const DEFAULT_HEALTH_CHECK_INTERVAL: u32 = 10;
/// kube-proxy's `--healthz-bind-address` port, which clouds check for `externalTrafficPolicy: Cluster`.
pub const KUBE_PROXY_HEALTHZ_PORT: u16 = 10256;

/// Upstream's `GetLoadBalancerName` convention (`cloud.go`): `a` + the UID without dashes, cut to 32 bytes.
pub fn name(svc: &Service) -> String {
    let uid: String = svc.metadata.uid.as_deref().unwrap_or_default().chars().filter(|c| *c != '-').collect();
    let mut name = format!("a{uid}");
    name.truncate(32);
    name
}

/// The load balancer a Service asks for (backends apart: they come from the node set).
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub scheme: Scheme,
    pub listeners: Vec<Listener>,
    pub source_ranges: Vec<String>,
    pub requested_ip: Option<IpAddr>,
    pub health_check: Option<HealthCheck>,
    pub session_affinity: SessionAffinity,
    pub forwarding: Forwarding,
}

/// The Service's load balancer, or what is wrong with the Service (a message that names the field or the
/// annotation and says what is allowed).
pub fn desired(svc: &Service) -> Result<Desired, String> {
    let spec = svc.spec.clone().unwrap_or_default();
    let annotations = svc.metadata.annotations.clone().unwrap_or_default();
    let scheme = match annotation(&annotations, ANNOTATION_INTERNAL) {
        None => Scheme::InternetFacing,
        Some(v) => match parse_bool(v) {
            Some(true) => Scheme::Internal,
            Some(false) => Scheme::InternetFacing,
            None => {
                return Err(format!(
                    "annotation {ANNOTATION_INTERNAL}: {v:?} is not a boolean (use \"true\" or \"false\")"
                ));
            }
        },
    };
    // A port without a NodePort (`allocateLoadBalancerNodePorts: false`) is reached only by packets that come to
    // a node still addressed to the load balancer, which kube-proxy serves there: a passthrough load balancer
    // (its listener's backend port, the service port, is then unused).
    let mut listeners = Vec::new();
    let mut without_node_port = false;
    for p in spec.ports.as_deref().unwrap_or_default() {
        let protocol = match p.protocol.as_deref().unwrap_or("TCP") {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            other => {
                return Err(format!(
                    "port {}: protocol {other} is not supported by fakecloud load balancers (TCP, UDP)",
                    p.port
                ));
            }
        };
        let port = u16::try_from(p.port).map_err(|_| format!("port {} is out of range", p.port))?;
        let node_port = p.node_port.filter(|n| *n != 0);
        without_node_port |= node_port.is_none();
        let backend = node_port.unwrap_or(p.port);
        let backend_port = u16::try_from(backend).map_err(|_| format!("nodePort {backend} is out of range"))?;
        listeners.push(Listener { protocol, port, backend_port });
    }
    let mut source_ranges = Vec::new();
    for r in spec.load_balancer_source_ranges.as_deref().unwrap_or_default() {
        let net: IpNet = r
            .trim()
            .parse()
            .map_err(|_| format!("loadBalancerSourceRanges: {r:?} is not a CIDR (e.g. 203.0.113.0/24)"))?;
        source_ranges.push(net.to_string());
    }
    let requested_ip = match spec.load_balancer_ip.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(ip) => Some(ip.parse().map_err(|_| format!("loadBalancerIP: {ip:?} is not an IP address"))?),
    };
    let path = annotation(&annotations, ANNOTATION_HEALTH_CHECK_PATH);
    if let Some(p) = path
        && !p.starts_with('/')
    {
        return Err(format!("annotation {ANNOTATION_HEALTH_CHECK_PATH}: {p:?} must start with \"/\""));
    }
    let interval = match annotation(&annotations, ANNOTATION_HEALTH_CHECK_INTERVAL) {
        None => None,
        Some(v) => match v.parse::<u32>() {
            Ok(s) if (1..=300).contains(&s) => Some(s),
            _ => {
                return Err(format!(
                    "annotation {ANNOTATION_HEALTH_CHECK_INTERVAL}: {v:?} is not a number of seconds from 1 to 300"
                ));
            }
        },
    };
    let health_check = health_check(spec.health_check_node_port, &listeners, path, interval);
    // `ClientIP` asks that one client stay on one pod. kube-proxy keeps that per node, so the load balancer must
    // keep one client on one node too; any other value is the API server's to refuse, and means none here.
    let session_affinity = match spec.session_affinity.as_deref() {
        Some("ClientIP") => SessionAffinity::ClientIp,
        _ => SessionAffinity::None,
    };
    let forwarding = if without_node_port { Forwarding::Passthrough } else { Forwarding::Proxy };
    Ok(Desired { scheme, listeners, source_ranges, requested_ip, health_check, session_affinity, forwarding })
}

/// The check a cloud runs against every node, so that only nodes that can serve get traffic:
/// - `externalTrafficPolicy: Local` (a `healthCheckNodePort`): HTTP on that port, where kube-proxy answers 200
///   only on nodes with a ready endpoint of the Service (503 elsewhere), as every cloud's provider does;
/// - otherwise, with an annotation: on the first listener's backend port, HTTP on the annotated path or TCP;
/// - otherwise: kube-proxy's own `/healthz` on [`KUBE_PROXY_HEALTHZ_PORT`] (KEP-3836: it turns 503 on a node
///   that is going away, so connections drain before kube-proxy stops).
///
/// Always a check (when there is a listener), so dropping an annotation or switching the traffic policy
/// replaces the old check rather than leaving one that probes a port nobody serves any more.
fn health_check(
    health_check_node_port: Option<i32>,
    listeners: &[Listener],
    path: Option<&str>,
    interval: Option<u32>,
) -> Option<HealthCheck> {
    let interval_seconds = interval.unwrap_or(DEFAULT_HEALTH_CHECK_INTERVAL);
    let http = |port, path: Option<&str>| HealthCheck {
        protocol: HealthCheckProtocol::Http,
        port,
        path: Some(path.unwrap_or("/healthz").to_string()),
        interval_seconds,
    };
    if let Some(port) = health_check_node_port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0) {
        return Some(http(port, path));
    }
    let first = listeners.first()?.backend_port;
    Some(match (path, interval) {
        (Some(path), _) => http(first, Some(path)),
        (None, Some(_)) => {
            HealthCheck { protocol: HealthCheckProtocol::Tcp, port: first, path: None, interval_seconds }
        }
        (None, None) => http(KUBE_PROXY_HEALTHZ_PORT, None),
    })
}

fn annotation<'a>(annotations: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    annotations.get(key).map(|v| v.trim())
}

/// Go's `strconv.ParseBool`, which upstream uses for boolean annotations and labels.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Node;

    use super::*;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_name_is_a_and_the_uid_without_dashes_cut_to_32() {
        let s = svc(serde_json::json!({"metadata": {"uid": "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}}));
        assert_eq!(name(&s), "a6f1c2d3e4a5b4c6d8e7f9a0b1c2d3e4");
        assert_eq!(name(&s).len(), 32);
    }

    /// The cases both CCMs' tests read (`ccm/testdata/load-balancers.json`; the Go provider's in
    /// `ccm-upstream/provider/loadbalancer_test.go`): what a Service asks for, as the API writes it, or the
    /// fragments of the refusal.
    #[test]
    fn the_shared_cases_hold() {
        #[derive(serde::Deserialize)]
        struct Cases {
            cases: Vec<Case>,
        }
        #[derive(serde::Deserialize)]
        struct Case {
            case: String,
            service: serde_json::Value,
            #[serde(default)]
            nodes: Vec<Node>,
            #[serde(default)]
            want: serde_json::Map<String, serde_json::Value>,
            #[serde(default)]
            error: Vec<String>,
        }
        let cases: Cases = serde_json::from_str(include_str!("../../testdata/load-balancers.json")).unwrap();
        assert!(cases.cases.len() > 20);
        for c in cases.cases {
            match desired(&svc(c.service)) {
                Ok(d) => {
                    assert!(c.error.is_empty(), "{}: not refused", c.case);
                    let made = serde_json::json!({
                        "scheme": d.scheme, "listeners": d.listeners, "source_ranges": d.source_ranges,
                        "requested_ip": d.requested_ip, "health_check": d.health_check,
                        "session_affinity": d.session_affinity, "forwarding": d.forwarding,
                        "backends": crate::cloud::fakecloud::backends(&c.nodes.into_iter().map(Arc::new).collect::<Vec<_>>()),
                    });
                    for (part, want) in &c.want {
                        assert_eq!(&made[part], want, "{}: {part}", c.case);
                    }
                }
                Err(e) => {
                    assert!(!c.error.is_empty(), "{}: refused: {e}", c.case);
                    for fragment in &c.error {
                        assert!(e.contains(fragment.as_str()), "{}: {e:?} does not say {fragment:?}", c.case);
                    }
                }
            }
        }
    }
}

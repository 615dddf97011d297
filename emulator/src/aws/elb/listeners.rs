//! Listeners: classic ELB's (`Protocol`, `LoadBalancerPort`, `InstanceProtocol`, `InstancePort`) as the native
//! load balancer's TCP listeners, the classic protocols kept in the record; CreateLoadBalancerListeners and
//! DeleteLoadBalancerListeners.
//!
//! HTTP and TCP listeners are served: the data plane proxies the bytes of either (an HTTP listener adds no
//! `X-Forwarded-*` header). HTTPS and SSL listeners need a certificate from IAM or ACM, which this cloud does
//! not hold, so they are refused as a certificate AWS cannot find is; a TLS connection to the instances
//! (`InstanceProtocol` HTTPS or SSL) is refused as a protocol the data plane does not speak.

use std::collections::BTreeMap;

use fakecloud_api::{LoadBalancer, Protocol, UpdateLoadBalancerRequest};

use super::common::{change, members_of, missing, name, validation};
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, text};
use crate::http::AppState;
use crate::store::classic_elb::{Extras, ListenerMeta};

/// Whether classic ELB in a VPC takes `port` as a listener's: 25, 80, 443, 465, 587 and 1024–65535 (its
/// "Listeners for your Classic Load Balancer").
fn allowed_port(port: u32) -> bool {
    matches!(port, 25 | 80 | 443 | 465 | 587 | 1024..=65535)
}

/// A `Listeners.member.N`: the native listener and what classic ELB keeps of it.
fn parse(mut l: Params) -> Result<(fakecloud_api::Listener, ListenerMeta)> {
    let protocol = l.required("Protocol")?.to_ascii_uppercase();
    let port = l.required("LoadBalancerPort")?;
    let port = port.parse::<u32>().ok().filter(|p| allowed_port(*p)).ok_or_else(|| {
        validation(format!("LoadBalancerPort {port} is not valid: it must be 25, 80, 443, 465, 587 or 1024 to 65535"))
    })?;
    let instance_port = l.required_int("InstancePort", 1, 65535)?;
    let instance_protocol = l.take("InstanceProtocol").map(|p| p.to_ascii_uppercase());
    let certificate = l.take("SSLCertificateId");
    l.finish()?;
    let layer = match protocol.as_str() {
        "HTTP" | "TCP" => protocol.clone(),
        "HTTPS" | "SSL" => {
            return Err(AwsError::client(
                "CertificateNotFound",
                format!(
                    "{protocol} listeners need a server certificate from IAM or ACM, and fakecloud holds none \
                     (no IAM, no ACM): use an HTTP or TCP listener"
                ),
            ));
        }
        other => return Err(validation(format!("Invalid protocol '{other}': HTTP, HTTPS, TCP or SSL"))),
    };
    if certificate.is_some() {
        return Err(validation(format!("SSLCertificateId is for HTTPS and SSL listeners, not {protocol}")));
    }
    // The instances speak the listener's protocol unless told (HTTP behind HTTP, TCP behind TCP).
    let instance_protocol = instance_protocol.unwrap_or_else(|| layer.clone());
    match (layer.as_str(), instance_protocol.as_str()) {
        ("HTTP", "HTTP") | ("TCP", "TCP") => {}
        (_, "HTTPS" | "SSL") => {
            return Err(AwsError::client(
                "UnsupportedProtocol",
                format!(
                    "fakecloud's data plane does not speak TLS to instances: InstanceProtocol {instance_protocol} is not served"
                ),
            ));
        }
        _ => {
            return Err(validation(format!(
                "Listener protocol '{protocol}' and instance protocol '{instance_protocol}' are not compatible"
            )));
        }
    }
    let native =
        fakecloud_api::Listener { protocol: Protocol::Tcp, port: port as u16, backend_port: instance_port as u16 };
    Ok((native, ListenerMeta { protocol, instance_protocol, policies: Vec::new() }))
}

/// Every listener of a request, each port once (two listeners on one port would be one).
pub(super) fn parse_all(list: Vec<Params>) -> Result<(Vec<fakecloud_api::Listener>, BTreeMap<u16, ListenerMeta>)> {
    let (mut native, mut metas) = (Vec::new(), BTreeMap::new());
    for l in list {
        let (listener, meta) = parse(l)?;
        if metas.insert(listener.port, meta).is_some() {
            return Err(duplicate(listener.port));
        }
        native.push(listener);
    }
    Ok((native, metas))
}

fn duplicate(port: u16) -> AwsError {
    AwsError::client(
        "DuplicateListener",
        format!("A listener already exists on port {port} with another configuration"),
    )
}

/// What the record says of the native listener `l`; a listener made natively is its own protocol.
fn meta_of(l: &fakecloud_api::Listener, extras: &Extras) -> ListenerMeta {
    extras.listeners.get(&l.port).cloned().unwrap_or_else(|| ListenerMeta {
        protocol: l.protocol.as_str().to_string(),
        instance_protocol: l.protocol.as_str().to_string(),
        policies: Vec::new(),
    })
}

/// The `ListenerDescriptions` of `lb`.
pub(super) fn described(lb: &LoadBalancer, extras: &Extras) -> Vec<Vec<Node>> {
    lb.listeners
        .iter()
        .map(|l| {
            let meta = meta_of(l, extras);
            vec![
                el(
                    "Listener",
                    vec![
                        text("Protocol", meta.protocol),
                        text("LoadBalancerPort", l.port.to_string()),
                        text("InstanceProtocol", meta.instance_protocol),
                        text("InstancePort", l.backend_port.to_string()),
                    ],
                ),
                members_of("PolicyNames", &meta.policies),
            ]
        })
        .collect()
}

/// A listener the load balancer has on `port` already is left as it is when the new one is the same, and
/// refused (`DuplicateListener`) when it is not, as AWS does.
pub async fn create(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let (new, metas) = parse_all(params.member_structures("Listeners")?)?;
    if new.is_empty() {
        return Err(missing("Listeners.member.1"));
    }
    params.finish()?;
    change(st, &name, |lb, classic| {
        let mut listeners = lb.listeners.clone();
        for l in new {
            let meta = &metas[&l.port];
            match lb.listeners.iter().find(|have| have.port == l.port) {
                Some(have) => {
                    let same = have.backend_port == l.backend_port && {
                        let had = meta_of(have, &classic.extras);
                        had.protocol == meta.protocol && had.instance_protocol == meta.instance_protocol
                    };
                    if !same {
                        return Err(duplicate(l.port));
                    }
                }
                None => {
                    classic.extras.listeners.insert(l.port, meta.clone());
                    listeners.push(l);
                }
            }
        }
        Ok(Some(UpdateLoadBalancerRequest { listeners: Some(listeners), ..Default::default() }))
    })
    .await?;
    Ok(Vec::new())
}

/// Ports with no listener are passed over, as AWS does; the last listener may go.
pub async fn delete(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let ports = params
        .members("LoadBalancerPorts")?
        .iter()
        .map(|p| p.parse::<u16>().map_err(|_| validation(format!("Invalid LoadBalancerPorts value '{p}'"))))
        .collect::<Result<Vec<u16>>>()?;
    if ports.is_empty() {
        return Err(missing("LoadBalancerPorts.member.1"));
    }
    params.finish()?;
    change(st, &name, |lb, classic| {
        let listeners = lb.listeners.iter().filter(|l| !ports.contains(&l.port)).cloned().collect();
        for port in &ports {
            classic.extras.listeners.remove(port);
        }
        Ok(Some(UpdateLoadBalancerRequest { listeners: Some(listeners), ..Default::default() }))
    })
    .await?;
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn listener(form: &str) -> Result<(fakecloud_api::Listener, ListenerMeta)> {
        let mut p = Params::parse("", form.as_bytes()).unwrap();
        parse(p.member_structures("Listeners").unwrap().remove(0))
    }

    #[test]
    fn http_and_tcp_listeners_are_native_tcp_and_tls_is_refused_in_aws_words() {
        let (native, meta) =
            listener("Listeners.member.1.Protocol=http&Listeners.member.1.LoadBalancerPort=80&Listeners.member.1.InstancePort=30080")
                .unwrap();
        assert_eq!((native.protocol, native.port, native.backend_port), (Protocol::Tcp, 80, 30080));
        assert_eq!((meta.protocol.as_str(), meta.instance_protocol.as_str()), ("HTTP", "HTTP"));
        let code = |form: &str| listener(form).unwrap_err().code.to_string();
        let l = "Listeners.member.1.LoadBalancerPort=443&Listeners.member.1.InstancePort=30443";
        assert_eq!(code(&format!("{l}&Listeners.member.1.Protocol=HTTPS")), "CertificateNotFound");
        assert_eq!(code(&format!("{l}&Listeners.member.1.Protocol=SSL")), "CertificateNotFound");
        assert_eq!(
            code(&format!("{l}&Listeners.member.1.Protocol=TCP&Listeners.member.1.InstanceProtocol=SSL")),
            "UnsupportedProtocol"
        );
        assert_eq!(
            code(&format!("{l}&Listeners.member.1.Protocol=TCP&Listeners.member.1.InstanceProtocol=HTTP")),
            "ValidationError"
        );
        assert_eq!(code(&format!("{l}&Listeners.member.1.Protocol=UDP")), "ValidationError");
        assert_eq!(
            code(
                "Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=22&Listeners.member.1.InstancePort=1"
            ),
            "ValidationError"
        );
        assert_eq!(code("Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=80"), "MissingParameter");
    }
}

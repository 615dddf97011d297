//! `type: LoadBalancer` Services as the cases create them, and what they read back.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use kube::Api;

/// A LoadBalancer Service on `port` (to pods' 8080), with `extra_spec` merged into its spec.
pub fn service(name: &str, port: i32, extra_spec: serde_json::Value) -> Service {
    let mut spec = serde_json::json!({"type": "LoadBalancer", "selector": {"app": name},
        "ports": [{"name": "web", "port": port, "targetPort": 8080, "protocol": "TCP"}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec})).expect("a valid Service")
}

/// `svc` asking cloud-provider-aws for an NLB instead of its default, a classic ELB (its
/// `ServiceAnnotationLoadBalancerType`); other CCMs ignore the annotation.
pub fn with_aws_nlb(mut svc: Service) -> Service {
    let annotations = svc.metadata.annotations.get_or_insert_default();
    annotations.insert("service.beta.kubernetes.io/aws-load-balancer-type".into(), "nlb".into());
    svc
}

/// The Service's first ingress (its EXTERNAL-IP and `ipMode`), `None` while `<pending>`.
pub fn ingress(svc: &Service) -> Option<&LoadBalancerIngress> {
    svc.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref()?.first()
}

/// The EXTERNAL-IP: the first ingress IP, `None` while `<pending>`.
pub fn ingress_ip(svc: &Service) -> Option<String> {
    ingress(svc)?.ip.clone()
}

/// Where the Service is reached: its first ingress IP, or hostname (cloud-provider-aws gives an ELB's DNS name and
/// no IP, `toStatus` in aws.go); `None` while `<pending>`.
pub fn ingress_address(svc: &Service) -> Option<String> {
    let ingress = ingress(svc)?;
    ingress.ip.clone().or_else(|| ingress.hostname.clone())
}

/// Wait (at most `timeout`) until Service `name` has an ingress IP or hostname; that.
pub async fn wait_for_ingress(services: &Api<Service>, name: &str, timeout: Duration) -> String {
    crate::until(timeout, &format!("{name}'s EXTERNAL-IP"), async || {
        ingress_address(&services.get_opt(name).await.ok()??)
    })
    .await
}

/// Wait (at most `timeout`) until Service `name` has its EXTERNAL-IP; the IP. A failed read counts as "not yet".
pub async fn wait_for_ip(services: &Api<Service>, name: &str, timeout: Duration) -> String {
    crate::until(timeout, &format!("{name}'s EXTERNAL-IP"), async || ingress_ip(&services.get_opt(name).await.ok()??))
        .await
}

/// The backends of the Service's load balancer, as the cloud has them; `None` while it has none, or when the
/// read fails (callers poll).
pub async fn backends(cloud: &fakecloud_api::Client, svc: &Service) -> Option<Vec<String>> {
    Some(cloud.find_load_balancer(&name(svc)).await.ok()??.backends)
}

/// Upstream's load-balancer name for the Service: `a` + the UID without dashes, 32 characters.
pub fn name(svc: &Service) -> String {
    let mut n = format!("a{}", svc.metadata.uid.as_deref().unwrap_or_default().replace('-', ""));
    n.truncate(32);
    n
}

/// The rules cloud-provider-aws gives an ELB's group for a Service on TCP `port` from `cidrs`: that port, and ICMP
/// type 3 ("fragmentation needed", for path MTU discovery; `createSecurityGroupRules`, aws.go L2044-2051).
pub fn elb_rules(port: i64, cidrs: &[&str]) -> BTreeSet<(String, i64, String)> {
    let rule = |c: &&str| [("tcp".to_string(), port, c.to_string()), ("icmp".to_string(), 3, c.to_string())];
    cidrs.iter().flat_map(rule).collect()
}

pub fn finalizers(svc: &Service) -> Vec<String> {
    svc.metadata.finalizers.clone().unwrap_or_default()
}

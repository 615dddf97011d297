//! Policies: CreateLoadBalancerPolicy, DescribeLoadBalancerPolicies, SetLoadBalancerPoliciesOfListener,
//! SetLoadBalancerPoliciesForBackendServer and DeleteLoadBalancerPolicy, kept in classic ELB's record and
//! answered (`Policies.OtherPolicies`, each listener's and instance port's `PolicyNames`).
//!
//! None changes the data plane. cloud-provider-aws's proxy-protocol annotation makes a `ProxyProtocolPolicyType`
//! policy and sets it on the instance ports; the data plane does not send the PROXY protocol header, so the
//! instances see the connection's bytes as a TCP listener forwards them. SSL negotiation policies apply to
//! HTTPS and SSL listeners, which this cloud has none of (no certificates).

use super::common::{change, elb, invalid_configuration, name, validation};
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, members, text};
use crate::http::AppState;
use crate::store::classic_elb::{self, Extras, Policy};

/// The policy types kept: those for a load balancer's TCP and HTTP listeners and its instances, and SSL
/// negotiation's, which cloud-provider-aws makes for its SSL annotation whatever the listeners.
const TYPES: [&str; 4] = [
    "ProxyProtocolPolicyType",
    "SSLNegotiationPolicyType",
    "BackendServerAuthenticationPolicyType",
    "PublicKeyPolicyType",
];
/// Those an instance port takes (SetLoadBalancerPoliciesForBackendServer).
const BACKEND_TYPES: [&str; 2] = ["ProxyProtocolPolicyType", "BackendServerAuthenticationPolicyType"];
/// The most policies one load balancer has.
const POLICIES_MAX: usize = 100;

fn not_found(name: &str) -> AwsError {
    AwsError::client("PolicyNotFound", format!("There is no policy with name {name} for this load balancer"))
}

fn find<'e>(extras: &'e Extras, name: &str) -> Result<&'e Policy> {
    extras.policies.iter().find(|p| p.name == name).ok_or_else(|| not_found(name))
}

/// A policy the same as one kept (its type and attributes) is left as it is, as AWS takes it: cloud-provider-aws
/// makes its proxy-protocol policy again on every sync.
pub async fn create(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let lb = name(params)?;
    let policy_name = params.required("PolicyName")?;
    let type_name = params.required("PolicyTypeName")?;
    let mut attributes = Vec::new();
    for mut a in params.member_structures("PolicyAttributes")? {
        attributes.push((a.required("AttributeName")?, a.take("AttributeValue").unwrap_or_default()));
        a.finish()?;
    }
    params.finish()?;
    if !TYPES.contains(&type_name.as_str()) {
        return Err(AwsError::client(
            "PolicyTypeNotFound",
            format!("Policy type {type_name} is not kept here; fakecloud keeps {}", TYPES.join(", ")),
        ));
    }
    if type_name == "ProxyProtocolPolicyType"
        && !matches!(attributes.as_slice(), [(n, v)] if n == "ProxyProtocol" && matches!(v.as_str(), "true" | "false"))
    {
        return Err(invalid_configuration(
            "A ProxyProtocolPolicyType policy has one attribute, ProxyProtocol, true or false",
        ));
    }
    let new = Policy { name: policy_name, type_name, attributes };
    change(st, &lb, |_, classic| {
        match classic.extras.policies.iter().find(|p| p.name == new.name) {
            Some(kept) if *kept == new => {}
            Some(_) => {
                return Err(AwsError::client(
                    "DuplicatePolicyName",
                    format!("Policy {} already exists with another type or attributes", new.name),
                ));
            }
            None if classic.extras.policies.len() >= POLICIES_MAX => {
                return Err(AwsError::client(
                    "TooManyPolicies",
                    format!("A load balancer has at most {POLICIES_MAX} policies"),
                ));
            }
            None => classic.extras.policies.push(new),
        }
        Ok(None)
    })
    .await?;
    Ok(Vec::new())
}

/// Without a load balancer, AWS answers its sample policies; none is kept here, so none is answered.
pub async fn describe(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let lb = params.take("LoadBalancerName");
    let names = params.members("PolicyNames")?;
    params.finish()?;
    let policies = match lb {
        Some(lb) => classic_elb::get(&st.db, &lb).await.map_err(elb)?.classic.extras.policies,
        None => Vec::new(),
    };
    let chosen: Vec<&Policy> = if names.is_empty() {
        policies.iter().collect()
    } else {
        names
            .iter()
            .map(|n| policies.iter().find(|p| &p.name == n).ok_or_else(|| not_found(n)))
            .collect::<Result<_>>()?
    };
    let described = chosen.into_iter().map(|p| {
        vec![
            text("PolicyName", p.name.clone()),
            text("PolicyTypeName", p.type_name.clone()),
            members(
                "PolicyAttributeDescriptions",
                p.attributes
                    .iter()
                    .map(|(n, v)| vec![text("AttributeName", n.clone()), text("AttributeValue", v.clone())]),
            ),
        ]
    });
    Ok(vec![members("PolicyDescriptions", described.collect::<Vec<_>>())])
}

fn port(params: &mut Params, field: &str) -> Result<u16> {
    Ok(params.required_int(field, 1, 65535)? as u16)
}

/// The policies given replace the listener's; an empty list removes them.
pub async fn set_of_listener(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let lb = name(params)?;
    let port = port(params, "LoadBalancerPort")?;
    let names = params.members("PolicyNames")?;
    params.finish()?;
    change(st, &lb, |lb, classic| {
        if !lb.listeners.iter().any(|l| l.port == port) {
            return Err(AwsError::client("ListenerNotFound", format!("There is no listener on port {port}")));
        }
        if let Some(n) = names.first() {
            let policy = find(&classic.extras, n)?;
            // SSL negotiation is a TLS listener's; the others are instance ports'.
            return Err(invalid_configuration(format!(
                "Policy {n} of type {} cannot be set on the listener on port {port}: fakecloud's listeners are HTTP \
                 and TCP",
                policy.type_name
            )));
        }
        // A listener made natively has no meta yet: it is made with its native protocol.
        if let Some(meta) = classic.extras.listeners.get_mut(&port) {
            meta.policies.clear();
        }
        Ok(None)
    })
    .await?;
    Ok(Vec::new())
}

/// The policies given replace the instance port's; an empty list removes them.
pub async fn set_for_backend(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let lb = name(params)?;
    let port = port(params, "InstancePort")?;
    let names = params.members("PolicyNames")?;
    params.finish()?;
    change(st, &lb, |_, classic| {
        for n in &names {
            let policy = find(&classic.extras, n)?;
            if !BACKEND_TYPES.contains(&policy.type_name.as_str()) {
                return Err(invalid_configuration(format!(
                    "Policy {n} of type {} cannot be set on an instance port",
                    policy.type_name
                )));
            }
        }
        if names.is_empty() {
            classic.extras.backend_policies.remove(&port);
        } else {
            classic.extras.backend_policies.insert(port, names);
        }
        Ok(None)
    })
    .await?;
    Ok(Vec::new())
}

/// A policy in use is kept (`InvalidConfigurationRequest`); one that is not there is gone already.
pub async fn delete(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let lb = name(params)?;
    let policy = params.required("PolicyName")?;
    params.finish()?;
    if policy.is_empty() {
        return Err(validation("PolicyName must not be empty"));
    }
    change(st, &lb, |_, classic| {
        let extras = &mut classic.extras;
        let in_use = extras.listeners.values().any(|l| l.policies.contains(&policy))
            || extras.backend_policies.values().any(|p| p.contains(&policy));
        if in_use {
            return Err(invalid_configuration(format!(
                "Policy {policy} is in use: take it off its listeners and ports first"
            )));
        }
        extras.policies.retain(|p| p.name != policy);
        Ok(None)
    })
    .await?;
    Ok(Vec::new())
}

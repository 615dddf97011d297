//! An instance's life through EC2: RunInstances (the native create pipeline, so quotas, addresses and client
//! tokens hold as they do for `POST /v1/instances`), StartInstances, StopInstances, TerminateInstances, and
//! ModifyInstanceAttribute's `SourceDestCheck`.

use std::collections::BTreeMap;

use fakecloud_api::{CreateInstanceRequest, InstanceState, Market};

use super::{instances, network, security_groups, tag_rules};
use crate::aws::credentials::Keys;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, items, text};
use crate::db::new_id;
use crate::http::AppState;
use crate::store;
use crate::store::instances::Action;

/// The idempotency keys of RunInstances' client tokens: apart from the native API's `Idempotency-Key`s.
const KEY_SCOPE: &str = "RunInstances";
/// The longest client token EC2 takes ("Ensuring idempotency": up to 64 ASCII characters).
const CLIENT_TOKEN_MAX: usize = 64;
/// The most instances one RunInstances launches: the cloud's instance quota bounds them too.
const COUNT_MAX: u32 = 1000;

/// What a RunInstances asks for, as its client token's record keeps it: a retry with the same token and the same
/// request is answered with the instances the first one launched.
#[derive(serde::Serialize)]
struct Launch {
    image_id: Option<String>,
    instance_type: Option<String>,
    zone: Option<String>,
    min: u32,
    max: u32,
    market: Market,
    private_ip: Option<std::net::IpAddr>,
    tags: BTreeMap<String, String>,
    security_groups: Vec<String>,
}

pub async fn run(st: &AppState, keys: &Keys, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let image_id = params.take("ImageId");
    let instance_type = params.take("InstanceType");
    let min = params.int("MinCount", 1, COUNT_MAX)?;
    let max = params.int("MaxCount", 1, COUNT_MAX)?;
    let (min, max) = match (min, max) {
        (Some(min), Some(max)) if min <= max => (min, max),
        (Some(min), Some(max)) => {
            return Err(AwsError::invalid_value(format!(
                "MinCount ({min}) must be less than or equal to MaxCount ({max})"
            )));
        }
        (None, _) => {
            return Err(AwsError::client("MissingParameter", "The request must contain the parameter MinCount"));
        }
        (_, None) => {
            return Err(AwsError::client("MissingParameter", "The request must contain the parameter MaxCount"));
        }
    };
    let token = params.take("ClientToken");
    if let Some(t) = &token
        && (t.is_empty() || t.len() > CLIENT_TOKEN_MAX || !t.is_ascii())
    {
        return Err(AwsError::invalid_value(format!(
            "The client token must be 1 to {CLIENT_TOKEN_MAX} ASCII characters"
        )));
    }
    let mut placement = params.structure("Placement");
    let placement_zone = placement.take("AvailabilityZone");
    placement.finish()?;
    let subnet_zone = match params.take("SubnetId") {
        Some(subnet) => Some(network::zone_of_subnet(topo, &subnet)?.to_string()),
        None => None,
    };
    let zone = match (placement_zone, subnet_zone) {
        (Some(p), Some(s)) if p != s => {
            return Err(AwsError::invalid_value(format!(
                "The subnet is in {s}, not in Placement.AvailabilityZone {p}"
            )));
        }
        (Some(z), _) | (None, Some(z)) => Some(z),
        (None, None) => None,
    };
    if let Some(z) = &zone
        && topo.zone_pool(z).is_none()
    {
        return Err(AwsError::invalid_value(format!("Invalid availability zone: [{z}]")));
    }
    let mut market_options = params.structure("InstanceMarketOptions");
    let market = match market_options.take("MarketType").as_deref() {
        None => Market::OnDemand,
        Some("spot") => Market::Spot,
        Some(other) => {
            return Err(AwsError::invalid_value(format!(
                "Value ({other}) for parameter InstanceMarketOptions.MarketType is invalid; fakecloud has spot"
            )));
        }
    };
    market_options.finish()?;
    let private_ip =
        match params.take("PrivateIpAddress") {
            Some(ip) => Some(ip.parse::<std::net::Ipv4Addr>().map_err(|_| {
                AwsError::invalid_value(format!("Value ({ip}) for parameter PrivateIpAddress is invalid"))
            })?),
            None => None,
        };
    if private_ip.is_some() && max > 1 {
        return Err(AwsError::client(
            "InvalidParameterCombination",
            "PrivateIpAddress can be given only when launching one instance (MaxCount 1)",
        ));
    }
    let security_groups = params.list("SecurityGroupId")?;
    security_groups::check_ids(&security_groups)?;
    let tags = tag_rules::specified(params, "instance")?;
    params.finish()?;
    let launch = Launch {
        image_id,
        instance_type: instance_type.clone(),
        zone: zone.clone(),
        min,
        max,
        market,
        private_ip: private_ip.map(Into::into),
        tags: tags.clone(),
        security_groups,
    };
    let request_json = serde_json::to_string(&launch).map_err(|e| AwsError::internal(e.to_string()))?;
    // Each instance is named by its ID, as EC2's resource-based hostnames are: the name is the native API's
    // unique node name, and EC2 has none of its own to give.
    let reqs: Vec<CreateInstanceRequest> = (0..max)
        .map(|_| CreateInstanceRequest {
            name: new_id("i"),
            zone: zone.clone(),
            instance_type: instance_type.clone(),
            market,
            tags: tags.clone(),
            private_ip: private_ip.map(Into::into),
            ipv6_address: None,
        })
        .collect();
    let groups = &launch.security_groups;
    let (launched, _) = store::instances::create_many(
        &st.db,
        &st.cfg,
        &reqs,
        groups,
        min as usize,
        KEY_SCOPE,
        token.as_deref(),
        &request_json,
    )
    .await?;
    let ids: Vec<String> = launched.iter().map(|i| i.id.clone()).collect();
    let membership = security_groups::Membership::load(st, &ids).await?;
    Ok(instances::reservation_of(&launched, &membership, keys, topo))
}

/// StartInstances, StopInstances or TerminateInstances: each instance's state before and after.
pub async fn change_state(st: &AppState, action: Action, params: &mut Params) -> Result<Vec<Node>> {
    let ids = params.list("InstanceId")?;
    if ids.is_empty() {
        return Err(AwsError::client("MissingParameter", "The request must contain the parameter InstanceId.1"));
    }
    instances::check_ids(&ids)?;
    match action {
        Action::Start => {
            params.take("AdditionalInfo");
        }
        Action::Stop => {
            if params.bool("Hibernate")? {
                return Err(AwsError::client(
                    "UnsupportedHibernationConfiguration",
                    "fakecloud's instances do not hibernate; stop them without Hibernate",
                ));
            }
            // The cloud's stop delay applies whether or not the caller forces it.
            params.bool("Force")?;
            params.bool("SkipOsShutdown")?;
        }
        Action::Terminate => {
            params.bool("Force")?;
            params.bool("SkipOsShutdown")?;
        }
    }
    params.finish()?;
    let changed = store::instances::transition_all(&st.db, &st.cfg, &ids, action).await?;
    let state = |name: &'static str, s: InstanceState| {
        el(name, vec![text("code", instances::state_code(s).to_string()), text("name", instances::state_name(s))])
    };
    let changes = changed.into_iter().map(|(before, i)| {
        vec![text("instanceId", i.id.clone()), state("currentState", i.state), state("previousState", before)]
    });
    Ok(vec![items("instancesSet", changes.collect::<Vec<_>>())])
}

/// ModifyInstanceAttribute with `SourceDestCheck` (or `Attribute=sourceDestCheck` and `Value`), the one attribute
/// the AWS CCM changes (it turns the check off before routing a node's pod CIDR to it). Accepted and not kept:
/// nothing in the cloud checks a packet's source or destination (routes reach their instance whatever it says),
/// and no answer shows it, so a value kept could not be observed.
pub async fn modify_attribute(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let id = params.required("InstanceId")?;
    instances::check_ids(std::slice::from_ref(&id))?;
    let mut check = params.structure("SourceDestCheck");
    let value = check.flag("Value")?;
    check.finish()?;
    let by_name = match params.take("Attribute") {
        Some(a) if a == "sourceDestCheck" => Some(
            params
                .flag("Value")?
                .ok_or_else(|| AwsError::client("MissingParameter", "The request must contain the parameter Value"))?,
        ),
        Some(a) => {
            return Err(AwsError::invalid_value(format!(
                "Value ({a}) for parameter Attribute is invalid; fakecloud modifies sourceDestCheck only"
            )));
        }
        None => None,
    };
    params.finish()?;
    match (value, by_name) {
        (Some(_), None) | (None, Some(_)) => {}
        (None, None) => {
            return Err(AwsError::client(
                "MissingParameter",
                "The request must contain SourceDestCheck.Value (the one attribute fakecloud modifies)",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(AwsError::client(
                "InvalidParameterCombination",
                "Only one attribute can be modified at a time",
            ));
        }
    }
    // The instance must exist, as EC2 checks it.
    store::instances::get(&st.db, &st.cfg, &id).await?;
    Ok(vec![text("return", "true")])
}

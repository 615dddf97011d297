//! DescribeTargetHealth: each target's state read from the data plane's checks of its NLB's native backends,
//! as the native GET shows them (`backend_health`), and from what keeps a target out of the backends.

use fakecloud_api::{BackendState, LoadBalancer, LoadBalancerState};

use super::arn::Arns;
use super::lookup::group;
use crate::aws::api::Api;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, el, members, text};
use crate::http::{AppState, shown_load_balancer};
use crate::store::elbv2::{Target, TargetGroup};
use crate::store::{instances, load_balancers};

/// A target's health: ELB's state, reason and description.
struct Health {
    state: &'static str,
    reason: Option<&'static str>,
    description: Option<String>,
}

fn health(state: &'static str, reason: Option<&'static str>, description: impl Into<String>) -> Health {
    Health { state, reason, description: Some(description.into()) }
}

/// The health of `t` in `group`, used by the native load balancer `lb` (`None`: no listener uses the group);
/// `instance_state` its instance's state now, if it exists.
fn of_target(group: &TargetGroup, lb: Option<&LoadBalancer>, t: &Target, instance_state: Option<&str>) -> Health {
    if t.draining_until.is_some() {
        return health("draining", Some("Target.DeregistrationInProgress"), "Target deregistration is in progress");
    }
    if !group.registered().any(|r| r == t) {
        return health("unused", Some("Target.NotRegistered"), "Target is not registered to the target group");
    }
    let Some(lb) = lb else {
        return health(
            "unused",
            Some("Target.NotInUse"),
            "Target group is not configured to receive traffic from the load balancer",
        );
    };
    if lb.state == LoadBalancerState::Provisioning {
        return health("initial", Some("Elb.RegistrationInProgress"), "Target registration is in progress");
    }
    if instance_state != Some("running") {
        let state = instance_state.unwrap_or("terminated");
        return health("unused", Some("Target.InvalidState"), format!("Target is in the {state} state"));
    }
    if !lb.backends.contains(&t.id) {
        return health(
            "initial",
            Some("Elb.RegistrationInProgress"),
            "Target registration is in progress: the load balancer forwards to an instance once every target \
             group its listeners use holds it",
        );
    }
    match lb.backend_health.iter().find(|b| b.instance == t.id) {
        Some(b) => match b.state {
            BackendState::Healthy => Health { state: "healthy", reason: None, description: None },
            BackendState::Unhealthy => health(
                "unhealthy",
                Some("Target.FailedHealthChecks"),
                b.last_error.clone().unwrap_or_else(|| "Health checks failed".into()),
            ),
            BackendState::Unknown => {
                health("initial", Some("Elb.InitialHealthChecking"), "Initial health checks in progress")
            }
        },
        // No data plane here checks targets (`fakecloud serve --serve-load-balancers`).
        None => health("unavailable", None, "Target health is unavailable: this emulator serves no data plane"),
    }
}

pub async fn describe(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("TargetGroupArn")?;
    let mut asked = Vec::new();
    for mut t in params.structures("Targets.member")? {
        let id = t.required("Id")?;
        let port = t.int("Port", 1, 65535)?;
        t.take("AvailabilityZone");
        t.finish()?;
        asked.push((id, port));
    }
    // Anomaly detection is not modelled: there is nothing more to include.
    params.list("Include.member")?;
    params.finish()?;
    let group = group(st, arns, &arn).await?;
    let of = |e| AwsError::of(e, Api::Elbv2);
    let lb = match &group.lb_id {
        Some(id) => Some(shown_load_balancer(st, load_balancers::get(&st.db, id).await.map_err(of)?).await),
        None => None,
    };
    let targets: Vec<Target> = if asked.is_empty() {
        group.targets.clone()
    } else {
        asked
            .into_iter()
            .map(|(id, port)| {
                let port = port.map_or(group.port, |p| u16::try_from(p).unwrap_or(group.port));
                group.targets.iter().find(|t| t.id == id && t.port == port).cloned().unwrap_or(Target {
                    id,
                    port,
                    draining_until: None,
                })
            })
            .collect()
    };
    let ids: Vec<&str> = targets.iter().map(|t| t.id.as_str()).collect();
    let states = instances::addresses(&st.db, &ids).await.map_err(of)?;
    let described = targets.iter().map(|t| {
        let state = states.get(&t.id).map(|(_, s)| s.to_string());
        let h = of_target(&group, lb.as_ref(), t, state.as_deref());
        let mut target_health = vec![text("State", h.state)];
        target_health.extend(h.reason.map(|r| text("Reason", r)));
        target_health.extend(h.description.map(|d| text("Description", d)));
        let port = if group.health.port == "traffic-port" { t.port.to_string() } else { group.health.port.clone() };
        vec![
            el("Target", vec![text("Id", t.id.clone()), text("Port", t.port.to_string())]),
            text("HealthCheckPort", port),
            el("TargetHealth", target_health),
        ]
    });
    Ok(vec![members("TargetHealthDescriptions", described.collect::<Vec<_>>())])
}

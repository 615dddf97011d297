//! CreateListener, DescribeListeners, ModifyListener and DeleteListener: each listener forwards its protocol and
//! port to one target group, and is a native listener of its NLB (`store::elbv2`'s mapping).

use super::arn::{self, Arns};
use super::common::{page, validation};
use super::lookup::{group, listener, nlb};
use super::tags;
use crate::aws::api::Api;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, members, text};
use crate::http::AppState;
use crate::store::elbv2::{self, Listener, ListenerSpec, Nlb};

fn of(e: crate::error::ApiError) -> AwsError {
    AwsError::of(e, Api::Elbv2)
}

/// A listener's protocol: those the data plane serves. TLS needs a certificate, which this cloud cannot hold.
fn protocol(p: &str) -> Result<()> {
    match p {
        "TCP" | "UDP" | "TCP_UDP" => Ok(()),
        "TLS" => Err(AwsError::client(
            "CertificateNotFound",
            "A TLS listener needs a certificate, and fakecloud holds none (it has no certificate manager): use TCP",
        )),
        other => Err(AwsError::client(
            "UnsupportedProtocol",
            format!("Protocol '{other}' is not supported by network load balancers here: TCP, UDP or TCP_UDP"),
        )),
    }
}

/// The target group `DefaultActions` forwards to: one `forward` action, by `TargetGroupArn` or a
/// `ForwardConfig` of one group.
async fn forward(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Option<String>> {
    let mut actions = params.structures("DefaultActions.member")?;
    if actions.is_empty() {
        return Ok(None);
    }
    if actions.len() > 1 {
        return Err(AwsError::client("TooManyActions", "A network load balancer's listener has one default action"));
    }
    let mut action = actions.remove(0);
    let kind = action.required("Type")?;
    if kind != "forward" {
        return Err(AwsError::client(
            "InvalidLoadBalancerAction",
            format!("Action type '{kind}' is not supported by network load balancers: forward"),
        ));
    }
    let mut arns_given: Vec<String> = action.take("TargetGroupArn").into_iter().collect();
    let mut config = action.structure("ForwardConfig");
    for mut t in config.structures("TargetGroups.member")? {
        arns_given.push(t.required("TargetGroupArn")?);
        t.take("Weight");
        t.finish()?;
    }
    config.finish()?;
    action.take("Order");
    action.finish()?;
    arns_given.dedup();
    match arns_given.as_slice() {
        [one] => Ok(Some(group(st, arns, one).await?.id)),
        [] => Err(validation("A forward action needs a target group (TargetGroupArn)")),
        _ => Err(AwsError::client(
            "InvalidLoadBalancerAction",
            "A network load balancer's listener forwards to one target group",
        )),
    }
}

/// The certificates a TLS listener would need: refused, as for a TLS protocol.
fn no_certificates(params: &mut Params) -> Result<()> {
    if !params.structures("Certificates.member")?.is_empty() || params.take("SslPolicy").is_some() {
        return Err(AwsError::client(
            "CertificateNotFound",
            "Certificates and SSL policies are for TLS listeners, and fakecloud holds no certificates",
        ));
    }
    Ok(())
}

pub async fn create(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let lb_arn = params.required("LoadBalancerArn")?;
    let proto = params.required("Protocol")?;
    protocol(&proto)?;
    let port = params.int("Port", 1, 65535)?.ok_or_else(|| validation("A port must be specified"))?;
    no_certificates(params)?;
    let tags = tags::parse(params)?;
    let nlb = nlb(st, arns, &lb_arn).await?;
    let group = forward(st, arns, params).await?.ok_or_else(|| validation("A default action must be specified"))?;
    params.finish()?;
    let spec = ListenerSpec {
        protocol: &proto,
        port: u16::try_from(port).map_err(|_| validation("Port must be 1 to 65535"))?,
        target_group_id: &group,
    };
    let id = format!("{}{}", arn::LISTENER_PREFIX, arn::new_hex());
    let made = elbv2::create_listener(&st.db, &nlb.arn_id, &id, &spec, &tags).await.map_err(of)?;
    tracing::info!(load_balancer = %nlb.lb_id, port, protocol = %proto, "listener created through the AWS face");
    Ok(vec![members("Listeners", [shape(st, arns, &nlb, &made).await?])])
}

/// A listener as ELB describes it.
async fn shape(st: &AppState, arns: &Arns, nlb: &Nlb, l: &Listener) -> Result<Vec<Node>> {
    let groups = elbv2::target_groups(&st.db).await.map_err(of)?;
    let group = groups
        .iter()
        .find(|g| g.id == l.target_group_id)
        .ok_or_else(|| AwsError::internal("a listener's target group is missing"))?;
    Ok(vec![
        text("ListenerArn", arns.listener(&nlb.name, &nlb.arn_id, &l.id)),
        text("LoadBalancerArn", arns.load_balancer(&nlb.name, &nlb.arn_id)),
        text("Port", l.port.to_string()),
        text("Protocol", l.protocol.clone()),
        members(
            "DefaultActions",
            [vec![text("Type", "forward"), text("TargetGroupArn", arns.target_group(&group.name, &group.id))]],
        ),
    ])
}

pub async fn describe(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let lb_arn = params.take("LoadBalancerArn");
    let wanted = params.list("ListenerArns.member")?;
    let nlbs = elbv2::load_balancers(&st.db).await.map_err(of)?;
    let chosen: Vec<(Listener, &Nlb)> = match (lb_arn, wanted.is_empty()) {
        (Some(arn), true) => {
            let n = nlb(st, arns, &arn).await?;
            let nlb =
                nlbs.iter().find(|x| x.lb_id == n.lb_id).ok_or_else(|| AwsError::internal("an NLB is missing"))?;
            elbv2::listeners(&st.db, Some(&n.lb_id)).await.map_err(of)?.into_iter().map(|l| (l, nlb)).collect()
        }
        (None, false) => {
            let all = elbv2::listeners(&st.db, None).await.map_err(of)?;
            let mut chosen = Vec::new();
            for w in &wanted {
                let id = arns.listener_id(w)?;
                let not_found =
                    || AwsError::client("ListenerNotFound", format!("One or more listeners not found: '{w}'"));
                let l = all.iter().find(|l| l.id == id).ok_or_else(not_found)?;
                let nlb = nlbs.iter().find(|n| n.lb_id == l.lb_id).ok_or_else(not_found)?;
                chosen.push((l.clone(), nlb));
            }
            chosen
        }
        _ => return Err(validation("Exactly one of LoadBalancerArn and ListenerArns must be specified")),
    };
    let (page, next) = page(chosen, params)?;
    let mut described = Vec::new();
    for (l, nlb) in &page {
        described.push(shape(st, arns, nlb, l).await?);
    }
    let mut answer = vec![members("Listeners", described)];
    answer.extend(next.map(|m| text("NextMarker", m)));
    Ok(answer)
}

pub async fn modify(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("ListenerArn")?;
    let proto = params.take("Protocol");
    if let Some(p) = &proto {
        protocol(p)?;
    }
    let port = params.int("Port", 1, 65535)?.map(u16::try_from).transpose().map_err(|_| validation("bad port"))?;
    no_certificates(params)?;
    let (current, nlb) = listener(st, arns, &arn).await?;
    let group = forward(st, arns, params).await?;
    params.finish()?;
    let changed =
        elbv2::modify_listener(&st.db, &current.id, proto.as_deref(), port, group.as_deref()).await.map_err(of)?;
    Ok(vec![members("Listeners", [shape(st, arns, &nlb, &changed).await?])])
}

pub async fn delete(st: &AppState, arns: &Arns, params: &mut Params) -> Result<Vec<Node>> {
    let arn = params.required("ListenerArn")?;
    params.finish()?;
    let (current, _) = listener(st, arns, &arn).await?;
    elbv2::delete_listener(&st.db, &current.id).await.map_err(of)?;
    Ok(Vec::new())
}

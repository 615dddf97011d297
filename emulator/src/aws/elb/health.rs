//! The health check (ConfigureHealthCheck) and the instances' health (DescribeInstanceHealth).
//!
//! A classic `Target` is the native check's protocol, port and path (`SSL:443` checked as a TCP connect, the
//! handshake not made; `HTTPS` refused: the checker speaks no TLS), and `Interval` its interval. `Timeout` and the
//! thresholds are kept and answered, and change nothing: the data plane's checker has its own (two failed checks
//! turn an instance unhealthy, one passed check healthy, `dataplane::health`).

use fakecloud_api::{BackendState, HealthCheck, HealthCheckProtocol, LoadBalancer, UpdateLoadBalancerRequest};

use super::common::{change, elb, name, validation};
use crate::aws::error::Result;
use crate::aws::query::Params;
use crate::aws::xml::{Node, members, text};
use crate::http::AppState;
use crate::store::classic_elb::{self, Extras, HealthMeta};

/// AWS's health check for a new load balancer (the ELB guide's "Health checks for your Classic Load
/// Balancer"): every 30 seconds, 5 to answer, 10 passes to be healthy, 2 failures to be unhealthy.
pub(super) const DEFAULT_INTERVAL: u32 = 30;
pub(super) const DEFAULT_TIMEOUT: u32 = 5;
pub(super) const DEFAULT_HEALTHY: u32 = 10;
pub(super) const DEFAULT_UNHEALTHY: u32 = 2;
/// The longest ping path AWS takes.
const PATH_MAX: usize = 1024;

/// The native check a `Target` stands for (its interval aside).
fn target(t: &str) -> Result<(HealthCheckProtocol, u16, Option<String>)> {
    let bad = |why: &str| validation(format!("Invalid health check target '{t}': {why}"));
    let (protocol, rest) = t.split_once(':').ok_or_else(|| bad("it must be PROTOCOL:PORT, with a path for HTTP"))?;
    let (port, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(|| bad("the port must be 1 to 65535"))?;
    match (protocol.to_ascii_uppercase().as_str(), path) {
        ("TCP" | "SSL", None) => Ok((HealthCheckProtocol::Tcp, port, None)),
        ("TCP" | "SSL", Some(_)) => Err(bad("only HTTP targets take a path")),
        ("HTTP", Some(path)) if path.len() <= PATH_MAX => Ok((HealthCheckProtocol::Http, port, Some(path.to_string()))),
        ("HTTP", _) => Err(bad(&format!("an HTTP target needs a path of 1 to {PATH_MAX} characters, from '/'"))),
        ("HTTPS", _) => {
            Err(bad("fakecloud's health checker speaks no TLS: check with HTTP, TCP or SSL (a TCP connect)"))
        }
        _ => Err(bad("the protocol must be HTTP, TCP or SSL")),
    }
}

pub async fn configure(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let mut hc = params.structure("HealthCheck");
    let given = hc.required("Target")?;
    let interval = hc.required_int("Interval", 5, 300)?;
    let timeout = hc.required_int("Timeout", 2, 60)?;
    let unhealthy = hc.required_int("UnhealthyThreshold", 2, 10)?;
    let healthy = hc.required_int("HealthyThreshold", 2, 10)?;
    hc.finish()?;
    params.finish()?;
    if timeout >= interval {
        return Err(validation("Health check interval must be greater than the timeout."));
    }
    let (protocol, port, path) = target(&given)?;
    let native = HealthCheck { protocol, port, path, interval_seconds: interval };
    let meta = HealthMeta { target: given, timeout, healthy_threshold: healthy, unhealthy_threshold: unhealthy };
    let listed = change(st, &name, |_, classic| {
        classic.extras.health_check = Some(meta);
        Ok(Some(UpdateLoadBalancerRequest { health_check: Some(native), ..Default::default() }))
    })
    .await?;
    Ok(vec![crate::aws::xml::el("HealthCheck", described(&listed.lb, &listed.classic.extras))])
}

/// The `HealthCheck` of `lb`: the native check, with what the record keeps beside it. A load balancer made
/// natively without a check answers AWS's default for its first listener, and is not checked.
pub(super) fn described(lb: &LoadBalancer, extras: &Extras) -> Vec<Node> {
    let meta = extras.health_check.as_ref();
    let (target, interval) = match &lb.health_check {
        Some(hc) => {
            // The target as given while it is still the native check (`SSL:443` is `TCP:443` natively).
            let given = meta.map(|m| &m.target).filter(|t| {
                target(t)
                    .is_ok_and(|(protocol, port, path)| (protocol, port, &path) == (hc.protocol, hc.port, &hc.path))
            });
            let native = match hc.protocol {
                HealthCheckProtocol::Tcp => format!("TCP:{}", hc.port),
                HealthCheckProtocol::Http => format!("HTTP:{}{}", hc.port, hc.path.as_deref().unwrap_or("/")),
            };
            (given.cloned().unwrap_or(native), hc.interval_seconds)
        }
        None => (format!("TCP:{}", lb.listeners.first().map_or(80, |l| l.backend_port)), DEFAULT_INTERVAL),
    };
    vec![
        text("Target", target),
        text("Interval", interval.to_string()),
        text("Timeout", meta.map_or(DEFAULT_TIMEOUT, |m| m.timeout).to_string()),
        text("UnhealthyThreshold", meta.map_or(DEFAULT_UNHEALTHY, |m| m.unhealthy_threshold).to_string()),
        text("HealthyThreshold", meta.map_or(DEFAULT_HEALTHY, |m| m.healthy_threshold).to_string()),
    ]
}

/// Each registered instance's state as the data plane's checks see it (the native GET's `backend_health`):
/// healthy is `InService`, unhealthy `OutOfService` with the last check's error, not checked yet `Unknown`.
/// Without a data plane (the emulator started without `--serve-load-balancers`) nothing is checked: `Unknown`.
pub async fn describe(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let name = name(params)?;
    let asked = super::instances::ids(params)?;
    params.finish()?;
    let mut lb = classic_elb::get(&st.db, &name).await.map_err(elb)?.lb;
    crate::http::show(st, std::slice::from_mut(&mut lb)).await;
    let ids = if asked.is_empty() { lb.backends.clone() } else { asked };
    if let Some(stranger) = ids.iter().find(|i| !lb.backends.contains(i)) {
        return Err(super::instances::invalid(stranger));
    }
    let states = ids.iter().map(|id| {
        let health = lb.backend_health.iter().find(|h| &h.instance == id);
        let (state, reason, description) = match health.map(|h| (h.state, h.last_error.as_deref())) {
            Some((BackendState::Healthy, _)) => ("InService", "N/A", "N/A".to_string()),
            Some((BackendState::Unhealthy, error)) => (
                "OutOfService",
                "Instance",
                error.map_or(
                    "Instance has failed at least the UnhealthyThreshold number of health checks consecutively.".into(),
                    |e| format!("Instance has failed its health checks: {e}"),
                ),
            ),
            Some((BackendState::Unknown, _)) => {
                ("Unknown", "ELB", "Instance registration is still in progress.".into())
            }
            None => (
                "Unknown",
                "ELB",
                "fakecloud serves no data plane for this load balancer (--serve-load-balancers is off, or it is not \
                 active): its instances are not health-checked"
                    .into(),
            ),
        };
        vec![
            text("InstanceId", id.clone()),
            text("State", state),
            text("ReasonCode", reason),
            text("Description", description),
        ]
    });
    Ok(vec![members("InstanceStates", states.collect::<Vec<_>>())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_the_native_checks_they_stand_for() {
        assert_eq!(target("TCP:30080").unwrap(), (HealthCheckProtocol::Tcp, 30080, None));
        assert_eq!(target("ssl:443").unwrap(), (HealthCheckProtocol::Tcp, 443, None));
        assert_eq!(target("HTTP:10256/healthz").unwrap(), (HealthCheckProtocol::Http, 10256, Some("/healthz".into())));
        for bad in ["TCP", "TCP:0", "TCP:70000", "TCP:80/x", "HTTP:80", "HTTPS:443/", "UDP:53", ":80"] {
            assert_eq!(target(bad).map_err(|e| e.code.to_string()), Err("ValidationError".into()), "{bad}");
        }
    }
}

//! Outages: the whole API, one service or one zone, for a window. Calls in scope get 503 `ServiceUnavailable`
//! with `Retry-After` set to the time left.

use fakecloud_api::{Outage, OutageScope, StartOutageRequest, codes};
use serde::{Deserialize, Serialize};

use super::call::{Call, Verdict, service_of};
use crate::db::rfc3339;
use crate::error::{ApiError, Kind, Result};

#[derive(Serialize, Deserialize)]
struct Stored {
    request: StartOutageRequest,
    started_ms: i64,
    until_ms: Option<i64>,
}

pub struct ActiveOutage {
    pub id: String,
    stored: Stored,
}

impl ActiveOutage {
    pub fn new(id: String, request: StartOutageRequest, zones: &[&str], now: i64) -> Result<Self> {
        match (request.scope, &request.service, &request.zone) {
            (OutageScope::Api, None, None) => {}
            (OutageScope::Service, Some(_), None) => {}
            (OutageScope::Zone, None, Some(z)) if zones.contains(&z.as_str()) => {}
            (OutageScope::Zone, None, Some(z)) => {
                return Err(ApiError::invalid("zone", format!("{z:?} is not a zone; zones: {}", zones.join(", "))));
            }
            (OutageScope::Service, None, _) => {
                return Err(ApiError::invalid("service", "scope service needs compute, network or load-balancing"));
            }
            (OutageScope::Zone, _, None) => return Err(ApiError::invalid("zone", "scope zone needs a zone")),
            _ => {
                return Err(ApiError::invalid(
                    "scope",
                    "give service only with scope service, and zone only with scope zone",
                ));
            }
        }
        let until_ms = crate::validate::window_end("duration_seconds", request.duration_seconds, now)?;
        Ok(Self { id, stored: Stored { request, started_ms: now, until_ms } })
    }

    pub fn restore(id: &str, spec: &str) -> Result<Self> {
        let stored: Stored = serde_json::from_str(spec).map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(Self { id: id.to_string(), stored })
    }

    pub fn stored(&self) -> String {
        serde_json::to_string(&self.stored).unwrap_or_default()
    }

    pub fn active(&self, now: i64) -> bool {
        self.stored.until_ms.is_none_or(|u| now < u)
    }

    pub fn zone(&self) -> Option<&str> {
        self.stored.request.zone.as_deref()
    }

    fn refuse(&self, now: i64, what: String) -> Verdict {
        let mut error = ApiError::new(
            Kind::Unavailable,
            codes::SERVICE_UNAVAILABLE,
            format!("{what} is unavailable (outage {})", self.id),
        );
        if let Some(u) = self.stored.until_ms {
            let secs = ((u - now).max(0) as u64).div_ceil(1000);
            error.headers = vec![("Retry-After".into(), secs.to_string())];
        }
        Verdict::Refuse { error, fault: self.id.clone() }
    }

    pub fn to_api(&self) -> Outage {
        let r = &self.stored.request;
        Outage {
            id: self.id.clone(),
            scope: r.scope,
            service: r.service,
            zone: r.zone.clone(),
            started_at: rfc3339(self.stored.started_ms),
            until: self.stored.until_ms.map(rfc3339),
        }
    }
}

/// The first active outage covering the call.
pub fn judge(outages: &[ActiveOutage], call: &Call<'_>, now: i64) -> Option<Verdict> {
    let service = service_of(call.native());
    for o in outages.iter().filter(|o| o.active(now)) {
        match o.stored.request.scope {
            OutageScope::Api => return Some(o.refuse(now, "the API".into())),
            OutageScope::Service if service.is_some() && service == o.stored.request.service => {
                return Some(o.refuse(now, format!("the {} service", call.operation)));
            }
            _ => {}
        }
    }
    let dark: Vec<&ActiveOutage> = outages.iter().filter(|o| o.active(now) && o.zone().is_some()).collect();
    if dark.is_empty() || service != Some(fakecloud_api::Service::Compute) || call.method == axum::http::Method::GET {
        return None;
    }
    let zone = call.subject?.zone.clone()?;
    dark.into_iter().find(|o| o.zone() == Some(zone.as_str())).map(|o| o.refuse(now, format!("zone {zone}")))
}

//! What an AWS call is about, for the fault rules that match on it and for eventual consistency, as the native
//! API's path tells the gatekeeper: the one resource it names, by the cloud's own ID (an instance's `i-…` is the
//! same on both faces, a load balancer is its `lb-…` whichever face made it, a route table its native ID); and,
//! when a rule or a dark zone needs them, that resource's name, zone and tags, or those a create asks for. A call
//! that names several resources, or none, is about none. Each API says which of its parameters name what
//! (`ec2::about`, `elb::about`, `elbv2::about`, in the terms of `named`); its operation reads them again.

use super::api::Api;
use super::credentials::Keys;
use super::named::Named;
use super::query::Params;
use super::{ec2, elb, elbv2};
use crate::faults::Subject;
use crate::http::AppState;
use crate::store;

/// What the fault engine is told of a call.
#[derive(Default)]
pub struct About {
    pub resource_id: Option<String>,
    pub subject: Option<Subject>,
}

/// What `action`'s call with `params` is about; the named resource's labels looked up only if `subject`.
pub async fn of(st: &AppState, keys: &Keys, api: Api, action: &str, params: &Params, subject: bool) -> About {
    let named = match api {
        Api::Ec2 => ec2::about(&st.cfg.topology, action, params),
        Api::Elb => elb::about(st, action, params).await,
        Api::Elbv2 => elbv2::about(st, keys, action, params).await,
    };
    match named {
        Named::Resource(id) => {
            // A resource that cannot be read now is one no rule matches by name, zone or tag, as natively.
            let labels = if subject { store::labels(&st.db, &id).await.ok().flatten() } else { None };
            About { subject: labels.map(Subject::from), resource_id: Some(id) }
        }
        Named::Create(asked) => About { resource_id: None, subject: Some(asked) },
        Named::Nothing => About::default(),
    }
}

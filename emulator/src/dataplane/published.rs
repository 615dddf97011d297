//! The data plane's view, published for the other emulators on a shared PostgreSQL database: one replica serves
//! the load balancers (`--serve-load-balancers`), and a `GET` through any replica shows what it shows —
//! listeners' states, backends' health, `ip_mode` and `data_plane` — since a CCM builds a Service's status from
//! whichever replica answers it.
//!
//! The serving replica writes a load balancer's view (table `lb_views`) when it changes, at the end of each
//! resync, and the time of its last resync (counter `lb_views_at`; see `crate::store::lb_views`); a view older
//! than [`STALE`] is from a data plane that stopped, and is not shown.

use std::collections::HashMap;
use std::time::Duration;

use fakecloud_api::{BackendHealth, DataPlaneStatus, IpMode, ListenerStatus, LoadBalancer, LoadBalancerState};
use serde::{Deserialize, Serialize};

use super::status::Status;
use crate::db::{Db, ms, now_ms};
use crate::error::Result;
use crate::store::lb_views;

/// How long after the serving replica's last resync its views are shown: many resyncs ([`super::RESYNC`]).
pub const STALE: Duration = Duration::from_secs(10);

/// What the data plane adds to a load balancer as the API shows it.
#[derive(Serialize, Deserialize)]
pub struct View {
    ip_mode: IpMode,
    listener_status: Vec<ListenerStatus>,
    backend_health: Vec<BackendHealth>,
    data_plane: Option<DataPlaneStatus>,
}

impl View {
    fn of(lb: LoadBalancer) -> Self {
        Self {
            ip_mode: lb.ip_mode,
            listener_status: lb.listener_status,
            backend_health: lb.backend_health,
            data_plane: lb.data_plane,
        }
    }

    /// Onto `lb` as it is now: the state is only an active load balancer's (as the serving replica shows it).
    pub fn apply(self, lb: &mut LoadBalancer) {
        lb.ip_mode = self.ip_mode;
        if lb.state != LoadBalancerState::Active {
            return;
        }
        lb.listener_status = self.listener_status;
        lb.backend_health = self.backend_health;
        lb.data_plane = self.data_plane;
    }
}

/// The serving replica's side: what it last wrote, by load balancer ID.
#[derive(Default)]
pub struct Publisher {
    written: HashMap<String, String>,
    /// Whether the last publication failed (logged once until one succeeds).
    failing: bool,
}

impl Publisher {
    /// Write the views of `lbs` (the active load balancers) that changed, and drop those of the ones gone.
    pub async fn publish(&mut self, db: &Db, lbs: &[LoadBalancer], status: &Status) {
        let views: HashMap<String, String> = lbs
            .iter()
            .filter_map(|lb| {
                let mut shown = lb.clone();
                status.annotate(&mut shown);
                Some((lb.id.clone(), serde_json::to_string(&View::of(shown)).ok()?))
            })
            .collect();
        match self.write(db, &views).await {
            Ok(()) => {
                self.written = views;
                self.failing = false;
            }
            Err(e) if !self.failing => {
                tracing::warn!(error = %e, "data plane: cannot publish the load balancers' state for the other replicas; retrying at each resync");
                self.failing = true;
            }
            Err(_) => {}
        }
    }

    async fn write(&self, db: &Db, views: &HashMap<String, String>) -> Result<()> {
        let changed: Vec<(&str, &str)> = views
            .iter()
            .filter(|(id, view)| self.written.get(*id) != Some(*view))
            .map(|(id, view)| (id.as_str(), view.as_str()))
            .collect();
        // Every view not written now is gone, this replica's old ones and any a previous data plane left.
        let sweep = self.written.is_empty() || self.written.keys().any(|id| !views.contains_key(id));
        lb_views::publish(db, &changed, sweep.then_some(views), now_ms()).await
    }
}

/// The published views, by load balancer ID (`id`: that one's only); none when no data plane published lately.
pub async fn read(db: &Db, id: Option<&str>) -> Result<HashMap<String, View>> {
    let rows = lb_views::read(db, id, now_ms().saturating_sub(ms(STALE))).await?;
    Ok(rows.into_iter().filter_map(|(id, view)| Some((id, serde_json::from_str(&view).ok()?))).collect())
}

//! Outages as the engine keeps them: started, listed, stopped, and the zones they darken.

use fakecloud_api::{Outage, StartOutageRequest};

use super::index_of;
use crate::db::now_ms;
use crate::error::Result;
use crate::faults::FaultEngine;
use crate::faults::outages::ActiveOutage;

impl FaultEngine {
    pub async fn start_outage(&self, req: StartOutageRequest, zones: &[&str]) -> Result<Outage> {
        let _edit = self.editing().await?;
        let mut outages = self.outages.write().await;
        let id = self.new_id("outage", "outage", |id| outages.iter().any(|o| o.id == id)).await?;
        let outage = ActiveOutage::new(id, req, zones, now_ms())?;
        self.persist("outage", &outage.id, 0, &outage.stored()).await?;
        tracing::warn!(outage = %outage.id, "outage started");
        let api = outage.to_api();
        outages.push(outage);
        Ok(api)
    }

    pub async fn list_outages(&self) -> Vec<Outage> {
        self.sync().await;
        let now = now_ms();
        self.outages.read().await.iter().filter(|o| o.active(now)).map(ActiveOutage::to_api).collect()
    }

    pub async fn stop_outage(&self, id: &str) -> Result<Outage> {
        let _edit = self.editing().await?;
        let mut outages = self.outages.write().await;
        let at = index_of(&outages, id, |o| &o.id, "outage")?;
        self.forget("outage", id).await?;
        tracing::info!(outage = %id, "outage stopped");
        Ok(outages.remove(at).to_api())
    }

    /// Zones in an outage now: their instances are reported unreachable.
    pub async fn dark_zones(&self) -> Vec<String> {
        let now = now_ms();
        self.outages
            .read()
            .await
            .iter()
            .filter(|o| o.active(now))
            .filter_map(|o| o.zone().map(str::to_string))
            .collect()
    }
}

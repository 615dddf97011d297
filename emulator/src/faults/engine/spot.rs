//! Random spot reclamation as the engine keeps it: started, stopped, and the ticker that draws each second.

use std::sync::Arc;
use std::time::Duration;

use fakecloud_api::{SpotRandom, SpotRandomRequest};

use crate::db::now_ms;
use crate::error::Result;
use crate::faults::FaultEngine;
use crate::faults::spot_random::ActiveSpotRandom;
use crate::store;

impl FaultEngine {
    pub async fn start_spot_random(&self, req: SpotRandomRequest) -> Result<SpotRandom> {
        let _edit = self.editing().await?;
        let now = now_ms();
        let active = ActiveSpotRandom::new(&req, self.seed, now)?;
        self.persist("spot_random", "spot-random", 0, active.stored()).await?;
        let api = active.to_api();
        *self.spot_random.write().await = Some(Arc::new(active));
        tracing::warn!(rate_per_minute = req.rate_per_minute, "random spot reclamation started");
        Ok(api)
    }

    pub async fn stop_spot_random(&self) -> Result<()> {
        let _edit = self.editing().await?;
        self.forget("spot_random", "spot-random").await?;
        *self.spot_random.write().await = None;
        Ok(())
    }

    /// Run the random spot draws once a second until the process ends. Emulators sharing the database follow
    /// the faults every second and draw in turn: a second is drawn by the one that claims it.
    pub fn spawn_spot_ticker(self: &Arc<Self>, cfg: crate::config::Config) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                // On the writer's connection, which the lifecycle ticker keeps open anyway: a reader used every
                // second would never be closed as idle, and an account nobody calls would hold readers on every
                // replica (the book, docs/book/src/farm.md, "Connections on PostgreSQL").
                engine.sync_on(engine.db.writer()).await;
                let now = now_ms();
                let Some(active) = engine.spot_random.read().await.clone().filter(|a| a.active(now)) else { continue };
                if engine.shared && !engine.claimed(now.div_euclid(1000)).await {
                    continue;
                }
                match active.tick(&engine.db, &cfg).await {
                    Ok(Some(name)) => tracing::warn!(instance = %name, "random spot reclamation"),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "random spot reclamation failed; trying again next second"),
                }
            }
        })
    }

    /// Whether this emulator claimed second `second` of random spot reclamation (a database that cannot be
    /// reached: no, so two emulators never draw the same second).
    async fn claimed(&self, second: i64) -> bool {
        store::faults::claim_second(&self.db, second).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot claim a second of random spot reclamation; trying again next second");
            false
        })
    }
}

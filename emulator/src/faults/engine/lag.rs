//! Eventual consistency: reads that lag behind a write, here and, shared, on every replica.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::db::now_ms;
use crate::faults::FaultEngine;
use crate::store;

impl FaultEngine {
    /// Eventual consistency: until `for_` has passed, reads of `id` see `previous` — its version from before the
    /// write — or, for a resource the write created (`None`), nothing at all.
    /// Shared, the lag is a row every emulator reads (see `crate::store::faults`).
    pub async fn lag(&self, id: &str, previous: Option<serde_json::Value>, for_: Duration) {
        let now = now_ms();
        let until = now.saturating_add(crate::db::ms(for_));
        if self.shared {
            match store::faults::lag(&self.db, id, previous.as_ref(), until, now).await {
                Ok(()) => {
                    self.lag_until.fetch_max(until, Ordering::AcqRel);
                }
                Err(e) => tracing::warn!(%id, error = %e, "cannot record the lag in the database; lagging here only"),
            }
        }
        self.hidden.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), (until, previous));
    }

    /// What reads must see instead of the truth right now, by ID (expired entries are dropped). Shared, what
    /// the database says while a lag it knows of lasts; this emulator's own when it cannot be read.
    pub async fn lagging_now(&self) -> HashMap<String, Option<serde_json::Value>> {
        let now = now_ms();
        if self.shared && now < self.lag_until.load(Ordering::Acquire) {
            match store::faults::lagging(&self.db, now).await {
                Ok(lagging) => return lagging,
                Err(e) => tracing::warn!(error = %e, "cannot read the lags in the database; showing this emulator's"),
            }
        }
        let mut hidden = self.hidden.lock().unwrap_or_else(|p| p.into_inner());
        hidden.retain(|_, (until, _)| *until > now);
        hidden.iter().map(|(id, (_, prev))| (id.clone(), prev.clone())).collect()
    }
}

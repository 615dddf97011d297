//! Rate limits and presets as the engine keeps them: a limit set by name, a cloud's throttling installed as a
//! preset's limits, both listed with their buckets (shared, as the database holds them) and removed.

use std::sync::Arc;

use fakecloud_api::{
    PresetLimit, QuotaName, QuotaRefusal, RateLimit, RateLimitPreset, RateLimitPresetInfo, SetRateLimitRequest,
};

use super::index_of;
use crate::error::Result;
use crate::faults::rate_limits::ActiveLimit;
use crate::faults::{FaultEngine, presets};
use crate::store;
use crate::store::faults::RATE_LIMIT;

impl FaultEngine {
    pub async fn set_limit(&self, id: &str, spec: SetRateLimitRequest) -> Result<RateLimit> {
        let _edit = self.editing().await?;
        crate::validate::NAME.check("id", id)?;
        let limit = ActiveLimit::new(id, spec, &self.operations)?;
        let mut limits = self.limits.write().await;
        let api = self.put_limit(&mut limits, limit).await?;
        tracing::info!(limit = %id, "rate limit set");
        Ok(api)
    }

    /// Store `limit` and put it in force, replacing the one of its name. Under the edit lock.
    async fn put_limit(&self, limits: &mut Vec<Arc<ActiveLimit>>, limit: ActiveLimit) -> Result<RateLimit> {
        self.persist(RATE_LIMIT, &limit.id, 0, &limit.stored()).await?;
        self.empty_buckets(Some(&limit.id)).await?;
        limits.retain(|l| l.id != limit.id);
        let api = limit.to_api(None);
        limits.push(Arc::new(limit));
        Ok(api)
    }

    /// Install a cloud's throttling: its limits replace every preset's (limits set by name stay).
    pub async fn install_preset(&self, preset: RateLimitPreset) -> Result<Vec<RateLimit>> {
        let _edit = self.editing().await?;
        let built = presets::limits(preset)
            .into_iter()
            .map(|(id, spec)| ActiveLimit::new(&id, spec, &self.operations))
            .collect::<Result<Vec<_>>>()?;
        let mut limits = self.limits.write().await;
        self.forget_presets(&mut limits).await?;
        let mut installed = Vec::new();
        for limit in built {
            installed.push(self.put_limit(&mut limits, limit).await?);
        }
        tracing::info!(%preset, "rate limit preset installed");
        Ok(installed)
    }

    /// Remove every preset's limits; what was removed.
    pub async fn clear_presets(&self) -> Result<Vec<RateLimit>> {
        let _edit = self.editing().await?;
        let mut limits = self.limits.write().await;
        self.forget_presets(&mut limits).await
    }

    /// One at a time, so that memory never holds a limit the database has lost, nor the other way round.
    async fn forget_presets(&self, limits: &mut Vec<Arc<ActiveLimit>>) -> Result<Vec<RateLimit>> {
        let mut removed = Vec::new();
        while let Some(at) = limits.iter().position(|l| presets::is_preset_limit(&l.id)) {
            self.forget(RATE_LIMIT, &limits[at].id).await?;
            removed.push(limits.remove(at).to_api(None));
        }
        Ok(removed)
    }

    /// Every preset, as `GET /v1/rate-limit-presets` shows it.
    pub async fn presets(&self) -> Vec<RateLimitPresetInfo> {
        self.sync().await;
        let installed = self.installed_preset().await;
        RateLimitPreset::ALL
            .into_iter()
            .map(|preset| RateLimitPresetInfo {
                name: preset,
                installed: installed == Some(preset),
                limits: presets::limits(preset).into_iter().map(|(id, limit)| PresetLimit { id, limit }).collect(),
                quota_refusals: QuotaName::ALL
                    .into_iter()
                    .map(|quota| {
                        let (status, code) = presets::quota_refusal(preset, quota);
                        QuotaRefusal { quota, status, code: code.into() }
                    })
                    .collect(),
            })
            .collect()
    }

    /// The preset whose limits are in force, if any.
    pub async fn installed_preset(&self) -> Option<RateLimitPreset> {
        presets::installed(self.limits.read().await.iter().map(|l| l.id.as_str()))
    }

    pub async fn list_limits(&self) -> Vec<RateLimit> {
        self.sync().await;
        let limits = self.limits.read().await;
        if !self.shared {
            return limits.iter().map(|l| l.to_api(None)).collect();
        }
        let refused = self.shared_counts(RATE_LIMIT).await.unwrap_or_default();
        let rows = store::faults::buckets(&self.db).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the shared rate-limit buckets; showing them full");
            Vec::new()
        });
        limits
            .iter()
            .map(|l| {
                let own: Vec<(String, i64, i64)> = rows
                    .iter()
                    .filter(|r| r.0 == l.id)
                    .map(|(_, key, mark, calls)| (key.clone(), *mark, *calls))
                    .collect();
                l.to_api(Some((&own, refused.get(&l.id).map_or(0, |(_, injected)| *injected))))
            })
            .collect()
    }

    pub async fn delete_limit(&self, id: &str) -> Result<RateLimit> {
        let _edit = self.editing().await?;
        let mut limits = self.limits.write().await;
        let at = index_of(&limits, id, |l| &l.id, "rate limit")?;
        self.forget(RATE_LIMIT, id).await?;
        Ok(limits.remove(at).to_api(None))
    }
}

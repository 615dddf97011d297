//! Random spot reclamation: once a second, with probability rate/60, one live spot instance (drawn from the
//! seeded generator) gets an interruption notice. Emulators sharing a database draw in turn: each second is
//! drawn by the one that claims it (see `crate::store::faults::claim_second`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fakecloud_api::limits::{NOTICE_SECONDS_MAX, SPOT_RATE_PER_MINUTE_MAX};
use fakecloud_api::{ReclaimRequest, SpotRandom, SpotRandomRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::Config;
use crate::db::{Db, now_ms, rfc3339};
use crate::error::{ApiError, Result};
use crate::store::instances;
use crate::validate;

pub struct ActiveSpotRandom {
    /// As stored: the request and when it started.
    spec: String,
    rate_per_minute: f64,
    notice: Duration,
    until_ms: Option<i64>,
    rng: Mutex<StdRng>,
    reclaimed: AtomicU64,
}

impl ActiveSpotRandom {
    pub fn new(req: &SpotRandomRequest, seed: u64, now: i64) -> Result<Self> {
        let spec = serde_json::to_string(&(req, now)).map_err(|e| ApiError::internal(e.to_string()))?;
        validate::in_range("rate_per_minute", req.rate_per_minute, 0.0, SPOT_RATE_PER_MINUTE_MAX)?;
        let notice =
            validate::in_range("notice_seconds", req.notice_seconds.unwrap_or(120.0), 0.0, NOTICE_SECONDS_MAX)?;
        let until_ms = validate::window_end("duration_seconds", req.duration_seconds, now)?;
        Ok(Self {
            spec,
            rate_per_minute: req.rate_per_minute,
            notice: Duration::from_secs_f64(notice),
            until_ms,
            // Its own stream, so adding fault rules does not change which instances are reclaimed.
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0x5eed_5907)),
            reclaimed: AtomicU64::new(0),
        })
    }

    pub fn restore(spec: &str, seed: u64) -> Result<Self> {
        let (req, started): (SpotRandomRequest, i64) =
            serde_json::from_str(spec).map_err(|e| ApiError::internal(e.to_string()))?;
        Self::new(&req, seed, started)
    }

    pub fn stored(&self) -> &str {
        &self.spec
    }

    pub fn active(&self, now: i64) -> bool {
        self.until_ms.is_none_or(|u| now < u)
    }

    pub fn to_api(&self) -> SpotRandom {
        SpotRandom {
            rate_per_minute: self.rate_per_minute,
            notice_seconds: self.notice.as_secs_f64(),
            until: self.until_ms.map(rfc3339),
            reclaimed: self.reclaimed.load(Ordering::SeqCst),
        }
    }

    /// One second's draw. Returns the reclaimed instance's name, if any.
    pub async fn tick(&self, db: &Db, cfg: &Config) -> Result<Option<String>> {
        let pick = {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            (rng.random::<f64>() < self.rate_per_minute / 60.0).then(|| rng.random::<u64>())
        };
        let Some(pick) = pick else { return Ok(None) };
        let now = now_ms();
        let candidates = instances::spot_candidates(db, now).await?;
        if candidates.is_empty() {
            return Ok(None);
        }
        let id = candidates[(pick % candidates.len() as u64) as usize].clone();
        let req = ReclaimRequest {
            instance_ids: vec![id],
            notice_seconds: Some(self.notice.as_secs_f64()),
            ..Default::default()
        };
        let done = instances::reclaim(db, cfg, &req).await?;
        self.reclaimed.fetch_add(1, Ordering::SeqCst);
        Ok(done.into_iter().next().map(|i| i.name))
    }
}

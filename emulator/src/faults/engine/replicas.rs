//! Several emulators on one PostgreSQL database are one cloud, and fault as one: a fault set through one holds
//! on all (they follow a generation each change bumps), and an edit through one waits for another's (a lock in
//! the database). What else they count and see as one — a rule's counts, a limit's buckets and refusals,
//! eventual consistency's lag, which of them draws a second of random spot reclamation — is kept in the
//! database too (`crate::store::faults`). One emulator alone keeps all of it in memory.

use std::sync::atomic::Ordering;

use crate::db::AnyPool;
use crate::db::postgres::{self, Held};
use crate::error::Result;
use crate::faults::FaultEngine;
use crate::store;

/// The right to change the faults: this emulator's lock and, shared, the database's (see
/// [`FaultEngine::editing`]).
pub(in crate::faults) struct Editing<'a> {
    _here: tokio::sync::MutexGuard<'a, ()>,
    _everywhere: Option<Held>,
}

impl FaultEngine {
    /// Several emulators on one PostgreSQL database are one cloud, so a fault set through one holds on all:
    /// each change bumps a generation in the database (in [`Self::persist`] and [`Self::forget`]), and an
    /// emulator that reads a newer one puts the stored faults in force again. One read per user call (the
    /// gatekeeper's, which what the call's handler asks of the engine relies on), per admin listing and per
    /// data-plane judgement; none on SQLite, whose file has one emulator. The same read brings the end of the
    /// latest eventual-consistency lag (see [`Self::lagging_now`]).
    pub async fn sync(&self) {
        self.sync_on(self.db.reader()).await
    }

    /// [`Self::sync`], its generation read on `pool`'s connections.
    pub(super) async fn sync_on(&self, pool: &AnyPool) {
        if self.shared && self.read_generation(pool).await.is_some_and(|g| g != self.generation.load(Ordering::Acquire))
        {
            let _edit = self.edit.lock().await;
            self.sync_locked().await;
        }
    }

    /// [`Self::sync`] with the edit lock held.
    async fn sync_locked(&self) {
        if !self.shared {
            return;
        }
        let Some(generation) = self.read_generation(self.db.reader()).await else { return };
        if generation == self.generation.load(Ordering::Acquire) {
            return;
        }
        // Read after the generation, so what it counts is in the rows (a change is written before its bump).
        match store::faults::all(&self.db).await {
            Ok(rows) => {
                self.put_in_force(&rows).await;
                self.generation.store(generation, Ordering::Release);
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the faults another emulator changed; trying again"),
        }
    }

    /// The faults' generation, read on `pool`; it notes the latest lag's end on the way.
    async fn read_generation(&self, pool: &AnyPool) -> Option<i64> {
        match store::faults::generation(pool).await {
            Ok((generation, lag_until)) => {
                self.lag_until.fetch_max(lag_until, Ordering::AcqRel);
                Some(generation)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the faults' generation; judging by the faults known");
                None
            }
        }
    }

    /// The edit lock, taken with the faults up to date: an edit starts from what every emulator set. Shared,
    /// it is the database's too (issue #47): two edits through two replicas at once are one after the other, so
    /// a rule's name is taken once and one preset's limits replace the other's.
    pub(in crate::faults) async fn editing(&self) -> Result<Editing<'_>> {
        let here = self.edit.lock().await;
        let everywhere = match self.shared {
            true => Some(postgres::hold_faults_lock(self.db.reader()).await?),
            false => None,
        };
        self.sync_locked().await;
        Ok(Editing { _here: here, _everywhere: everywhere })
    }
}

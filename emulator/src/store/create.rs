//! The create every resource goes through. A resource brings its own part ([`NewResource`]: its checks, its
//! insert, its answer); the pipeline does the rest in the same order for all:
//!
//! 1. in the write's first round trip to SQLite: the replay look-up of the idempotency key, the resource's own
//!    checks, the quota reads and — the usual create — the address lease, the insert and the key's record;
//! 2. judged in order: what the checks found that the key's scope needs (a route's table), the replay (an
//!    earlier create with the same key and request answers as it did), the rest of the checks, the quotas, then
//!    the insert's own conflicts. A refusal drops the write, and its savepoint undoes the usual insert;
//! 3. an address the resource chose itself, or one the usual lease could not find past the pool's top, is
//!    leased then, and the insert made after it;
//! 4. committed with the call's audit entry ([`crate::call::commit`]).

use std::future::Future;
use std::net::IpAddr;

use super::idempotency::{self, Replay};
use super::ipam;
use super::quotas::{self, Check};
use super::write::begin_with;
use crate::call;
use crate::config::Pool;
use crate::db::{Db, NotDone, Ran, Script, Step, Tx};
use crate::error::{ApiError, Result};
/// Where a new resource's address comes from.
pub enum Address<'a> {
    /// It has none.
    None,
    /// The next free one of this pool, leased in the write's first round trip.
    Next(&'a Pool),
    /// One the resource leases itself once the checks have passed ([`NewResource::lease_own`]): an address the
    /// request names.
    Own,
}

/// A resource's own part in its create.
pub trait NewResource: Sync {
    /// The resource as the API answers with it.
    type Made;
    /// What its checks found that the rest of the create needs (a route's table), or `()`.
    type Found: Send + Sync;

    fn id(&self) -> &str;

    /// The scope its idempotency keys are looked up and kept in: its create operation, and for a resource
    /// inside another, that one as `found` names it. `None` while it cannot be told without `found`: the
    /// replay look-up then waits for the checks (a round trip of its own).
    fn key_scope(&self, found: Option<&Self::Found>) -> Option<String>;

    fn address(&self) -> Address<'_>;

    /// The quotas it counts against, read in the first round trip and judged after its own checks.
    fn quotas(&self) -> &[Check] {
        &[]
    }

    /// Its own checks, pushed onto the first round trip of a write at `now`.
    fn push_checks(&self, _script: &mut Script, _now: i64) -> Vec<Step> {
        Vec::new()
    }

    /// What the checks found; refused here before the replay look-up.
    fn found(&self, ran: &Ran, checks: &[Step]) -> Result<Self::Found>;

    /// The rest of the checks' verdict, once the call is known not to be a replay.
    fn judge(&self, _found: &Self::Found, _ran: &Ran, _checks: &[Step]) -> Result<()> {
        Ok(())
    }

    /// Push its insert, created at `now`, at `address` (`None`: the one just leased to it, or none).
    fn push_insert(&self, script: &mut Script, now: i64, address: Option<IpAddr>) -> Step;

    /// The insert's outcome: a unique index that refused it becomes the resource's conflict, naming what
    /// holds the name or destination.
    fn inserted<'a>(
        &'a self,
        tx: &'a mut Tx,
        found: &'a Self::Found,
        outcome: std::result::Result<u64, NotDone<'a>>,
    ) -> impl Future<Output = Result<()>> + Send + 'a;

    /// Lease the address the request names ([`Address::Own`]).
    fn lease_own(&self, _tx: &mut Tx) -> impl Future<Output = Result<IpAddr>> + Send {
        async { Err(ApiError::internal("this resource leases no address of its own")) }
    }

    /// The new resource as the create answers it.
    fn made(&self, now: i64, address: Option<IpAddr>, found: Self::Found) -> Result<Self::Made>;

    /// What it writes beside its row once inserted, in the create's transaction (an AWS face's own record of
    /// it, `load_balancers::Beside`).
    fn write_beside<'a>(&'a self, _tx: &'a mut Tx) -> impl Future<Output = Result<()>> + Send + 'a {
        async { Ok(()) }
    }

    /// The resource an earlier create with the same key made (a replay).
    fn fetch<'a>(
        &'a self,
        tx: &'a mut Tx,
        id: &'a str,
        now: i64,
    ) -> impl Future<Output = Result<Self::Made>> + Send + 'a;
}

/// The steps of the first round trip.
struct First {
    replay: Option<Step>,
    checks: Vec<Step>,
    quotas: Option<Step>,
    usual: Option<Insert>,
}

/// An insert's steps: the lease of its address from a pool (if the first round trip made one), the insert,
/// the key's record.
#[derive(Clone, Copy)]
struct Insert {
    lease: Option<Step>,
    insert: Step,
    recorded: Option<Step>,
}

impl Insert {
    /// Whether the insert went in, as the resource reads its outcome, and the key's record with it.
    async fn outcome<R: NewResource>(self, new: &R, tx: &mut Tx, found: &R::Found, ran: &Ran) -> Result<()> {
        new.inserted(tx, found, ran.affected(self.insert)).await?;
        if let Some(recorded) = self.recorded {
            ran.affected(recorded)?;
        }
        Ok(())
    }
}

/// Create `new` as the request `request_json` with `key` asks; returns it and whether it was a replay.
pub async fn create<R: NewResource>(
    db: &Db,
    new: &R,
    key: Option<&str>,
    request_json: &str,
) -> Result<(R::Made, bool)> {
    let early_scope = new.key_scope(None);
    let (mut tx, now, ran, first) = begin_with(db, |now, s| {
        let replay = key.zip(early_scope.as_deref()).map(|(k, scope)| idempotency::push_lookup(s, scope, k));
        let checks = new.push_checks(s, now);
        let quotas = (!new.quotas().is_empty()).then(|| quotas::push_read(s, new.quotas()));
        // The usual insert rides along unless a key must be looked up first in a scope the checks will tell.
        let usual = (key.is_none() || early_scope.is_some())
            .then(|| {
                let lease = match new.address() {
                    Address::Next(pool) => Some(ipam::push_lease_next(s, pool, new.id())),
                    Address::None => None,
                    Address::Own => return None,
                };
                let insert = new.push_insert(s, now, None);
                let scope = early_scope.as_deref().unwrap_or_default();
                let recorded = idempotency::push_record(s, scope, key, request_json, new.id(), now);
                Some(Insert { lease, insert, recorded })
            })
            .flatten();
        First { replay, checks, quotas, usual }
    })
    .await?;

    let found = new.found(&ran, &first.checks)?;
    let scope = new.key_scope(Some(&found)).unwrap_or_default();
    let replay = match (key, first.replay) {
        (Some(key), Some(step)) => idempotency::judge(ran.rows(step)?, &scope, key, request_json)?,
        (Some(key), None) => idempotency::check(&mut tx, &scope, Some(key), request_json).await?,
        (None, _) => Replay::Fresh,
    };
    if let Replay::Existing(id) = replay {
        return Ok((new.fetch(&mut tx, &id, now).await?, true));
    }
    new.judge(&found, &ran, &first.checks)?;
    if let Some(step) = first.quotas {
        quotas::judge(new.quotas(), ran.rows(step)?)?;
    }

    let usual_address = match (first.usual, new.address()) {
        (Some(Insert { lease: Some(lease), .. }), Address::Next(pool)) => {
            ipam::leased(pool, &ran, lease)?.map(IpAddr::V4)
        }
        _ => None,
    };
    let address = match first.usual {
        // The usual create went through with its address (or needed none): only its outcome is left to read.
        Some(usual) if usual.lease.is_none() || usual_address.is_some() => {
            usual.outcome(new, &mut tx, &found, &ran).await?;
            usual_address
        }
        // The top of the pool is taken (the usual insert found no address and failed), the request names its
        // address, or the key was looked up after the checks: lease now, then insert.
        _ => {
            let record = key.map(|key| Record { scope: &scope, key, request_json, made: new.id() });
            lease_and_insert(&mut tx, new, &found, now, first.usual.is_some(), record).await?
        }
    };
    new.write_beside(&mut tx).await?;
    call::commit(tx, new.id()).await?;
    Ok((new.made(now, address, found)?, false))
}

/// What a key's record says: the request, and the IDs of what it made (space-separated: a batch makes several).
struct Record<'a> {
    scope: &'a str,
    key: &'a str,
    request_json: &'a str,
    made: &'a str,
}

/// Lease `new`'s address now and insert it, with the key's record if `record` is given. `retry`: the usual
/// lease of the first round trip found no address below the pool's top, so only a free one is left.
async fn lease_and_insert<R: NewResource>(
    tx: &mut Tx,
    new: &R,
    found: &R::Found,
    now: i64,
    retry: bool,
    record: Option<Record<'_>>,
) -> Result<Option<IpAddr>> {
    let address = match new.address() {
        Address::None => None,
        Address::Next(pool) if retry => Some(IpAddr::V4(ipam::allocate_free(tx, pool, new.id()).await?)),
        Address::Next(pool) => Some(IpAddr::V4(ipam::allocate(tx, pool, new.id()).await?)),
        Address::Own => Some(new.lease_own(tx).await?),
    };
    let mut script = Script::new();
    let insert = new.push_insert(&mut script, now, address);
    let recorded =
        record.and_then(|r| idempotency::push_record(&mut script, r.scope, Some(r.key), r.request_json, r.made, now));
    let ran = tx.run(script).await;
    Insert { lease: None, insert, recorded }.outcome(new, tx, found, &ran).await?;
    Ok(address)
}

/// Create as many of `news` as the quotas leave room for, and at least `min` (else the quota's refusal), in one
/// transaction, as the request `request_json` with `key` asks: EC2's `RunInstances` with `MinCount` and
/// `MaxCount`. Returns what it made and whether it was a replay (of every one the earlier request made). Each
/// leases its address and is inserted in a round trip of its own: a batch is rare, and small.
pub async fn create_all<R: NewResource>(
    db: &Db,
    news: &[R],
    min: usize,
    key: Option<&str>,
    request_json: &str,
) -> Result<(Vec<R::Made>, bool)> {
    let lead = news.first().ok_or_else(|| ApiError::internal("a batch create of nothing"))?;
    // A batch's resources are not inside another, so their keys' scope is known before any check.
    let scope = lead.key_scope(None).ok_or_else(|| ApiError::internal("a batch needs a key scope"))?;
    let (mut tx, now, ran, (replay, checks, quota_read)) = begin_with(db, |now, s| {
        let replay = key.map(|k| idempotency::push_lookup(s, &scope, k));
        let checks: Vec<Vec<Step>> = news.iter().map(|n| n.push_checks(s, now)).collect();
        let quota_read = (!lead.quotas().is_empty()).then(|| quotas::push_read(s, lead.quotas()));
        (replay, checks, quota_read)
    })
    .await?;
    let found = news.iter().zip(&checks).map(|(n, c)| n.found(&ran, c)).collect::<Result<Vec<_>>>()?;
    if let (Some(key), Some(step)) = (key, replay)
        && let Replay::Existing(ids) = idempotency::judge(ran.rows(step)?, &scope, key, request_json)?
    {
        let mut made = Vec::new();
        for id in ids.split(' ') {
            made.push(lead.fetch(&mut tx, id, now).await?);
        }
        return Ok((made, true));
    }
    for ((new, found), checks) in news.iter().zip(&found).zip(&checks) {
        new.judge(found, &ran, checks)?;
    }
    // Each resource counts as the lead's checks say (one instance each).
    let count = match quota_read {
        Some(step) => quotas::room(lead.quotas(), ran.rows(step)?, min, news.len())?,
        None => news.len(),
    };
    let ids: Vec<&str> = news[..count].iter().map(NewResource::id).collect();
    let made_ids = ids.join(" ");
    let mut made = Vec::new();
    for (i, (new, found)) in news.iter().zip(found).take(count).enumerate() {
        let record = (i + 1 == count).then_some(key).flatten().map(|key| Record {
            scope: &scope,
            key,
            request_json,
            made: &made_ids,
        });
        let address = lease_and_insert(&mut tx, new, &found, now, false, record).await?;
        new.write_beside(&mut tx).await?;
        made.push(new.made(now, address, found)?);
    }
    call::commit_all(tx, &ids).await?;
    Ok((made, false))
}

//! Accounts (issue #28): clouds of their own on one emulator, each reached with its own tokens, as several
//! clusters or CI jobs each get an account of a real cloud. An account is a whole [`Cloud`] — a database of its
//! own (`fakecloud.accounts/<id>.db` beside `fakecloud.db`; on PostgreSQL a schema, `account_<id>`, in the
//! emulator's database), fault engine, rate limits, quotas and audit log —
//! so one account's calls cannot see or change another's, nor spend its budget: every token of an account draws
//! from the account's buckets. The emulator's own database keeps which accounts there are, and their tokens; a
//! call is routed to its account's cloud by its token ([`Accounts::route`]), and the emulator's own admin token
//! (the operator's) creates, lists and deletes them, and leases them out: a CI job takes an account for a time,
//! renews it, and releases it; a released or lapsed lease has the account wiped — an empty cloud with new
//! tokens, so the old holder's stop working — by the janitor ([`Accounts::spawn_janitor`]) at the latest a
//! second after it lapses. An account's load balancers get addresses but no data plane: only the emulator's own
//! are served (`--serve-load-balancers`). Several emulators on one PostgreSQL database hold the same accounts
//! ([`Accounts::sync`]): what one changes, the others follow before their next call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;

use fakecloud_api::limits::{ACCOUNTS_MAX, LEASE_TTL_SECONDS_MAX, LEASE_TTL_SECONDS_MIN};
use fakecloud_api::{Account, CreatedAccount, Lease, LeaseRequest, LeasedAccount, RenewLeaseRequest, codes};
use futures::future::BoxFuture;

use crate::auth::Tokens;
use crate::cloud::{self, Cloud};
use crate::config::{Config, DbLocation};
use crate::db::{Db, now_ms, rfc3339};
use crate::error::{ApiError, Kind, Result};
use crate::store::accounts::{self as rows, Row};
use crate::{credentials, validate};

/// The emulator's own account: the tokens `fakecloud serve` is given or generates.
pub const DEFAULT: &str = "default";

pub struct Accounts {
    /// The emulator's own database, where the accounts are listed.
    db: Db,
    /// Where the accounts' stores are.
    stores: Stores,
    /// An account's cloud: the emulator's configuration without the data plane, and without a snapshot
    /// directory (snapshots are files on the operator's machine: the operator's alone).
    cfg: Config,
    clouds: RwLock<BTreeMap<String, Arc<Cloud>>>,
    /// Creates, deletes, leases and wipes one at a time (each opens or removes a database, or hands out tokens);
    /// see [`Accounts::changing`].
    changes: tokio::sync::Mutex<()>,
    /// Whether other emulators may share the database (PostgreSQL), and the accounts' generation (see
    /// `store::accounts::GENERATION`) whose clouds this one has open.
    shared: bool,
    generation: AtomicI64,
}

/// The right to change the accounts: this emulator's lock and, when others share the database, the database's.
struct Changing<'a> {
    _here: tokio::sync::MutexGuard<'a, ()>,
    _everywhere: Option<sqlx::Transaction<'static, sqlx::Any>>,
}

/// Where the accounts' stores are, beside the emulator's own. Logged when the accounts open: see its `Debug`.
enum Stores {
    /// A SQLite file each, in this directory beside the emulator's file.
    Files(PathBuf),
    /// A database each in memory, as the emulator's own is.
    Memory,
    /// A schema each (`account_<id>`, `-` as `_`) in the emulator's PostgreSQL database, at this URL.
    Schemas(String),
}

/// As the log shows it: the URL without its password.
impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Files(dir) => f.debug_tuple("Files").field(dir).finish(),
            Self::Memory => f.write_str("Memory"),
            Self::Schemas(url) => f.debug_tuple("Schemas").field(&crate::config::redact(url)).finish(),
        }
    }
}

/// An account's schema on PostgreSQL: its ID, which has no `_`, with `-` as `_` (a plain identifier).
pub fn schema(id: &str) -> String {
    format!("account_{}", id.replace('-', "_"))
}

/// How often the janitor looks for lapsed leases.
const JANITOR_PERIOD: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounts").field("stores", &self.stores).finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot read the accounts from the emulator's database: {0}")]
    List(#[from] ApiError),
    #[error("cannot open account {id}: {cause}")]
    Cloud { id: String, cause: cloud::OpenError },
}

impl Accounts {
    /// The accounts listed in `db` (the emulator's own database, at `location`), each opened.
    pub async fn open(db: Db, location: &DbLocation, cfg: &Config) -> Result<Arc<Self>, OpenError> {
        let stores = match location {
            DbLocation::File(path) => Stores::Files(path.with_extension("accounts")),
            DbLocation::Memory => Stores::Memory,
            DbLocation::Postgres(url) => Stores::Schemas(url.clone()),
        };
        let cfg = Config { serve_load_balancers: false, holds_public_pool: false, snapshot_dir: None, ..cfg.clone() };
        let shared = matches!(stores, Stores::Schemas(_));
        let generation = AtomicI64::new(rows::generation(&db).await?);
        let accounts = Self {
            db,
            stores,
            cfg,
            clouds: RwLock::default(),
            changes: tokio::sync::Mutex::new(()),
            shared,
            generation,
        };
        for row in rows::list(&accounts.db).await? {
            let tokens = row.tokens();
            let cloud = accounts
                .open_cloud(&row.id, tokens)
                .await
                .map_err(|cause| OpenError::Cloud { id: row.id.clone(), cause })?;
            accounts.write().insert(row.id, Arc::new(cloud));
        }
        let opened = accounts.read_len();
        if opened > 0 {
            tracing::info!(accounts = opened, stores = ?accounts.stores, "accounts opened");
        }
        Ok(Arc::new(accounts))
    }

    /// The router of the account whose token `authorization` (an `Authorization` header's value) carries, if
    /// it is one of theirs.
    pub fn route(&self, authorization: Option<&str>) -> Option<Router> {
        let clouds = self.clouds.read().unwrap_or_else(|e| e.into_inner());
        clouds.values().find(|c| c.state.tokens.role_of(authorization).is_some()).map(|c| c.router.clone())
    }

    /// Several emulators on one PostgreSQL database hold the same accounts: one that creates, deletes or wipes
    /// an account bumps their generation in the database, and every other opens, closes or reopens its clouds
    /// to match before it routes its next call — so a new account's tokens work through every replica at once,
    /// and a deleted or wiped one's stop. One read per call, none on SQLite (one emulator per file).
    pub async fn sync(&self) {
        if !self.shared {
            return;
        }
        match rows::generation(&self.db).await {
            Ok(g) if g == self.generation.load(Ordering::Acquire) => {}
            Ok(_) => {
                if let Err(e) = self.changing().await {
                    tracing::warn!(error = %e, "cannot open the accounts another emulator changed; trying again");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the accounts' generation; routing by the accounts known"),
        }
    }

    /// Take the right to change the accounts, with them as every emulator left them: an emulator that changes
    /// one holds the database's lock until it is done, so another never reopens a cloud whose schema is being
    /// replaced, nor wipes a lapsed lease a second time.
    async fn changing(&self) -> Result<Changing<'_>> {
        let here = self.changes.lock().await;
        let everywhere = match self.shared {
            true => Some(crate::db::postgres::hold_lock(self.db.reader(), crate::db::postgres::ACCOUNTS_LOCK).await?),
            false => None,
        };
        if self.shared {
            self.open_as_stored().await?;
        }
        Ok(Changing { _here: here, _everywhere: everywhere })
    }

    /// Open, close or reopen this emulator's clouds as the accounts' rows now say, if another changed them.
    async fn open_as_stored(&self) -> Result<()> {
        let generation = rows::generation(&self.db).await?;
        if generation == self.generation.load(Ordering::Acquire) {
            return Ok(());
        }
        let rows = rows::list(&self.db).await?;
        let (stale, missing): (Vec<String>, Vec<&Row>) = {
            let clouds = self.clouds.read().unwrap_or_else(|e| e.into_inner());
            let same = |row: &Row| {
                clouds.get(&row.id).is_some_and(|c| {
                    let t = &c.state.tokens;
                    t.user == row.user_token && t.admin == row.admin_token
                })
            };
            let stale = clouds.keys().filter(|id| !rows.iter().any(|r| &r.id == *id && same(r))).cloned().collect();
            (stale, rows.iter().filter(|r| !same(r)).collect())
        };
        // Gone or wiped elsewhere: its old tokens stop here too (the emulator that changed it removed its store).
        for id in stale {
            let cloud = self.write().remove(&id);
            if let Some(cloud) = cloud {
                cloud.close().await;
            }
        }
        for row in missing {
            let cloud = self
                .open_cloud(&row.id, row.tokens())
                .await
                .map_err(|e| ApiError::internal(format!("cannot open account {}'s database: {e}", row.id)))?;
            self.write().insert(row.id.clone(), Arc::new(cloud));
        }
        self.generation.store(generation, Ordering::Release);
        tracing::info!(generation, "accounts opened as another emulator changed them");
        Ok(())
    }

    pub async fn list(&self) -> Result<Vec<Account>> {
        Ok(rows::list(&self.db).await?.iter().map(account).collect())
    }

    pub async fn get(&self, id: &str) -> Result<Account> {
        Ok(account(&self.row(id).await?))
    }

    async fn row(&self, id: &str) -> Result<Row> {
        rows::list(&self.db).await?.into_iter().find(|r| r.id == id).ok_or_else(|| not_found(id))
    }

    /// A new account with new tokens, its cloud opened on a new database.
    pub async fn create(&self, id: &str) -> Result<CreatedAccount> {
        validate::ACCOUNT_ID.check("id", id)?;
        if id == DEFAULT {
            return Err(ApiError::conflict(
                codes::ACCOUNT_ALREADY_EXISTS,
                "\"default\" is the emulator's own account (its tokens are the ones `fakecloud serve` printed)",
            ));
        }
        let _changing = self.changing().await?;
        if self.read_len() >= ACCOUNTS_MAX {
            return Err(ApiError::new(
                Kind::Exceeded,
                codes::ACCOUNT_LIMIT_EXCEEDED,
                format!("an emulator holds at most {ACCOUNTS_MAX} accounts besides its own; delete one first"),
            ));
        }
        let tokens = credentials::random_tokens();
        let created_at = rows::insert(&self.db, id, &tokens).await?;
        // A database left by an account of this name that was deleted while the emulator died is not this one's.
        self.remove_store(id).await;
        let cloud = match self.open_cloud(id, tokens.clone()).await {
            Ok(cloud) => cloud,
            Err(e) => {
                let _ = rows::delete(&self.db, id).await;
                return Err(ApiError::internal(format!("cannot open account {id}'s database: {e}")));
            }
        };
        self.write().insert(id.to_string(), Arc::new(cloud));
        self.seen_own_change().await;
        tracing::info!(account = id, "account created");
        Ok(CreatedAccount {
            id: id.to_string(),
            created_at: rfc3339(created_at),
            user_token: tokens.user,
            admin_token: tokens.admin,
        })
    }

    /// Delete the account: its tokens stop working at once, then its cloud is closed and its database removed.
    pub async fn delete(&self, id: &str) -> Result<Account> {
        let _changing = self.changing().await?;
        let account = self.get(id).await?;
        rows::delete(&self.db, id).await?;
        self.retire(id).await;
        self.seen_own_change().await;
        tracing::info!(account = id, "account deleted");
        Ok(account)
    }

    /// Lease the account `req.account` names, or the first free one, to `req.holder` for `req.ttl_seconds`. An
    /// account whose lease lapsed is wiped first; the holder's own lease is renewed.
    pub async fn take(&self, req: &LeaseRequest) -> Result<LeasedAccount> {
        let ttl = check_lease(&req.holder, req.ttl_seconds)?;
        if let Some(id) = &req.account {
            validate::ACCOUNT_ID.check("account", id)?;
        }
        let _changing = self.changing().await?;
        let now = now_ms();
        let rows = rows::list(&self.db).await?;
        let row = match &req.account {
            Some(id) => {
                let row = rows.into_iter().find(|r| &r.id == id).ok_or_else(|| not_found(id))?;
                if let Some(holder) = held(&row, now).filter(|h| *h != req.holder) {
                    return Err(leased_by(&row.id, holder, &row));
                }
                row
            }
            None => {
                let total = rows.len();
                rows.into_iter().find(|r| held(r, now).is_none()).ok_or_else(|| {
                    ApiError::conflict(
                        codes::NO_FREE_ACCOUNT,
                        format!(
                            "all {total} accounts are leased: create one (POST /v1/accounts) or wait for a lease to \
                             end"
                        ),
                    )
                })?
            }
        };
        let tokens = if lapsed(&row, now) { self.wipe(&row.id, "its lease lapsed").await? } else { row.tokens() };
        let expires_at = now + ttl;
        rows::lease(&self.db, &row.id, &req.holder, expires_at).await?;
        tracing::info!(account = %row.id, holder = %req.holder, expires_at = %rfc3339(expires_at), "account leased");
        let row = Row { lease_holder: Some(req.holder.clone()), lease_expires_at: Some(expires_at), ..row };
        Ok(LeasedAccount { account: account(&row), user_token: tokens.user, admin_token: tokens.admin })
    }

    /// Renew `id`'s lease, by its holder, for `req.ttl_seconds` from now.
    pub async fn renew(&self, id: &str, req: &RenewLeaseRequest) -> Result<Account> {
        let ttl = check_lease(&req.holder, req.ttl_seconds)?;
        let _changing = self.changing().await?;
        let now = now_ms();
        let row = self.row(id).await?;
        match held(&row, now) {
            Some(holder) if holder == req.holder => {}
            Some(holder) => return Err(leased_by(id, holder, &row)),
            None => {
                return Err(ApiError::conflict(
                    codes::ACCOUNT_LEASED,
                    format!("account {id} is not leased (or its lease lapsed): take it again with POST /v1/leases"),
                ));
            }
        }
        rows::lease(&self.db, id, &req.holder, now + ttl).await?;
        Ok(account(&Row { lease_expires_at: Some(now + ttl), ..row }))
    }

    /// End `id`'s lease now: the account is wiped and free. Releasing a free account changes nothing.
    pub async fn release(&self, id: &str) -> Result<Account> {
        let _changing = self.changing().await?;
        let row = self.row(id).await?;
        if row.lease_holder.is_some() {
            self.wipe(id, "its lease was released").await?;
        }
        Ok(account(&self.row(id).await?))
    }

    /// Wipe every account whose lease lapsed, every [`JANITOR_PERIOD`], until the emulator stops.
    pub fn spawn_janitor(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let accounts = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(JANITOR_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(accounts) = accounts.upgrade() else { return };
                if let Err(e) = accounts.wipe_lapsed().await {
                    tracing::warn!(error = %e, "cannot wipe the accounts whose lease lapsed; trying again");
                }
            }
        })
    }

    async fn wipe_lapsed(&self) -> Result<()> {
        // Looked at first without the lock: every emulator's janitor looks every second.
        if !rows::list(&self.db).await?.iter().any(|row| lapsed(row, now_ms())) {
            return Ok(());
        }
        let _changing = self.changing().await?;
        // Again under it: another emulator's janitor may have wiped them meanwhile.
        let now = now_ms();
        for row in rows::list(&self.db).await? {
            if lapsed(&row, now) {
                self.wipe(&row.id, "its lease lapsed").await?;
            }
        }
        Ok(())
    }

    /// Empty the account and give it new tokens: the old ones stop working at once, then its cloud is closed,
    /// its database removed and a new one opened. Called with `changes` held.
    async fn wipe(&self, id: &str, why: &str) -> Result<Tokens> {
        let tokens = credentials::random_tokens();
        rows::wiped(&self.db, id, &tokens).await?;
        self.retire(id).await;
        let cloud = self
            .open_cloud(id, tokens.clone())
            .await
            .map_err(|e| ApiError::internal(format!("cannot open account {id}'s new database: {e}")))?;
        self.write().insert(id.to_string(), Arc::new(cloud));
        self.seen_own_change().await;
        tracing::info!(account = id, why, "account wiped");
        Ok(tokens)
    }

    /// Close every account's cloud (the emulator is stopping).
    pub async fn close(&self) {
        let clouds: Vec<Arc<Cloud>> = std::mem::take(&mut *self.write()).into_values().collect();
        for cloud in clouds {
            cloud.close().await;
        }
    }

    async fn open_cloud(&self, id: &str, tokens: Tokens) -> Result<Cloud, cloud::OpenError> {
        let location = match &self.stores {
            Stores::Files(dir) => {
                crate::db::create_private_dir(dir).map_err(|cause| {
                    cloud::OpenError::Db(crate::db::OpenError::Create { path: dir.display().to_string(), cause })
                })?;
                DbLocation::File(dir.join(format!("{id}.db")))
            }
            Stores::Memory => DbLocation::Memory,
            Stores::Schemas(url) => DbLocation::Postgres(crate::db::postgres::in_schema(url, &schema(id))),
        };
        Cloud::open(&location, self.cfg.clone(), tokens, None).await
    }

    /// Take the account's cloud out of the routing (its tokens stop working at once), close it and remove its
    /// database.
    async fn retire(&self, id: &str) {
        let cloud = self.write().remove(id);
        if let Some(cloud) = cloud {
            cloud.close().await;
        }
        self.remove_store(id).await;
    }

    /// Remove the account's store: its files, or its schema and everything in it.
    async fn remove_store(&self, id: &str) {
        match &self.stores {
            Stores::Files(dir) => {
                for suffix in ["db", "db-wal", "db-shm"] {
                    let _ = std::fs::remove_file(dir.join(format!("{id}.{suffix}")));
                }
            }
            Stores::Memory => {}
            Stores::Schemas(_) => {
                // (A plain identifier: see `schema`.)
                let drop = sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {} CASCADE", schema(id)));
                if let Err(e) = sqlx::query(drop).execute(self.db.writer()).await {
                    tracing::warn!(account = id, error = %e, "cannot drop the account's schema");
                }
            }
        }
    }

    /// This emulator's clouds match the rows after its own change, made under [`Self::changing`]: the
    /// generation it bumped is not another's news.
    async fn seen_own_change(&self) {
        if !self.shared {
            return;
        }
        match rows::generation(&self.db).await {
            Ok(g) => self.generation.store(g, Ordering::Release),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the accounts' generation; reopening them on the next call")
            }
        }
    }

    fn read_len(&self) -> usize {
        self.clouds.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Cloud>>> {
        self.clouds.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl crate::http::Registry for Accounts {
    fn list(&self) -> BoxFuture<'_, Result<Vec<Account>>> {
        Box::pin(Accounts::list(self))
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Account>> {
        Box::pin(Accounts::get(self, id))
    }
    fn create<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<CreatedAccount>> {
        Box::pin(Accounts::create(self, id))
    }
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Account>> {
        Box::pin(Accounts::delete(self, id))
    }
    fn take<'a>(&'a self, req: &'a LeaseRequest) -> BoxFuture<'a, Result<LeasedAccount>> {
        Box::pin(Accounts::take(self, req))
    }
    fn renew<'a>(&'a self, id: &'a str, req: &'a RenewLeaseRequest) -> BoxFuture<'a, Result<Account>> {
        Box::pin(Accounts::renew(self, id, req))
    }
    fn release<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Account>> {
        Box::pin(Accounts::release(self, id))
    }
}

/// The holder of `row`'s lease, if it holds at `now`.
fn held(row: &Row, now: i64) -> Option<&str> {
    row.lease_holder.as_deref().filter(|_| !lapsed(row, now))
}

/// Whether `row` has a lease that ended by `now` and is not wiped yet.
fn lapsed(row: &Row, now: i64) -> bool {
    row.lease_expires_at.is_some_and(|t| t <= now)
}

fn leased_by(id: &str, holder: &str, row: &Row) -> ApiError {
    let until = row.lease_expires_at.map(rfc3339).unwrap_or_default();
    ApiError::conflict(codes::ACCOUNT_LEASED, format!("account {id} is leased by {holder:?} until {until}"))
}

/// A lease's holder's name checked, and its time to live in milliseconds.
fn check_lease(holder: &str, ttl_seconds: f64) -> Result<i64> {
    validate::NAME.check("holder", holder)?;
    let ttl = validate::in_range("ttl_seconds", ttl_seconds, LEASE_TTL_SECONDS_MIN, LEASE_TTL_SECONDS_MAX)?;
    // Within a week: exact in milliseconds.
    Ok((ttl * 1000.0) as i64)
}

fn account(row: &Row) -> Account {
    let lease = row
        .lease_holder
        .clone()
        .zip(row.lease_expires_at)
        .map(|(holder, expires_at)| Lease { holder, expires_at: rfc3339(expires_at) });
    Account { id: row.id.clone(), created_at: rfc3339(row.created_at), lease }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(codes::ACCOUNT_NOT_FOUND, format!("account {id} does not exist"))
}

//! Accounts (issue #28): clouds of their own on one emulator, each reached with its own tokens, as several
//! clusters or CI jobs each get an account of a real cloud. An account is a whole [`Cloud`] — a database of its
//! own (`fakecloud.accounts/<id>.db` beside `fakecloud.db`; on PostgreSQL a schema in the emulator's database,
//! see [`schema`]), fault engine, rate limits, quotas and audit log —
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
use crate::db::postgres::Held;
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

/// What [`Accounts::sync`] found.
pub enum Synced {
    /// The accounts known here are the database's.
    Current,
    /// Another call is bringing them up to date: a token they do not have may be a new account's.
    CatchingUp,
    /// They may be out of date (another emulator changed them and they could not be opened here): a token
    /// none of them has may still be an account's.
    Stale(ApiError),
    /// The database cannot be reached: no call can be answered but with this.
    Unreachable(ApiError),
}

/// The right to change the accounts: this emulator's lock and, when others share the database, the database's.
struct Changing<'a> {
    _here: tokio::sync::MutexGuard<'a, ()>,
    everywhere: Option<Held>,
}

impl Changing<'_> {
    /// Whether the database's lock is still this emulator's, asked right before a change is committed: a
    /// replica frozen while it held it (a paused container) finds its session ended by the server when it
    /// wakes (see `db::postgres::SESSION_BOUNDS`), and another may be changing the accounts by then.
    async fn still_held(&mut self) -> Result<()> {
        let Some(held) = self.everywhere.as_mut() else { return Ok(()) };
        match held.check().await {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "lost the database session that held the accounts' lock; changing nothing");
                Err(ApiError::new(
                    Kind::Unavailable,
                    codes::SERVICE_UNAVAILABLE,
                    "this replica lost its database session while it held the accounts' lock (was it paused?); \
                     nothing was changed: retry",
                )
                .with_retry_after())
            }
        }
    }
}

/// Where the accounts' stores are, beside the emulator's own. Logged when the accounts open: see its `Debug`.
enum Stores {
    /// A SQLite file each, in this directory beside the emulator's file.
    Files(PathBuf),
    /// A database each in memory, as the emulator's own is.
    Memory,
    /// A schema each (see [`schema`]) in the emulator's PostgreSQL database, at this URL.
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

/// The longest name PostgreSQL keeps: it cuts a longer one to this many bytes, in `CREATE SCHEMA`, `DROP SCHEMA`
/// and `search_path` alike (NAMEDATALEN - 1).
const PG_NAME_MAX: usize = 63;

/// An account's schema on PostgreSQL, a plain identifier of at most [`PG_NAME_MAX`] bytes, one per ID:
/// `account_<id>` with `-` as `_` (an ID has no `_`) while that fits, which is for IDs of up to 55 characters;
/// a longer ID's is `account__<its first 29 characters>_<24 hex digits of its SHA-256>` — the `__` is never in
/// a shorter ID's name, as an ID starts with a letter or digit. (Before issue #47 a long ID's name was cut by
/// PostgreSQL, and two IDs that began alike shared a schema; see [`legacy_schema`].)
pub fn schema(id: &str) -> String {
    let plain = id.replace('-', "_");
    if "account_".len() + plain.len() <= PG_NAME_MAX {
        return format!("account_{plain}");
    }
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(id.as_bytes()).iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("account__{}_{digest}", &plain[..29])
}

/// The schema an account had before issue #47: `account_<id>` as PostgreSQL cut it.
fn legacy_schema(id: &str) -> String {
    let mut name = format!("account_{}", id.replace('-', "_"));
    name.truncate(PG_NAME_MAX);
    name
}

/// A generation no database has (theirs start at 0): the accounts are opened again on the next call.
const UNOPENED: i64 = -1;

/// How long a replica's start waits for the accounts' lock.
const START_WAIT: Duration = Duration::from_secs(60);

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
    #[error(
        "accounts {ids} were kept in one PostgreSQL schema, {schema}, by an earlier fakecloud (PostgreSQL cuts a \
         name to 63 bytes), so their data is mixed and cannot be told apart: drop it (DROP SCHEMA \"{schema}\" \
         CASCADE; each of those accounts then starts empty) and start the emulator again"
    )]
    SharedSchema { schema: String, ids: String },
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
        // Under the accounts' lock: another replica's wipe drops and makes schemas, which an open beside it would
        // find half there.
        let changing = accounts.changing_at_start().await?;
        accounts.generation.store(rows::generation(&accounts.db).await?, Ordering::Release);
        if shared {
            accounts.adopt_legacy_schemas().await?;
        }
        for row in rows::list(&accounts.db).await? {
            // (Opened already by the lock's catching up, if another replica changed the accounts meanwhile.)
            if accounts.clouds.read().unwrap_or_else(|e| e.into_inner()).contains_key(&row.id) {
                continue;
            }
            match accounts.open_cloud(&row.id, row.tokens()).await {
                Ok(cloud) => _ = accounts.write().insert(row.id, Arc::new(cloud)),
                // The database full (other replicas hold its connections): this replica serves what it could
                // open, and opens the rest as calls come (its generation is none the database has).
                Err(e @ cloud::OpenError::Db(crate::db::OpenError::Unavailable { .. })) if accounts.shared => {
                    tracing::warn!(account = %row.id, error = %e, "cannot open the account now; trying again on a call");
                    accounts.generation.store(UNOPENED, Ordering::Release);
                }
                Err(cause) => return Err(OpenError::Cloud { id: row.id.clone(), cause }),
            }
        }
        drop(changing);
        let opened = accounts.read_len();
        if opened > 0 {
            tracing::info!(accounts = opened, stores = ?accounts.stores, "accounts opened");
        }
        Ok(Arc::new(accounts))
    }

    /// [`Self::changing`] for a replica starting beside others: their changes (a wipe opens a new schema) may hold
    /// the lock longer than a call waits for it, and a start can wait longer.
    async fn changing_at_start(&self) -> Result<Changing<'_>> {
        let started = std::time::Instant::now();
        loop {
            match self.changing().await {
                Err(e) if e.kind == Kind::Unavailable && started.elapsed() < START_WAIT => {
                    tracing::info!(error = %e, "waiting for the accounts' lock, which another replica holds");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                taken => return taken,
            }
        }
    }

    /// Rename the schemas of accounts whose IDs are longer than 55 characters from the name an earlier fakecloud
    /// gave them (cut by PostgreSQL: [`legacy_schema`]) to theirs ([`schema`]); refuse to start where two accounts
    /// shared one. Under the accounts' lock.
    async fn adopt_legacy_schemas(&self) -> Result<(), OpenError> {
        let rows = rows::list(&self.db).await?;
        for row in &rows {
            let (old, new) = (legacy_schema(&row.id), schema(&row.id));
            if old == new
                || crate::db::postgres::schema_exists(self.db.reader(), &new).await.map_err(ApiError::from)?
                || !crate::db::postgres::schema_exists(self.db.reader(), &old).await.map_err(ApiError::from)?
            {
                continue;
            }
            let sharing: Vec<&str> =
                rows.iter().filter(|r| legacy_schema(&r.id) == old).map(|r| r.id.as_str()).collect();
            if sharing.len() > 1 {
                return Err(OpenError::SharedSchema { schema: old, ids: sharing.join(", ") });
            }
            crate::db::postgres::rename_schema(self.db.writer(), &old, &new).await.map_err(ApiError::from)?;
            tracing::info!(account = %row.id, from = %old, to = %new, "account's schema renamed (issue #47)");
        }
        Ok(())
    }

    /// The router of the account whose token `authorization` (an `Authorization` header's value) carries, or
    /// whose AWS access key ID it names (a SigV4 header), if it is one of theirs.
    pub fn route(&self, authorization: Option<&str>) -> Option<Router> {
        let clouds = self.clouds.read().unwrap_or_else(|e| e.into_inner());
        clouds
            .values()
            .find(|c| {
                c.state.tokens.role_of(authorization).is_some() || crate::aws::names_cloud(authorization, &c.aws_key_id)
            })
            .map(|c| c.router.clone())
    }

    /// Several emulators on one PostgreSQL database hold the same accounts: one that creates, deletes or wipes
    /// an account bumps their generation in the database, and every other opens, closes or reopens its clouds
    /// to match before it routes its next call — so a new account's tokens work through every replica at once,
    /// and a deleted or wiped one's stop. One read per call, none on SQLite (one emulator per file). One call at
    /// a time catches up; without `wait`, a call that finds another doing it goes on with the accounts known
    /// ([`Synced::CatchingUp`]): the catching up may wait seconds for the accounts' lock, and a queue of calls
    /// each waiting its turn for it would wait that many times over.
    pub async fn sync(&self, wait: bool) -> Synced {
        if !self.shared {
            return Synced::Current;
        }
        match rows::generation(&self.db).await {
            Ok(g) if g == self.generation.load(Ordering::Acquire) => Synced::Current,
            Ok(_) if !wait && self.changes.try_lock().is_err() => Synced::CatchingUp,
            Ok(_) => match self.changing().await {
                Ok(_) => Synced::Current,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open the accounts another emulator changed; trying again");
                    Synced::Stale(e)
                }
            },
            Err(e) if e.kind == Kind::Unavailable => Synced::Unreachable(e),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the accounts' generation; routing by the accounts known");
                Synced::Stale(e)
            }
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
        Ok(Changing { _here: here, everywhere })
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
            let cloud = self.open_cloud(&row.id, row.tokens()).await.map_err(|e| open_failed(&row.id, e))?;
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
        let mut changing = self.changing().await?;
        if self.read_len() >= ACCOUNTS_MAX {
            return Err(ApiError::new(
                Kind::Exceeded,
                codes::ACCOUNT_LIMIT_EXCEEDED,
                format!("an emulator holds at most {ACCOUNTS_MAX} accounts besides its own; delete one first"),
            ));
        }
        if self.row(id).await.is_ok() {
            return Err(ApiError::conflict(codes::ACCOUNT_ALREADY_EXISTS, format!("account {id} exists")));
        }
        // A database left by an account of this name that was deleted while the emulator died is not this one's.
        self.remove_store(id).await?;
        let tokens = credentials::random_tokens();
        changing.still_held().await?;
        let created_at = rows::insert(&self.db, id, &tokens).await?;
        let cloud = match self.open_cloud(id, tokens.clone()).await {
            Ok(cloud) => cloud,
            Err(e) => {
                let _ = rows::delete(&self.db, id).await;
                return Err(open_failed(id, e));
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

    /// Delete the account: its tokens stop working here at once, its cloud is closed and its database removed,
    /// then its row: an emulator killed part way leaves the account listed, empty, never a database without it.
    pub async fn delete(&self, id: &str) -> Result<Account> {
        let mut changing = self.changing().await?;
        let account = self.get(id).await?;
        changing.still_held().await?;
        self.retire(id).await?;
        rows::delete(&self.db, id).await?;
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
        let mut changing = self.changing().await?;
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
        let tokens = match lapsed(&row, now) {
            true => self.wipe(&mut changing, &row.id, "its lease lapsed").await?,
            false => row.tokens(),
        };
        let expires_at = now + ttl;
        changing.still_held().await?;
        rows::lease(&self.db, &row.id, &req.holder, expires_at).await?;
        tracing::info!(account = %row.id, holder = %req.holder, expires_at = %rfc3339(expires_at), "account leased");
        let row = Row { lease_holder: Some(req.holder.clone()), lease_expires_at: Some(expires_at), ..row };
        Ok(LeasedAccount { account: account(&row), user_token: tokens.user, admin_token: tokens.admin })
    }

    /// Renew `id`'s lease, by its holder, for `req.ttl_seconds` from now.
    pub async fn renew(&self, id: &str, req: &RenewLeaseRequest) -> Result<Account> {
        let ttl = check_lease(&req.holder, req.ttl_seconds)?;
        let mut changing = self.changing().await?;
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
        changing.still_held().await?;
        rows::lease(&self.db, id, &req.holder, now + ttl).await?;
        Ok(account(&Row { lease_expires_at: Some(now + ttl), ..row }))
    }

    /// End `id`'s lease now: the account is wiped and free. Releasing a free account changes nothing.
    pub async fn release(&self, id: &str) -> Result<Account> {
        let mut changing = self.changing().await?;
        let row = self.row(id).await?;
        if row.lease_holder.is_some() {
            self.wipe(&mut changing, id, "its lease was released").await?;
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
        let mut changing = self.changing().await?;
        // Again under it: another emulator's janitor may have wiped them meanwhile.
        let now = now_ms();
        for row in rows::list(&self.db).await? {
            if lapsed(&row, now) {
                self.wipe(&mut changing, &row.id, "its lease lapsed").await?;
            }
        }
        Ok(())
    }

    /// Empty the account and give it new tokens: the old ones stop working here at once, its cloud is closed
    /// and its database removed, and only then are the new tokens stored (issue #47): an emulator killed part way
    /// leaves the account with its old tokens and lease (wiped again when the janitor or the next release comes),
    /// never new tokens on the old holder's data. Then a new database is opened.
    async fn wipe(&self, changing: &mut Changing<'_>, id: &str, why: &str) -> Result<Tokens> {
        let tokens = credentials::random_tokens();
        changing.still_held().await?;
        self.retire(id).await?;
        rows::wiped(&self.db, id, &tokens).await?;
        let cloud = self.open_cloud(id, tokens.clone()).await.map_err(|e| open_failed(id, e))?;
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
    /// database. Its database not removed (a lock held too long elsewhere), its cloud is opened again as it was.
    async fn retire(&self, id: &str) -> Result<()> {
        let cloud = self.write().remove(id);
        if let Some(cloud) = &cloud {
            cloud.close().await;
        }
        let removed = self.remove_store(id).await;
        if let (Err(_), Some(cloud)) = (&removed, cloud) {
            match self.open_cloud(id, cloud.state.tokens.clone()).await {
                Ok(cloud) => _ = self.write().insert(id.to_string(), Arc::new(cloud)),
                Err(e) => tracing::warn!(account = id, error = %e, "cannot open the account again"),
            }
        }
        removed
    }

    /// Remove the account's store: its files, or its schema and everything in it.
    async fn remove_store(&self, id: &str) -> Result<()> {
        match &self.stores {
            Stores::Files(dir) => {
                for suffix in ["db", "db-wal", "db-shm"] {
                    match std::fs::remove_file(dir.join(format!("{id}.{suffix}"))) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(ApiError::internal(format!("cannot remove account {id}'s database: {e}")));
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
            Stores::Memory => Ok(()),
            Stores::Schemas(_) => crate::db::postgres::drop_schema(self.db.writer(), &schema(id)).await.map_err(|e| {
                tracing::warn!(account = id, error = %e, "cannot drop the account's schema");
                ApiError::from(e)
            }),
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

/// Account `id`'s database could not be opened: 503 when the database cannot take it now (out of connections,
/// unreachable: docs/book/src/farm.md, "Connections on PostgreSQL"), else a 500.
fn open_failed(id: &str, e: cloud::OpenError) -> ApiError {
    match e {
        cloud::OpenError::Db(crate::db::OpenError::Unavailable { .. }) => {
            ApiError::new(Kind::Unavailable, codes::SERVICE_UNAVAILABLE, format!("cannot open account {id} now: {e}"))
                .with_retry_after()
        }
        cloud::OpenError::Prepare(e) if e.kind == Kind::Unavailable => e,
        e => ApiError::internal(format!("cannot open account {id}'s database: {e}")),
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(codes::ACCOUNT_NOT_FOUND, format!("account {id} does not exist"))
}

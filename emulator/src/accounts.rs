//! Accounts (issue #28): clouds of their own on one emulator, each reached with its own tokens, as several
//! clusters or CI jobs each get an account of a real cloud. An account is a whole [`Cloud`] — a database of its
//! own (a file beside the emulator's: `fakecloud.accounts/<id>.db` beside `fakecloud.db`), fault engine, rate limits, quotas and audit log —
//! so one account's calls cannot see or change another's, nor spend its budget: every token of an account draws
//! from the account's buckets. The emulator's own database keeps which accounts there are, and their tokens; a
//! call is routed to its account's cloud by its token ([`Accounts::route`]), and the emulator's own admin token
//! (the operator's) creates, lists and deletes them. An account's load balancers get addresses but no data plane:
//! only the emulator's own are served (`--serve-load-balancers`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use axum::Router;
use fakecloud_api::limits::ACCOUNTS_MAX;
use fakecloud_api::{Account, CreatedAccount, codes};
use futures::future::BoxFuture;

use crate::auth::Tokens;
use crate::cloud::{self, Cloud};
use crate::config::{Config, DbLocation};
use crate::db::{Db, rfc3339};
use crate::error::{ApiError, Kind, Result};
use crate::store::accounts as rows;
use crate::{credentials, validate};

/// The emulator's own account: the tokens `fakecloud serve` is given or generates.
pub const DEFAULT: &str = "default";

pub struct Accounts {
    /// The emulator's own database, where the accounts are listed.
    db: Db,
    /// Where the accounts' databases are: a directory beside the emulator's own file, or none (in memory).
    dir: Option<PathBuf>,
    /// An account's cloud: the emulator's configuration without the data plane.
    cfg: Config,
    clouds: RwLock<BTreeMap<String, Arc<Cloud>>>,
    /// Creates and deletes one at a time (each opens or removes a database).
    changes: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounts").field("dir", &self.dir).finish_non_exhaustive()
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
        let dir = match location {
            DbLocation::File(path) => Some(path.with_extension("accounts")),
            DbLocation::Memory => None,
        };
        let cfg = Config { serve_load_balancers: false, holds_public_pool: false, ..cfg.clone() };
        let accounts = Self { db, dir, cfg, clouds: RwLock::default(), changes: tokio::sync::Mutex::new(()) };
        for row in rows::list(&accounts.db).await? {
            let tokens = Tokens { user: row.user_token, admin: row.admin_token };
            let cloud = accounts
                .open_cloud(&row.id, tokens)
                .await
                .map_err(|cause| OpenError::Cloud { id: row.id.clone(), cause })?;
            accounts.write().insert(row.id, Arc::new(cloud));
        }
        let opened = accounts.read_len();
        if opened > 0 {
            tracing::info!(accounts = opened, dir = ?accounts.dir, "accounts opened");
        }
        Ok(Arc::new(accounts))
    }

    /// The router of the account whose token `authorization` (an `Authorization` header's value) carries, if
    /// it is one of theirs.
    pub fn route(&self, authorization: Option<&str>) -> Option<Router> {
        let clouds = self.clouds.read().unwrap_or_else(|e| e.into_inner());
        clouds.values().find(|c| c.state.tokens.role_of(authorization).is_some()).map(|c| c.router.clone())
    }

    pub async fn list(&self) -> Result<Vec<Account>> {
        Ok(rows::list(&self.db)
            .await?
            .into_iter()
            .map(|r| Account { id: r.id, created_at: rfc3339(r.created_at) })
            .collect())
    }

    pub async fn get(&self, id: &str) -> Result<Account> {
        self.list().await?.into_iter().find(|a| a.id == id).ok_or_else(|| not_found(id))
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
        let _one_at_a_time = self.changes.lock().await;
        if self.read_len() >= ACCOUNTS_MAX {
            return Err(ApiError::new(
                Kind::Exceeded,
                codes::ACCOUNT_LIMIT_EXCEEDED,
                format!("an emulator holds at most {ACCOUNTS_MAX} accounts besides its own; delete one first"),
            ));
        }
        let tokens = Tokens { user: credentials::random_token(), admin: credentials::random_token() };
        let created_at = rows::insert(&self.db, id, &tokens).await?;
        // A database left by an account of this name that was deleted while the emulator died is not this one's.
        self.remove_files(id);
        let cloud = match self.open_cloud(id, tokens.clone()).await {
            Ok(cloud) => cloud,
            Err(e) => {
                let _ = rows::delete(&self.db, id).await;
                return Err(ApiError::internal(format!("cannot open account {id}'s database: {e}")));
            }
        };
        self.write().insert(id.to_string(), Arc::new(cloud));
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
        let _one_at_a_time = self.changes.lock().await;
        let account = self.get(id).await?;
        let cloud = self.write().remove(id);
        if let Some(cloud) = cloud {
            cloud.close().await;
        }
        rows::delete(&self.db, id).await?;
        self.remove_files(id);
        tracing::info!(account = id, "account deleted");
        Ok(account)
    }

    /// Close every account's cloud (the emulator is stopping).
    pub async fn close(&self) {
        let clouds: Vec<Arc<Cloud>> = std::mem::take(&mut *self.write()).into_values().collect();
        for cloud in clouds {
            cloud.close().await;
        }
    }

    async fn open_cloud(&self, id: &str, tokens: Tokens) -> Result<Cloud, cloud::OpenError> {
        let location = match &self.dir {
            Some(dir) => {
                create_private_dir(dir).map_err(|cause| {
                    cloud::OpenError::Db(crate::db::OpenError::Create { path: dir.display().to_string(), cause })
                })?;
                DbLocation::File(dir.join(format!("{id}.db")))
            }
            None => DbLocation::Memory,
        };
        Cloud::open(&location, self.cfg.clone(), tokens, None).await
    }

    fn remove_files(&self, id: &str) {
        let Some(dir) = &self.dir else { return };
        for suffix in ["db", "db-wal", "db-shm"] {
            let _ = std::fs::remove_file(dir.join(format!("{id}.{suffix}")));
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
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(codes::ACCOUNT_NOT_FOUND, format!("account {id} does not exist"))
}

/// The accounts' directory, readable by its owner only, as the emulator's own database is.
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

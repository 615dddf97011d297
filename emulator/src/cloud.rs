//! One cloud: a database (schema applied, the main route table made), the APIs in front of it (native and AWS) and its lifecycle
//! ticker. The emulator serves one, its own, and one per account created on it (see [`crate::accounts`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use crate::auth::Tokens;
use crate::config::{Config, DbLocation};
use crate::db::Db;
use crate::error::ApiError;
use crate::http::{self, AppState, Registry};
use crate::store::{self, lifecycle};

pub struct Cloud {
    pub router: Router,
    pub state: AppState,
    /// The AWS access key ID of its user, derived once: the key a SigV4 call to it names, for routing.
    pub aws_key_id: String,
    ticker: tokio::task::JoinHandle<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Db(#[from] crate::db::OpenError),
    #[error("cannot prepare the database: {0}")]
    Prepare(#[from] ApiError),
}

/// Every operation name fault rules and rate limits may use, sorted: the native API's and the AWS face's.
pub fn operation_names() -> Vec<String> {
    http::with_faces(http::operation_names(), &crate::aws::operation_names())
}

impl Cloud {
    /// Open an account's database at `db` and the API on it. `accounts`: the registry its operator manages (the
    /// emulator's own cloud only).
    pub async fn open(
        db: &DbLocation,
        cfg: Config,
        tokens: Tokens,
        accounts: Option<Arc<dyn Registry>>,
    ) -> Result<Self, OpenError> {
        Self::on(Db::open_account(db).await?, cfg, tokens, accounts).await
    }

    /// The same on a database already open.
    pub async fn on(
        db: Db,
        cfg: Config,
        tokens: Tokens,
        accounts: Option<Arc<dyn Registry>>,
    ) -> Result<Self, OpenError> {
        let mut tx = db.write().await.map_err(ApiError::from)?;
        store::routes::ensure_main_table(&mut tx).await?;
        store::security_groups::ensure_default(&mut tx, &crate::aws::vpc_id(&cfg.topology)).await?;
        store::routes::canonicalize_destinations(&mut tx).await?;
        tx.commit().await.map_err(ApiError::from)?;
        let ticker = lifecycle::spawn_ticker(db.clone(), cfg.timings.terminated_retention, Duration::from_millis(250));
        let (native, state) = http::app(db, cfg, tokens, accounts, &crate::aws::operation_names()).await?;
        // The AWS face answers `/`; every other path is the native API's.
        let router = crate::aws::router(state.clone()).fallback_service(native);
        let aws_key_id = crate::aws::credentials::Keys::access_key_id_of(&state.tokens);
        Ok(Self { router, state, aws_key_id, ticker })
    }

    /// Stop its tasks and open calls (audit streams), write its audit log down and close its database.
    pub async fn close(&self) {
        let _ = self.state.stopping.send(true);
        self.ticker.abort();
        self.state.stop_background();
        self.state.audit.flush().await;
        self.state.db.close().await;
    }
}

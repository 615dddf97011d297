//! `/v1/audit/stream`: the audit log as a live tail (server-sent events), for the console.
//!
//! The stream polls the log by `seq` rather than being fed where entries are written: it only ever shows
//! entries that are in the database (so never a call whose entry a crash could still lose), and it needs no
//! hook in the write path. Each stream ends after `max_seconds` — or at once when the server shuts down or the
//! client goes away — and the client reconnects with `after`, losing nothing.

use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use fakecloud_api::limits::{
    AUDIT_LIMIT_MAX, AUDIT_STREAM_SECONDS_DEFAULT, AUDIT_STREAM_SECONDS_MAX, AUDIT_STREAM_SECONDS_MIN,
    AUDIT_STREAMS_PER_TOKEN,
};
use fakecloud_api::{AuditEntry, AuditStreamQuery, ErrorBody, codes};
use futures::StreamExt;
use tokio::time::Instant;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::ApiQuery;
use super::state::AppState;
use crate::db::Db;
use crate::db::audit::rows as audit;
use crate::error::{ApiError, Kind, Result};
use crate::validate;

/// How often an open stream looks for new entries.
const POLL: Duration = Duration::from_millis(250);
/// Entries a stream without `after` starts with.
const BACKLOG: i64 = 200;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stream_audit))
}

/// New audit entries as they are written, as server-sent events: one `audit` event per entry, its `id` the
/// entry's `seq` and its `data` the entry as JSON (`AuditEntry`). Calls made before this one are included.
#[utoipa::path(get, path = "/v1/audit/stream", operation_id = "StreamAudit", tag = "audit",
    params(AuditStreamQuery),
    responses(
        (status = 200, content_type = "text/event-stream", body = String,
            description = "`event: audit`, `id: <seq>`, `data: <AuditEntry as JSON>` per entry, and keep-alive comments"),
        (status = 400, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "TooManyStreams: the token has as many streams open as it may")),
    security(("admin" = [])))]
async fn stream_audit(State(st): State<AppState>, ApiQuery(q): ApiQuery<AuditStreamQuery>) -> Result<Response> {
    let seconds = validate::in_range(
        "max_seconds",
        q.max_seconds.unwrap_or(AUDIT_STREAM_SECONDS_DEFAULT),
        AUDIT_STREAM_SECONDS_MIN,
        AUDIT_STREAM_SECONDS_MAX,
    )?;
    let Ok(slot) = st.audit_streams.clone().try_acquire_owned() else {
        st.metrics.audit_streams_refused.inc();
        let mut e = ApiError::new(
            Kind::Throttled,
            codes::TOO_MANY_STREAMS,
            format!(
                "{AUDIT_STREAMS_PER_TOKEN} audit streams are open with this token, the most at once; close one or wait \
                 for one to end (each ends after its max_seconds), and read GET /v1/audit?after=<seq> meanwhile"
            ),
        );
        e.headers = vec![("Retry-After".into(), "5".into())];
        return Err(e);
    };
    st.audit.flush().await;
    let after = match q.after {
        Some(after) => after,
        None => (audit::newest_seq(st.db.reader()).await? - BACKLOG).max(0),
    };
    let tail = Tail {
        db: st.db.clone(),
        after,
        until: Instant::now() + Duration::from_secs(u64::from(seconds)),
        stopping: st.stopping.subscribe(),
        _slot: slot,
    };
    let events = futures::stream::unfold(tail, Tail::next_batch)
        .flat_map(futures::stream::iter)
        .map(|entry| Event::default().event("audit").id(entry.seq.to_string()).json_data(entry));
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// An open stream's place in the log.
struct Tail {
    db: Db,
    after: i64,
    until: Instant,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// One of the token's streams ([`AUDIT_STREAMS_PER_TOKEN`]), given back when the stream ends.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Tail {
    /// The next entries after `after`, once there are some; `None` ends the stream.
    async fn next_batch(mut self) -> Option<(Vec<AuditEntry>, Self)> {
        loop {
            let next = audit::Filter { after: self.after, limit: i64::from(AUDIT_LIMIT_MAX), ..Default::default() };
            match audit::query(self.db.reader(), &next).await {
                Ok(items) if !items.is_empty() => {
                    self.after = items.last().map_or(self.after, |e| e.seq);
                    return Some((items, self));
                }
                Ok(_) => {}
                // The database busy for a moment: the next poll tries again.
                Err(e) => tracing::warn!(error = %e, "cannot read the audit log for a stream"),
            }
            tokio::select! {
                _ = tokio::time::sleep_until(self.until.min(Instant::now() + POLL)) => {}
                _ = self.stopping.wait_for(|stop| *stop) => return None,
            }
            if Instant::now() >= self.until {
                return None;
            }
        }
    }
}

//! Hung machines (`/v1/hangs`): an instance that keeps running while its guest stops answering, so its kubelet
//! falls silent. Only the simulated kubelets act on it; the instance itself, and every API answer about it, stay
//! as they are. A hang lasts until it is stopped or the machine restarts (stop, start): a hang recorded before
//! the instance last turned `running` no longer counts.

use fakecloud_api::{Hang, InstanceState, StartHangRequest, codes};

use super::instances::{self, Selection, state_at};
use super::write::begin;
use crate::call;
use crate::config::Config;
use crate::db::{Db, now_ms, rfc3339};
use crate::error::{ApiError, Result};

/// The hangs in force at `$1`: of running instances, recorded since they last turned running.
const IN_FORCE: &str = concat!(
    "SELECT h.instance_id, i.name, h.since FROM hangs h JOIN instances i ON i.id = h.instance_id WHERE ",
    state_at!(),
    " = 'running' AND h.since >= (CASE WHEN i.next_state_at <= $1 THEN i.next_state_at ELSE i.state_changed_at END)"
);

fn hang((instance_id, name, since): (String, String, i64)) -> Hang {
    Hang { instance_id, name, since: rfc3339(since) }
}

/// Every check of a [`start`] that needs no instance: that it names some.
pub fn check(req: &StartHangRequest) -> Result<Selection<'_>> {
    let chosen = Selection { ids: &req.instance_ids, names: &req.names, tag: req.tag.as_deref() };
    chosen.check("machines to hang")?;
    Ok(chosen)
}

/// Hang the machines `req` names. Each must be running (a stopped machine has no guest to hang); one already
/// hung stays hung since its first hang.
pub async fn start(db: &Db, cfg: &Config, req: &StartHangRequest) -> Result<Vec<Hang>> {
    let chosen = check(req)?;
    let (mut tx, now) = begin(db).await?;
    let targets = instances::select(&mut tx, cfg, &chosen, concat!(state_at!(), " = 'running'"), now).await?;
    for inst in &targets {
        if inst.state != InstanceState::Running {
            return Err(ApiError::conflict(
                codes::INCORRECT_INSTANCE_STATE,
                format!(
                    "instance {} ({}) is {}; only a running machine can hang",
                    inst.id,
                    inst.name,
                    inst.state.as_str()
                ),
            ));
        }
        // A stale hang (from before a restart) is replaced; one in force keeps its time.
        sqlx::query(
            "INSERT INTO hangs (instance_id, since) VALUES ($1, $2) ON CONFLICT (instance_id) DO UPDATE SET since = $2 \
             WHERE hangs.since < (SELECT state_changed_at FROM instances WHERE id = $1)",
        )
        .bind(&inst.id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    let ids: Vec<&str> = targets.iter().map(|i| i.id.as_str()).collect();
    let hung = in_force(&mut *tx, now).await?.into_iter().filter(|h| ids.contains(&h.instance_id.as_str())).collect();
    call::commit(tx, "").await?;
    Ok(hung)
}

/// The hangs in force now.
pub async fn list(db: &Db) -> Result<Vec<Hang>> {
    in_force(db.reader(), now_ms()).await
}

async fn in_force<'e>(exec: impl sqlx::any::AnyExecutor<'e>, now: i64) -> Result<Vec<Hang>> {
    let q = format!("{IN_FORCE} ORDER BY h.since, h.instance_id");
    let rows: Vec<(String, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(q)).bind(now).fetch_all(exec).await?;
    Ok(rows.into_iter().map(hang).collect())
}

/// End the hang of `instance_id`: its kubelet reports again.
pub async fn stop(db: &Db, instance_id: &str) -> Result<Hang> {
    let (mut tx, now) = begin(db).await?;
    let q = format!("{IN_FORCE} AND h.instance_id = $2");
    let row: Option<(String, String, i64)> =
        sqlx::query_as(sqlx::AssertSqlSafe(q)).bind(now).bind(instance_id).fetch_optional(&mut *tx).await?;
    let Some(row) = row else {
        return Err(ApiError::not_found(codes::HANG_NOT_FOUND, format!("instance {instance_id} is not hung")));
    };
    sqlx::query("DELETE FROM hangs WHERE instance_id = $1").bind(instance_id).execute(&mut *tx).await?;
    call::commit(tx, instance_id).await?;
    Ok(hang(row))
}

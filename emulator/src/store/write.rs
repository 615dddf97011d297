//! Starting a write: the transaction a store function changes state in, with due timed transitions applied.

use super::lifecycle;
use crate::db::{Db, Ran, Script, Started, Tx};
use crate::error::Result;

/// Begin a write transaction with every due timed transition already applied, so the writer sees the state
/// that readers are shown. Whether any is due is asked with the write's start, in one round trip.
pub async fn begin(db: &Db) -> Result<(Tx, i64)> {
    let (tx, now, _, ()) = begin_with(db, |_, _| ()).await?;
    Ok((tx, now))
}

/// [`begin`], running the statements `call` pushes (given the time the write started) in the same round trip:
/// a write's checks, and its changes too (its savepoint undoes them if a check then refuses). They see every
/// due transition applied: if one was due, they are undone and run again after it.
pub async fn begin_with<R>(db: &Db, call: impl Fn(i64, &mut Script) -> R) -> Result<(Tx, i64, Ran, R)> {
    let Started { mut tx, now, due, ran, steps } = db.write_with(lifecycle::ANY_DUE, &call).await?;
    if !due {
        return Ok((tx, now, ran, steps));
    }
    tx.undo().await?;
    lifecycle::apply_due(&mut tx, now).await?;
    let mut script = Script::new();
    let steps = call(now, &mut script);
    let ran = tx.run(script).await;
    Ok((tx, now, ran, steps))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use sqlx::Row;

    use super::*;
    use crate::config::DbLocation;

    /// A write that starts while a timed transition is due sees it applied: its statements ran before the
    /// transition was written, so they are undone and run again after it (once in effect: a second insert of
    /// the same key would fail).
    #[tokio::test]
    async fn a_write_that_finds_a_transition_due_runs_its_statements_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&DbLocation::File(dir.path().join("fc.db"))).await.unwrap();
        let mut tx = db.write().await.unwrap();
        sqlx::query(
            "INSERT INTO instances (id, name, zone, instance_type, market, state, next_state, next_state_at, private_ip, tags, created_at, state_changed_at) \
             VALUES ('i-1', 'a', 'local-1a', 'fc.small', 'on-demand', 'pending', 'running', 1, '10.0.0.1', '{}', 0, 0)",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();

        let (tx, _, ran, (insert, read)) = begin_with(&db, |_, s| {
            let insert = s.push("INSERT INTO quotas (name, limit_value) VALUES ('x', 1)", |_| {});
            let read = s.push("SELECT state, next_state FROM instances WHERE id = $1", |b| {
                b.bind("i-1");
            });
            (insert, read)
        })
        .await
        .unwrap();
        assert_eq!(ran.affected(insert).unwrap(), 1);
        let row = &ran.rows(read).unwrap()[0];
        assert_eq!(row.get::<String, _>(0), "running", "the statements see the boot written down");
        assert_eq!(row.get::<Option<String>, _>(1), None);
        tx.commit().await.unwrap();
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM quotas WHERE name = 'x'").fetch_one(db.reader()).await.unwrap();
        assert_eq!(n, 1);
    }
}

//! Statement lists: several statements sent to SQLite in one round trip.
//!
//! Every round trip to SQLite is a hand-off to sqlx's SQLite thread and back, and on the writer it is taken
//! while every other write waits: on 2 cores each costs ~75 µs of that wait, far more than SQLite's own work
//! (BENCHMARKS.md, issue #15). So a write sends its checks and its changes together, as one list, and judges
//! the checks' rows afterwards: the call's savepoint undoes the changes if a check refuses.
//!
//! Each statement is written with its own `?1`…`?n`, as it would be alone. Pushing it writes each `?N` as a bare
//! `?` and adds the N-th value at that place: sqlx's SQLite driver binds a list's bare `?`s to its arguments
//! strictly in order, statement after statement. (Numbered parameters do not compose: SQLite counts a statement's
//! parameters up to its highest number, and sqlx stops binding a statement whose unnumbered places below its
//! first `?N` run past the arguments, leaving the rest NULL.) The list stops at the first statement that fails, as SQLite leaves it: that statement undone, the ones
//! before it done. (Several statements in one query are a behaviour of sqlx's SQLite driver that upstream calls
//! deprecated, launchbadge/sqlx#3108; the tests would fail on an upgrade that drops it.)

use futures::TryStreamExt;
use sqlx::sqlite::{SqliteArguments, SqliteConnection, SqliteRow};
use sqlx::{Arguments, Either, Executor};

/// Statements to run in one round trip, and their arguments.
#[derive(Debug, Default)]
pub struct Script {
    sql: String,
    args: SqliteArguments,
    statements: usize,
}

/// A statement's place in its [`Script`], to find its result in the [`Ran`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step(usize);

/// The values of one statement's `?1`…`?n`, in order.
#[derive(Default)]
pub struct Binds {
    values: Vec<Value>,
}

/// A value bound to a statement: what this crate's statements take.
#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(v.to_string())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::Null, Into::into)
    }
}

impl Binds {
    /// The next parameter's value (`?1`, then `?2`, …).
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        self
    }
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one statement, written with its own `?1`…`?n`; `bind` gives the values of `?1`…`?n` in order.
    pub fn push(&mut self, sql: &str, bind: impl FnOnce(&mut Binds)) -> Step {
        let mut binds = Binds::default();
        bind(&mut binds);
        let values = binds.values;
        let mut rest = sql;
        while let Some(at) = rest.find('?') {
            self.sql.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            if digits == 0 {
                // A `?` in a string: this crate numbers every parameter.
                continue;
            }
            // (Every parameter of this crate's statements is numbered, and none is past its values: a statement
            // bound short is a bug that every test running it catches, as a NULL its constraints refuse.)
            let value = rest[..digits].parse::<usize>().ok().and_then(|n| values.get(n.checked_sub(1)?));
            debug_assert!(value.is_some(), "parameter ?{} of {sql} has no value", &rest[..digits]);
            let added = match value.cloned().unwrap_or(Value::Null) {
                Value::Null => self.args.add(None::<i64>),
                Value::Int(v) => self.args.add(v),
                Value::Text(v) => self.args.add(v),
            };
            // Adding an owned integer or string to SQLite's arguments does not fail.
            debug_assert!(added.is_ok());
            rest = &rest[digits..];
        }
        self.sql.push_str(rest);
        self.sql.push_str(";\n");
        self.statements += 1;
        Step(self.statements - 1)
    }

    /// How many statements it holds.
    pub fn len(&self) -> usize {
        self.statements
    }

    pub fn is_empty(&self) -> bool {
        self.statements == 0
    }

    /// Run every statement in order, in one round trip; stops at the first that fails.
    pub async fn run(self, conn: &mut SqliteConnection) -> Ran {
        let mut ran = Ran { done: Vec::with_capacity(self.statements), rows: Vec::new(), failed: None };
        if self.statements == 0 {
            return ran;
        }
        // (Prepared once per distinct list and cached by sqlx, like any query.)
        let query = sqlx::query_with(sqlx::AssertSqlSafe(self.sql), self.args);
        let mut results = conn.fetch_many(query);
        loop {
            match results.try_next().await {
                Ok(Some(Either::Right(row))) => ran.rows.push(row),
                Ok(Some(Either::Left(result))) => {
                    let rows = std::mem::take(&mut ran.rows);
                    ran.done.push(Done { rows, affected: result.rows_affected() });
                }
                Ok(None) => break,
                Err(e) => {
                    ran.failed = Some(e);
                    break;
                }
            }
        }
        ran
    }
}

/// What a [`Script`] did: each statement that ran to its end, then the error that stopped the list, if one did.
#[derive(Debug, Default)]
pub struct Ran {
    done: Vec<Done>,
    /// Rows of the statement running when the list stopped.
    rows: Vec<SqliteRow>,
    failed: Option<sqlx::Error>,
}

#[derive(Debug)]
struct Done {
    rows: Vec<SqliteRow>,
    affected: u64,
}

/// Why a statement has no result.
#[derive(Debug)]
pub enum NotDone<'r> {
    /// It failed: its own changes were undone, and the statements after it did not run.
    Failed(&'r sqlx::Error),
    /// A statement before it failed.
    Skipped,
}

impl Ran {
    /// The rows a statement returned.
    pub fn rows(&self, step: Step) -> Result<&[SqliteRow], NotDone<'_>> {
        self.done(step).map(|d| d.rows.as_slice())
    }

    /// How many rows a statement changed.
    pub fn affected(&self, step: Step) -> Result<u64, NotDone<'_>> {
        self.done(step).map(|d| d.affected)
    }

    fn done(&self, step: Step) -> Result<&Done, NotDone<'_>> {
        match (self.done.get(step.0), &self.failed) {
            (Some(done), _) => Ok(done),
            (None, Some(e)) if step.0 == self.done.len() => Err(NotDone::Failed(e)),
            _ => Err(NotDone::Skipped),
        }
    }

    /// The error that stopped the list, taken, if it was one of its first `n` statements.
    pub(crate) fn take_failure_before(&mut self, n: usize) -> Option<sqlx::Error> {
        if self.done.len() < n { self.failed.take() } else { None }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use sqlx::{Connection, Row};

    use super::*;

    /// A statement's `?N`s become bare `?`s with their values in place, so no statement's numbers depend on
    /// another's; a value used twice is bound twice.
    #[test]
    fn parameters_become_places_in_order() {
        let mut s = Script::new();
        s.push("SELECT ?1", |b| {
            b.bind(7);
        });
        s.push("SELECT ?2, ?1, ?2 WHERE x = '?'", |b| {
            b.bind("a").bind(None::<i64>);
        });
        assert_eq!(s.sql, "SELECT ?;\nSELECT ?, ?, ? WHERE x = '?';\n");
        assert_eq!(s.args.len(), 4);
    }

    /// Each statement binds its own `?1`…, results come back per statement, and the list stops at the first
    /// failure with that statement undone and the ones before it done.
    #[tokio::test]
    async fn a_list_runs_in_order_and_stops_at_its_first_failure() {
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::raw_sql("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)").execute(&mut conn).await.unwrap();
        let mut s = Script::new();
        let insert = "INSERT INTO t (k, v) VALUES (?1, ?2)";
        let a = s.push(insert, |b| {
            b.bind("a").bind(1);
        });
        let read = s.push("SELECT k, v FROM t WHERE v >= ?1 ORDER BY k", |b| {
            b.bind(1);
        });
        let dup = s.push(insert, |b| {
            b.bind("a").bind(2);
        });
        let after = s.push(insert, |b| {
            b.bind("c").bind(3);
        });
        let ran = s.run(&mut conn).await;

        assert_eq!(ran.affected(a).unwrap(), 1);
        let rows = ran.rows(read).unwrap();
        assert_eq!((rows.len(), rows[0].get::<String, _>(0), rows[0].get::<i64, _>(1)), (1, "a".into(), 1));
        assert!(matches!(ran.rows(dup), Err(NotDone::Failed(_))), "the duplicate key fails");
        assert!(matches!(ran.rows(after), Err(NotDone::Skipped)), "and nothing after it runs");
        let kept: Vec<(String, i64)> = sqlx::query_as("SELECT k, v FROM t").fetch_all(&mut conn).await.unwrap();
        assert_eq!(kept, [("a".to_string(), 1)]);
    }

    /// Every value of a statement late in a long list reaches it (numbered parameters composed by offset lost
    /// the last statement's: see the module's note).
    #[tokio::test]
    async fn a_late_statement_gets_every_value() {
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        let mut s = Script::new();
        for n in 0..5_i64 {
            s.push("SELECT ?1 + ?2 + ?3 + ?4 + ?5", |b| {
                b.bind(n).bind(1).bind(2).bind(3).bind(4);
            });
        }
        let last = s.push("SELECT ?1, ?2, ?3, ?4, ?5, ?1", |b| {
            b.bind("a").bind("b").bind(3).bind("d").bind(None::<String>);
        });
        let ran = s.run(&mut conn).await;
        let row = &ran.rows(last).unwrap()[0];
        let got: (String, String, i64, String, Option<String>, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
        assert_eq!(got, ("a".into(), "b".into(), 3, "d".into(), None, "a".into()));
    }
}

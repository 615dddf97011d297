//! Statement lists: several statements sent to the database together.
//!
//! Every round trip to SQLite is a hand-off to sqlx's SQLite thread and back, and on the writer it is taken
//! while every other write waits: on 2 cores each costs ~75 µs of that wait, far more than SQLite's own work
//! (BENCHMARKS.md, issue #15). So a write sends its checks and its changes together, as one list, and judges
//! the checks' rows afterwards: the call's savepoint undoes the changes if a check refuses.
//!
//! Each statement is written with its own `$1`…`$n`, as it would be alone. On SQLite the list is one query:
//! each `$N` is written as a bare `?` with the N-th value added at that place, as sqlx's SQLite driver binds a
//! list's bare `?`s to its arguments strictly in order, statement after statement. (Numbered parameters do not
//! compose: SQLite counts a statement's parameters up to its highest number, and sqlx stops binding a statement
//! whose unnumbered places below its first `$N` run past the arguments, leaving the rest NULL.) PostgreSQL
//! takes one statement with parameters per query, and a round trip to it costs far more than its work on a
//! create's small statements (BENCHMARKS.md, issue #47), so there the list is one *simple* query too: each
//! statement is `PREPARE`d once per session (PostgreSQL's own plan cache, as sqlx's extended queries use it) and
//! run as `EXECUTE name(values)`, its values written in as literals quoted as PostgreSQL's escape strings are
//! (`E'…'`: the same whatever `standard_conforming_strings` says), as psycopg writes every query. PostgreSQL
//! abandons the rest of a transaction after a statement that fails, until a rollback; SQLite undoes only the
//! failed statement, and the store relies on that (a write goes on after an address it tried was taken, or
//! names the holder of a name in use): so on PostgreSQL each statement runs in a savepoint of its own, opened
//! and released in the same query, and one that fails is rolled back to it. A value the text of a query
//! cannot hold (a NUL) sends the list one statement after another with bound parameters, for PostgreSQL to
//! refuse as it does any NUL. The list stops at the first statement that fails: that statement undone, the
//! ones before it done. (Several statements in one query are a behaviour of sqlx's SQLite driver that upstream
//! calls deprecated, launchbadge/sqlx#3108; the tests would fail on an upgrade that drops it.)

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use futures::TryStreamExt;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::{AnyConnection, Arguments, Either, Executor};

use super::backend::Backend;

/// Statements to run in one round trip, and their arguments.
#[derive(Debug, Default)]
pub struct Script {
    statements: Vec<Statement>,
}

#[derive(Debug)]
struct Statement {
    sql: String,
    values: Vec<Value>,
    /// Begins or ends a transaction's savepoint: on PostgreSQL it is not put in a savepoint of its own.
    control: bool,
}

/// A statement's place in its [`Script`], to find its result in the [`Ran`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step(usize);

/// The statements `PREPARE`d on the writer's PostgreSQL session, by their text and their parameters' types.
/// Names are never reused, so a `PREPARE` whose answer was lost (a dropped call) cannot collide with a later one.
#[derive(Debug, Default)]
pub struct Prepared {
    names: HashMap<String, u64>,
    next: u64,
}

impl Prepared {
    /// The most statements a session keeps prepared (each holds a plan in the server's memory); past it, the
    /// rest are written in whole, planned on every run. This crate's writes have a few dozen.
    const MAX: usize = 1_000;

    /// The name `statement` (known by `key`) runs by, and whether it is prepared already; a new name if it is
    /// not and there is room beside `preparing` more; `None` if it is to be written in whole.
    fn name(&mut self, statement: &Statement, key: &str, preparing: usize) -> Option<(u64, bool)> {
        if let Some(name) = self.names.get(key) {
            return Some((*name, true));
        }
        if !statement.preparable() || self.names.len() + preparing >= Self::MAX {
            return None;
        }
        self.next += 1;
        Some((self.next - 1, false))
    }

    /// The session is new (its connection was replaced): nothing is prepared on it.
    pub fn forget(&mut self) {
        self.names.clear();
    }
}

/// The prepared statements of the session a list runs on, shared by the writer's batches (one at a time holds
/// the session).
pub type Session = Mutex<Prepared>;

/// The values of one statement's `$1`…`$n`, in order.
#[derive(Default)]
pub struct Binds {
    values: Vec<Value>,
}

/// A value bound to a statement: what this crate's statements take. A NULL has a type: PostgreSQL takes a
/// parameter's type as given, and refuses a text NULL for an integer column.
#[derive(Debug, Clone)]
pub enum Value {
    NullInt,
    NullText,
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

impl From<Option<i64>> for Value {
    fn from(v: Option<i64>) -> Self {
        v.map_or(Self::NullInt, Into::into)
    }
}

impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Self {
        v.map_or(Self::NullText, Into::into)
    }
}

impl From<Option<&str>> for Value {
    fn from(v: Option<&str>) -> Self {
        v.map_or(Self::NullText, Into::into)
    }
}

impl Value {
    /// The PostgreSQL type sqlx binds it as.
    fn sql_type(&self) -> &'static str {
        match self {
            Self::NullInt | Self::Int(_) => "int8",
            Self::NullText | Self::Text(_) => "text",
        }
    }
}

impl Binds {
    /// The next parameter's value (`$1`, then `$2`, …).
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        self
    }
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one statement, written with its own `$1`…`$n`; `bind` gives the values of `$1`…`$n` in order.
    pub fn push(&mut self, sql: &str, bind: impl FnOnce(&mut Binds)) -> Step {
        let mut binds = Binds::default();
        bind(&mut binds);
        self.statements.push(Statement { sql: sql.to_string(), values: binds.values, control: false });
        Step(self.statements.len() - 1)
    }

    /// Add a statement that begins or ends a savepoint of the transaction (it has no parameters).
    pub fn push_control(&mut self, sql: &'static str) -> Step {
        self.statements.push(Statement { sql: sql.to_string(), values: Vec::new(), control: true });
        Step(self.statements.len() - 1)
    }

    /// How many statements it holds.
    pub fn len(&self) -> usize {
        self.statements.len()
    }

    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }

    /// The list as one SQLite query: every `$N` a bare `?`, its value added in that place.
    fn one_query(&self) -> (String, AnyArguments) {
        let mut sql = String::new();
        let mut args = AnyArguments::default();
        for statement in &self.statements {
            statement.write(&mut sql, |sql, value| {
                sql.push('?');
                add(&mut args, value);
            });
            sql.push_str(";\n");
        }
        (sql, args)
    }

    /// The list as one PostgreSQL simple query: each statement `EXECUTE`d with its values as literals
    /// (`PREPARE`d first if `prepared` does not have it), or written in whole (without `prepared`, past
    /// [`Prepared::MAX`], or if `PREPARE` does not take it); each but the control ones between
    /// `SAVEPOINT statement` and `RELEASE statement`. `None` if a value holds a NUL.
    fn inlined(&self, mut prepared: Option<&mut Prepared>) -> Option<Inlined> {
        let mut sql = String::new();
        let mut parts = Vec::with_capacity(self.statements.len() * 3);
        let mut preparing = Vec::new();
        for statement in &self.statements {
            if statement.values.iter().any(|v| matches!(v, Value::Text(t) if t.contains('\0'))) {
                return None;
            }
            if statement.control {
                sql.push_str(&statement.sql);
                sql.push_str(";\n");
                parts.push(Part::Control);
                continue;
            }
            sql.push_str("SAVEPOINT statement;\n");
            parts.push(Part::Open);
            let key = statement.key();
            match prepared.as_deref_mut().and_then(|p| p.name(statement, &key, preparing.len())) {
                Some((name, known)) => {
                    if !known {
                        let types: Vec<&str> = statement.values.iter().map(Value::sql_type).collect();
                        let types = if types.is_empty() { String::new() } else { format!(" ({})", types.join(", ")) };
                        sql.push_str(&format!("PREPARE fc_{name}{types} AS {};\n", statement.sql));
                        parts.push(Part::Prepare(preparing.len()));
                        preparing.push((key, name));
                    }
                    sql.push_str(&format!("EXECUTE fc_{name}"));
                    for (i, value) in statement.values.iter().enumerate() {
                        sql.push_str(if i == 0 { "(" } else { ", " });
                        literal(&mut sql, value);
                    }
                    if !statement.values.is_empty() {
                        sql.push(')');
                    }
                }
                None => statement.write(&mut sql, literal),
            }
            sql.push_str(";\nRELEASE statement;\n");
            parts.extend([Part::Own, Part::Release]);
        }
        Some(Inlined { sql, parts, preparing })
    }

    /// Run every statement in order on `conn` (a call's transaction: `Tx::run`), whose prepared statements
    /// `session` knows (PostgreSQL; without it, each statement is written in whole); stops at the first that
    /// fails.
    pub(crate) async fn run_on(self, conn: &mut AnyConnection, session: Option<&Session>) -> Ran {
        let mut ran = Ran { done: Vec::with_capacity(self.statements.len()), rows: Vec::new(), failed: None };
        if self.statements.is_empty() {
            return ran;
        }
        if Backend::of(conn) == Backend::Sqlite {
            // (Prepared once per distinct list and cached by sqlx, like any query.)
            let (sql, args) = self.one_query();
            ran.fetch(conn, sqlx::query_with(sqlx::AssertSqlSafe(sql), args)).await;
        } else if let Some(Inlined { sql, parts, preparing }) = {
            let mut prepared = session.map(|s| s.lock().unwrap_or_else(PoisonError::into_inner));
            self.inlined(prepared.as_deref_mut())
        } {
            let done = ran.fetch_inlined(conn, sql, &parts).await;
            if let Some(session) = session {
                let mut prepared = session.lock().unwrap_or_else(PoisonError::into_inner);
                prepared.names.extend(done.into_iter().filter_map(|i| preparing.get(i).cloned()));
            }
        } else {
            for Statement { sql, values, control } in self.statements {
                let mut args = AnyArguments::default();
                for value in &values {
                    add(&mut args, value);
                }
                let query = sqlx::query_with(sqlx::AssertSqlSafe(sql), args);
                let done = if control { ran.fetch(conn, query).await } else { ran.fetch_alone(conn, query).await };
                if !done {
                    break;
                }
            }
        }
        ran
    }
}

impl Statement {
    /// What a prepared statement is known by: its parameters' types and its text.
    fn key(&self) -> String {
        let mut key: String = self.values.iter().map(|v| if v.sql_type() == "int8" { 'i' } else { 't' }).collect();
        key.push(':');
        key.push_str(&self.sql);
        key
    }

    /// Whether `PREPARE` takes it (a query or a change of rows).
    fn preparable(&self) -> bool {
        let verb = self.sql.split_whitespace().next().unwrap_or_default();
        ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "VALUES"].iter().any(|v| verb.eq_ignore_ascii_case(v))
    }

    /// Write the statement into `sql`, each `$N` written by `place` given its value.
    fn write(&self, sql: &mut String, mut place: impl FnMut(&mut String, &Value)) {
        let mut rest = self.sql.as_str();
        while let Some(at) = rest.find('$') {
            sql.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            if digits == 0 {
                // A `$` in a string (a JSON path): this crate numbers every parameter.
                sql.push('$');
                continue;
            }
            // (Every parameter of this crate's statements is numbered, and none is past its values: a statement
            // bound short is a bug that every test running it catches, as a NULL its constraints refuse.)
            let value = rest[..digits].parse::<usize>().ok().and_then(|n| self.values.get(n.checked_sub(1)?));
            debug_assert!(value.is_some(), "parameter ${} of {} has no value", &rest[..digits], self.sql);
            place(sql, value.unwrap_or(&Value::NullText));
            rest = &rest[digits..];
        }
        sql.push_str(rest);
    }
}

/// Undo a failed statement on PostgreSQL: back to the savepoint opened before it, then that savepoint gone.
const UNDO_STATEMENT: &str = "ROLLBACK TO statement; RELEASE statement";

/// A list as one PostgreSQL simple query ([`Script::inlined`]).
#[derive(Debug)]
struct Inlined {
    sql: String,
    /// What each result the query returns belongs to.
    parts: Vec<Part>,
    /// The statements it prepares, by their key and name.
    preparing: Vec<(String, u64)>,
}

/// What one result of an inlined list ([`Script::inlined`]) belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The savepoint opened before a statement.
    Open,
    /// A statement prepared before it runs: the `n`th the list prepares.
    Prepare(usize),
    /// A statement of the list, in a savepoint.
    Own,
    /// A control statement of the list, in none.
    Control,
    /// The statement's savepoint released.
    Release,
}

/// `value` as a PostgreSQL literal of the type sqlx binds it as (`int8`, `text`), so every statement reads it
/// as it would its bound parameter. A string is an escape string: its quotes and backslashes doubled, it means
/// the same under any `standard_conforming_strings`.
fn literal(sql: &mut String, value: &Value) {
    use std::fmt::Write;
    match value {
        Value::NullInt => sql.push_str("NULL::int8"),
        Value::NullText => sql.push_str("NULL::text"),
        Value::Int(v) => {
            // (Writing to a String does not fail.)
            let _ = write!(sql, "'{v}'::int8");
        }
        Value::Text(v) => {
            sql.push_str("E'");
            for c in v.chars() {
                match c {
                    '\'' => sql.push_str("''"),
                    '\\' => sql.push_str("\\\\"),
                    c => sql.push(c),
                }
            }
            sql.push_str("'::text");
        }
    }
}

fn add(args: &mut AnyArguments, value: &Value) {
    let added = match value {
        Value::NullInt => args.add(None::<i64>),
        Value::NullText => args.add(None::<String>),
        Value::Int(v) => args.add(*v),
        Value::Text(v) => args.add(v.clone()),
    };
    // Adding an owned integer or string to the arguments does not fail.
    debug_assert!(added.is_ok());
}

/// What a [`Script`] did: each statement that ran to its end, then the error that stopped the list, if one did.
#[derive(Default)]
pub struct Ran {
    done: Vec<Done>,
    /// Rows of the statement running when the list stopped.
    rows: Vec<AnyRow>,
    failed: Option<sqlx::Error>,
}

struct Done {
    rows: Vec<AnyRow>,
    affected: u64,
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ran").field("done", &self.done.len()).field("failed", &self.failed).finish_non_exhaustive()
    }
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
    /// Run `query` (one statement or several), adding what each statement did; false if one failed.
    async fn fetch<'q>(
        &mut self,
        conn: &mut AnyConnection,
        query: sqlx::query::Query<'q, sqlx::Any, AnyArguments>,
    ) -> bool {
        let mut results = conn.fetch_many(query);
        loop {
            match results.try_next().await {
                Ok(Some(Either::Right(row))) => self.rows.push(row),
                Ok(Some(Either::Left(result))) => {
                    let rows = std::mem::take(&mut self.rows);
                    self.done.push(Done { rows, affected: result.rows_affected() });
                }
                Ok(None) => return true,
                Err(e) => {
                    self.failed = Some(e);
                    return false;
                }
            }
        }
    }

    /// Run an inlined list ([`Script::inlined`]): keep each statement's result, drop its savepoint's. A statement
    /// that fails is rolled back to its savepoint, so the transaction goes on with the ones before it done.
    /// Returns which of the list's `PREPARE`s were done (a prepared statement outlives a rollback).
    async fn fetch_inlined(&mut self, conn: &mut AnyConnection, sql: String, parts: &[Part]) -> Vec<usize> {
        let mut prepared = Vec::new();
        let mut parts = parts.iter();
        let mut results = conn.fetch_many(sqlx::raw_sql(sqlx::AssertSqlSafe(sql)));
        let failed = loop {
            match results.try_next().await {
                Ok(Some(Either::Right(row))) => self.rows.push(row),
                Ok(Some(Either::Left(result))) => match parts.next() {
                    Some(Part::Own | Part::Control) => {
                        let rows = std::mem::take(&mut self.rows);
                        self.done.push(Done { rows, affected: result.rows_affected() });
                    }
                    Some(Part::Prepare(n)) => prepared.push(*n),
                    Some(Part::Open | Part::Release) | None => {}
                },
                Ok(None) => return prepared,
                Err(e) => {
                    self.failed = Some(e);
                    break parts.next();
                }
            }
        };
        drop(results);
        // A statement of the list that failed, or could not be prepared, is undone alone, in its savepoint; a
        // savepoint that could not be opened or released, or a control statement, leaves the transaction broken,
        // for the call's own savepoint to undo.
        if matches!(failed, Some(Part::Own | Part::Prepare(_)))
            && let Err(e) = sqlx::raw_sql(UNDO_STATEMENT).execute(&mut *conn).await
        {
            tracing::warn!(error = %e, "cannot roll back to a failed statement's savepoint");
        }
        prepared
    }

    /// [`Ran::fetch`] in a savepoint of its own. PostgreSQL refuses every statement of a transaction after one
    /// that failed, until a rollback; SQLite undoes only the failed statement, and the store relies on that (a
    /// write goes on after an address it tried was taken, or names the holder of a name in use).
    async fn fetch_alone<'q>(
        &mut self,
        conn: &mut AnyConnection,
        query: sqlx::query::Query<'q, sqlx::Any, AnyArguments>,
    ) -> bool {
        if let Err(e) = conn.execute("SAVEPOINT statement").await {
            self.failed = Some(e);
            return false;
        }
        let done = self.fetch(conn, query).await;
        let end = if done { "RELEASE statement" } else { UNDO_STATEMENT };
        if let Err(e) = sqlx::raw_sql(end).execute(&mut *conn).await {
            // The statement's own error, if it failed, is the one to report; the transaction is broken either way
            // and the call's savepoint undoes it.
            self.failed.get_or_insert(e);
            return false;
        }
        done
    }

    /// The rows a statement returned.
    pub fn rows(&self, step: Step) -> Result<&[AnyRow], NotDone<'_>> {
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

    /// On SQLite a statement's `$N`s become bare `?`s with their values in place, so no statement's numbers
    /// depend on another's; a value used twice is bound twice; a `$` that is no parameter stays.
    #[test]
    fn parameters_become_places_in_order() {
        let mut s = Script::new();
        s.push("SELECT $1", |b| {
            b.bind(7);
        });
        s.push("SELECT $2, $1, $2 WHERE x = '$.a'", |b| {
            b.bind("a").bind(None::<i64>);
        });
        let (sql, args) = s.one_query();
        assert_eq!(sql, "SELECT ?;\nSELECT ?, ?, ? WHERE x = '$.a';\n");
        assert_eq!(args.len(), 4);
    }

    /// A value is written in as a literal of the type sqlx binds it as; a string's quotes and backslashes are
    /// doubled inside an escape string, so nothing in it ends the literal.
    #[test]
    fn values_are_written_in_as_typed_literals() {
        let mut sql = String::new();
        for value in [Value::Int(-7), Value::NullInt, Value::NullText, Value::Text("it's \\'; --".into())] {
            literal(&mut sql, &value);
            sql.push(' ');
        }
        assert_eq!(sql, "'-7'::int8 NULL::int8 NULL::text E'it''s \\\\''; --'::text ");
    }

    /// On PostgreSQL a statement is prepared the first time a session runs it and executed by name after that;
    /// each but a control statement sits in a savepoint of its own; a NUL, which a query's text cannot hold,
    /// sends the list another way.
    #[test]
    fn a_statement_is_prepared_once_per_session_and_executed_by_name() {
        let mut s = Script::new();
        s.push_control("SAVEPOINT call");
        s.push("SELECT $1, $2", |b| {
            b.bind(1).bind("a");
        });
        s.push("SELECT 1", |_| {});
        let mut prepared = Prepared::default();
        let Inlined { sql, parts, preparing } = s.inlined(Some(&mut prepared)).unwrap();
        assert_eq!(
            sql,
            "SAVEPOINT call;\nSAVEPOINT statement;\nPREPARE fc_0 (int8, text) AS SELECT $1, $2;\n\
             EXECUTE fc_0('1'::int8, E'a'::text);\nRELEASE statement;\nSAVEPOINT statement;\n\
             PREPARE fc_1 AS SELECT 1;\nEXECUTE fc_1;\nRELEASE statement;\n"
        );
        assert_eq!(parts.iter().filter(|p| matches!(p, Part::Own | Part::Control)).count(), 3, "{parts:?}");
        prepared.names.extend(preparing);
        let Inlined { sql: again, preparing, .. } = s.inlined(Some(&mut prepared)).unwrap();
        assert!(preparing.is_empty() && !again.contains("PREPARE") && again.contains("EXECUTE fc_0("), "{again}");
        let whole = s.inlined(None).unwrap().sql;
        assert!(whole.contains("SELECT '1'::int8, E'a'::text;") && !whole.contains("EXECUTE"), "{whole}");

        let mut nul = Script::new();
        nul.push("SELECT $1", |b| {
            b.bind("a\0b");
        });
        assert!(nul.inlined(Some(&mut prepared)).is_none());
    }

    async fn connect() -> AnyConnection {
        sqlx::any::install_default_drivers();
        AnyConnection::connect("sqlite::memory:").await.unwrap()
    }

    /// Each statement binds its own `$1`…, results come back per statement, and the list stops at the first
    /// failure with that statement undone and the ones before it done.
    #[tokio::test]
    async fn a_list_runs_in_order_and_stops_at_its_first_failure() {
        let mut conn = connect().await;
        sqlx::raw_sql("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)").execute(&mut conn).await.unwrap();
        let mut s = Script::new();
        let insert = "INSERT INTO t (k, v) VALUES ($1, $2)";
        let a = s.push(insert, |b| {
            b.bind("a").bind(1);
        });
        let read = s.push("SELECT k, v FROM t WHERE v >= $1 ORDER BY k", |b| {
            b.bind(1);
        });
        let dup = s.push(insert, |b| {
            b.bind("a").bind(2);
        });
        let after = s.push(insert, |b| {
            b.bind("c").bind(3);
        });
        let ran = s.run_on(&mut conn, None).await;

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
        let mut conn = connect().await;
        let mut s = Script::new();
        for n in 0..5_i64 {
            s.push("SELECT $1 + $2 + $3 + $4 + $5", |b| {
                b.bind(n).bind(1).bind(2).bind(3).bind(4);
            });
        }
        let last = s.push("SELECT $1, $2, $3, $4, $5, $1", |b| {
            b.bind("a").bind("b").bind(3).bind("d").bind(None::<String>);
        });
        let ran = s.run_on(&mut conn, None).await;
        let row = &ran.rows(last).unwrap()[0];
        let got: (String, String, i64, String, Option<String>, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
        assert_eq!(got, ("a".into(), "b".into(), 3, "d".into(), None, "a".into()));
    }
}

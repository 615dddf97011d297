//! The audit log: every API call, bounded to the newest N entries ([`rows`]: the table; [`writer`]: when an
//! entry is written). Where an entry is written depends on what the call did, so that no answered change can
//! be lost in a crash:
//!
//! - a call that changes state has its entry written in the transaction that makes the change (see
//!   [`crate::call::commit`] and [`super::Tx::commit_with_audit`]): both survive a `kill -9` together, or
//!   neither does;
//! - any other call that is not a read (one refused, or one whose change is not a transaction) has its entry
//!   written before it is answered ([`writer::AuditSink::record_now`]);
//! - reads are recorded in batches a few milliseconds later ([`writer::AuditSink::record`]), so recording
//!   never slows them down; those recorded in the last moments before a crash can be lost.
//!
//! Pending entries are only ever taken by whoever holds the writer connection, and each writer first writes
//! everything pending, so the log's order is the order calls were answered in, and a read of the log (after
//! [`writer::AuditSink::flush`]) includes every call made before it.

pub mod rows;
pub mod writer;

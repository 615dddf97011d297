//! The fault engine's methods, one module a concern. The engine's state, its loading, the judging of a call and
//! what these methods share (storing and forgetting a fault) are the parent's.

mod lag;
mod limits;
mod outages;
mod replicas;
mod rules;
mod spot;

use crate::error::{ApiError, Result};

/// Where the fault `id` is among `items` (each named by `id_of`), or the 404 that says no `what` has that name.
fn index_of<T>(items: &[T], id: &str, id_of: impl Fn(&T) -> &str, what: &str) -> Result<usize> {
    items
        .iter()
        .position(|x| id_of(x) == id)
        .ok_or_else(|| ApiError::not_found(fakecloud_api::codes::FAULT_NOT_FOUND, format!("no {what} named {id:?}")))
}

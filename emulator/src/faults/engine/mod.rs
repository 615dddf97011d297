//! The fault engine's methods, one module a concern. The engine's state, its loading, the judging of a call and
//! what these methods share (storing and forgetting a fault) are the parent's.

mod lag;
mod limits;
mod outages;
mod replicas;
mod rules;
mod spot;

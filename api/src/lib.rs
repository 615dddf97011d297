//! The fakecloud emulator's API, defined once: the JSON types on the wire, the error codes, and the one
//! typed HTTP client that the CLI, the CCM, the scripts and the tests all use.

pub mod client;
pub mod codes;
pub mod faults;
pub mod types;

pub use client::{ApiError, Client, ClientError, RetryPolicy};
pub use faults::*;
pub use types::*;

/// Header carrying a create call's client token: a retry with the same key returns the original resource.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";
/// Header with the request's ID, also found in error bodies and the audit log.
pub const REQUEST_ID_HEADER: &str = "X-Request-Id";
/// Environment variables shared by the CLI, scripts and tests.
pub const ENV_ENDPOINT: &str = "FAKECLOUD_ENDPOINT";
pub const ENV_USER_TOKEN: &str = "FAKECLOUD_USER_TOKEN";
pub const ENV_ADMIN_TOKEN: &str = "FAKECLOUD_ADMIN_TOKEN";

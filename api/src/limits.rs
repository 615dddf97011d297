//! The bounds the API enforces on numbers. The emulator validates against these constants and the OpenAPI
//! document is generated from them, so the two cannot disagree.

/// A rate limit's bucket size.
pub const RATE_LIMIT_CAPACITY_MIN: u32 = 1;
pub const RATE_LIMIT_CAPACITY_MAX: u32 = 1_000_000;
/// Tokens a rate limit adds per second. The floor keeps a full bucket's refill time (capacity / rate) within
/// what a nanosecond clock can count: 1,000,000 tokens at 0.001/s take 31 years, not 584.
pub const REFILL_PER_SECOND_MIN: f64 = 0.001;
pub const REFILL_PER_SECOND_MAX: f64 = 1_000_000.0;
/// A fixed-window rate limit's window, in seconds: up to a day.
pub const RATE_LIMIT_WINDOW_SECONDS_MIN: u32 = 1;
pub const RATE_LIMIT_WINDOW_SECONDS_MAX: u32 = 86_400;
/// A rate limit's own refusal message, and its remaining header's value format, in characters.
pub const RATE_LIMIT_MESSAGE_MAX_CHARS: usize = 1024;
pub const RATE_LIMIT_FORMAT_MAX_CHARS: usize = 256;

/// A latency fault's delay and jitter, each and together.
pub const LATENCY_MAX_MS: u64 = 600_000;
/// How long a data-plane `reset` fault forwards a connection before resetting it: a day.
pub const LB_RESET_AFTER_MAX_MS: u64 = 86_400_000;
/// How long a `hang` fault holds a call, and how long eventual consistency lasts.
pub const FAULT_SECONDS_MAX: f64 = 3600.0;
/// How long a fault rule, outage or random spot reclamation may be set to last: a week.
pub const WINDOW_SECONDS_MAX: f64 = 7.0 * 86400.0;
/// How long a load balancer may be set to stay `provisioning`: an hour (ELB's are minutes at worst).
pub const LB_PROVISION_SECONDS_MAX: f64 = 3600.0;
/// A spot interruption notice: at most a day.
pub const NOTICE_SECONDS_MAX: f64 = 86400.0;
/// A fault rule's `trigger.skip` and `trigger.times` (calls) and its `position` (rules): far beyond any run,
/// and inside the int64 the OpenAPI document's integers are (a u64 is not).
pub const FAULT_COUNT_MAX: u64 = 1_000_000_000;
/// Random spot reclamations per minute.
pub const SPOT_RATE_PER_MINUTE_MAX: f64 = 600.0;

/// `page_size` of list calls.
pub const PAGE_SIZE_MIN: u32 = 1;
pub const PAGE_SIZE_MAX: u32 = 1000;
pub const PAGE_SIZE_DEFAULT: u32 = 100;
/// `limit` of audit reads.
pub const AUDIT_LIMIT_MIN: u32 = 1;
pub const AUDIT_LIMIT_MAX: u32 = 10_000;
pub const AUDIT_LIMIT_DEFAULT: u32 = 1000;
/// `max_seconds` of the audit stream: how long one stream stays open before the client reconnects.
pub const AUDIT_STREAM_SECONDS_MIN: u32 = 1;
pub const AUDIT_STREAM_SECONDS_MAX: u32 = 3600;
pub const AUDIT_STREAM_SECONDS_DEFAULT: u32 = 300;
/// Audit streams open at once with one token (only the admin token may stream): each polls the log, and a
/// thousand would take the database's readers from every other call.
pub const AUDIT_STREAMS_PER_TOKEN: u32 = 8;
/// Accounts on one emulator beside its own: each is a database with its connections and tasks.
pub const ACCOUNTS_MAX: usize = 64;
/// A lease's time to live, in seconds: a second to a week.
pub const LEASE_TTL_SECONDS_MIN: f64 = 1.0;
pub const LEASE_TTL_SECONDS_MAX: f64 = 7.0 * 86400.0;
/// Ports: 0 is not a port.
pub const PORT_MIN: u16 = 1;
/// A health check's interval, in seconds.
pub const HEALTH_INTERVAL_MIN: u32 = 1;
pub const HEALTH_INTERVAL_MAX: u32 = 300;
/// Tags on an instance.
pub const TAGS_MAX: usize = 50;
/// A load balancer needs at least this many listeners.
pub const LISTENERS_MIN: usize = 1;

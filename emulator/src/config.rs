//! What the emulated cloud looks like (region, zones, address pools, instance types) and how fast it moves.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use fakecloud_api::{InstanceType, Region, Zone};
use ipnet::Ipv4Net;

/// Everything `fakecloud serve` is configured with, after validation.
#[derive(Debug, Clone)]
pub struct Config {
    pub topology: Topology,
    pub timings: Timings,
    /// Audit entries kept; older ones are dropped.
    pub audit_max_entries: u64,
    /// Seed for fault injection's random draws; `None` picks one (and logs it).
    pub seed: Option<u64>,
    /// Where snapshots are written; `None` is the database's directory when the server starts, and none at all in
    /// an account's cloud (snapshots are the operator's: `POST /v1/admin/snapshot` refuses an account's admin).
    pub snapshot_dir: Option<PathBuf>,
    /// Timeouts and the cap of client connections.
    pub connections: crate::listener::Limits,
    /// Serve every active load balancer's listeners (the data plane); off by default.
    pub serve_load_balancers: bool,
    /// What the data plane may hold open, when it is served.
    pub data_plane: DataPlaneLimits,
    /// The emulator holds the public pool in a network namespace of its own (`--hold-public-pool`, as on kind),
    /// where it may also route: passthrough load balancers are served only then (see `dataplane::passthrough`).
    pub holds_public_pool: bool,
    /// Accept a loopback `private_ip` for an adopted instance (backends that are processes on this host).
    pub loopback_instances: bool,
    /// Networks outside the VPC whose machines may be adopted (a kind network): a fixed `private_ip` or
    /// `ipv6_address` may lie in them (see `addresses`).
    pub adopt_networks: Vec<ipnet::IpNet>,
}

/// What the load balancer data plane may hold open (`serve --lb-*`), so that no client of a load balancer —
/// however many connections or UDP clients it opens, however long it keeps them quiet — takes more than its
/// share, or the open files the API needs.
#[derive(Debug, Clone)]
pub struct DataPlaneLimits {
    /// TCP connections open at once on one listener.
    pub connections_per_listener: u32,
    /// TCP connections open at once on one load balancer, across its listeners.
    pub connections_per_lb: u32,
    /// UDP sessions open at once on one load balancer, across its listeners.
    pub udp_sessions_per_lb: u32,
    /// How long a proxied TCP connection may pass no byte either way before it is closed.
    pub idle_timeout: Duration,
    /// Open files the data plane may hold: a listening socket each, two per TCP connection (the client's and
    /// the backend's), one per UDP session and per health check under way. Apart from the API's connections.
    pub max_files: u32,
}

impl Default for DataPlaneLimits {
    fn default() -> Self {
        Self {
            connections_per_listener: 1024,
            connections_per_lb: 4096,
            udp_sessions_per_lb: 4096,
            // As a network load balancer's (AWS NLB: 350 s for TCP).
            idle_timeout: Duration::from_secs(350),
            max_files: crate::listener::default_max_connections() / 2,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Timings {
    pub boot_delay: Duration,
    pub stop_delay: Duration,
    pub terminate_delay: Duration,
    pub lb_provision_delay: Duration,
    pub lb_delete_delay: Duration,
    /// How long terminated instances stay listable.
    pub terminated_retention: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            boot_delay: Duration::from_secs(2),
            stop_delay: Duration::from_secs(1),
            terminate_delay: Duration::from_secs(1),
            lb_provision_delay: Duration::from_secs(3),
            lb_delete_delay: Duration::from_secs(1),
            terminated_retention: Duration::from_secs(3600),
        }
    }
}

impl Timings {
    /// Every transition immediate: for tests that do not care about asynchrony.
    pub fn instant() -> Self {
        Self {
            boot_delay: Duration::ZERO,
            stop_delay: Duration::ZERO,
            terminate_delay: Duration::ZERO,
            lb_provision_delay: Duration::ZERO,
            lb_delete_delay: Duration::ZERO,
            terminated_retention: Duration::from_secs(3600),
        }
    }
}

/// A pool of IPv4 addresses handed out by offset from its network address.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// The key in `ip_leases.pool`.
    pub name: String,
    pub net: Ipv4Net,
    pub first: u32,
    pub last: u32,
}

impl Pool {
    /// A subnet: the network address, the gateway (.1) and the broadcast address are reserved.
    pub fn subnet(name: impl Into<String>, net: Ipv4Net) -> Self {
        let hosts = Self::hosts(name, net);
        // The gateway, if there is a host after it.
        Self { first: (hosts.first + 1).min(hosts.last), ..hosts }
    }

    /// A public pool: only the network and broadcast addresses are reserved.
    pub fn public(net: Ipv4Net) -> Self {
        Self::hosts(format!("public:{net}"), net)
    }

    /// Every host address of `net`: all but its network address and its broadcast address — which a /31 or a
    /// /32 has not, all its addresses being hosts' (RFC 3021). Also what a machine of an adopted network may
    /// have (see `crate::addresses`).
    pub fn hosts(name: impl Into<String>, net: Ipv4Net) -> Self {
        // As u64: a /0 has 2^32 addresses.
        let size = 1u64 << (32 - u32::from(net.prefix_len()));
        let (first, last) = if net.prefix_len() >= 31 { (0, size - 1) } else { (1, size - 2) };
        // Both below 2^32.
        let (first, last) = (u32::try_from(first).unwrap_or(u32::MAX), u32::try_from(last).unwrap_or(u32::MAX));
        Self { name: name.into(), net, first, last }
    }

    pub fn addr(&self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.net.network()) + offset)
    }

    /// The offset of `ip` if it is a usable address of this pool.
    pub fn offset_of(&self, ip: Ipv4Addr) -> Option<u32> {
        let off = u32::from(ip).checked_sub(u32::from(self.net.network()))?;
        (self.net.contains(&ip) && off >= self.first && off <= self.last).then_some(off)
    }

    pub fn capacity(&self) -> u32 {
        (self.last + 1).saturating_sub(self.first)
    }
}

#[derive(Debug, Clone)]
pub struct Topology {
    pub region: String,
    pub vpc: Ipv4Net,
    /// (zone name, its subnet pool), in configuration order.
    pub zones: Vec<(String, Pool)>,
    pub internal_lb: Pool,
    pub public: Pool,
    pub instance_types: Vec<InstanceType>,
}

/// The instance-type catalog: a few sizes, as a real cloud's smallest families.
pub fn default_instance_types() -> Vec<InstanceType> {
    [("fc.small", 2, 4096), ("fc.medium", 4, 8192), ("fc.large", 8, 16384), ("fc.xlarge", 16, 32768)]
        .into_iter()
        .map(|(name, vcpus, memory_mib)| InstanceType { name: name.into(), vcpus, memory_mib })
        .collect()
}

impl Topology {
    /// Splits the VPC into one subnet per zone plus one for internal load balancers.
    pub fn new(region: &str, zones: &[String], vpc: Ipv4Net, public: Ipv4Net) -> Result<Self, String> {
        if region.is_empty() {
            return Err("--region must not be empty".into());
        }
        if zones.is_empty() {
            return Err("--zones needs at least one zone".into());
        }
        let mut seen = std::collections::HashSet::new();
        for z in zones {
            if z.is_empty() || !seen.insert(z) {
                return Err(format!("--zones: zone names must be non-empty and distinct (got {zones:?})"));
            }
        }
        // One subnet per zone and one more for internal LBs: enough bits for zones + 1 subnets.
        let bits = usize::BITS - zones.len().leading_zeros();
        let prefix = vpc.prefix_len() + bits as u8;
        if prefix > 28 {
            return Err(format!("--vpc-cidr {vpc} is too small for {} zones; use a /16 or larger", zones.len()));
        }
        let mut subnets = vpc.subnets(prefix).map_err(|e| e.to_string())?;
        let mut zone_pools = Vec::new();
        for z in zones {
            let net = subnets.next().ok_or("not enough subnets")?;
            zone_pools.push((z.clone(), Pool::subnet(format!("subnet:{net}"), net)));
        }
        let lb_net = subnets.next().ok_or("not enough subnets")?;
        if public.prefix_len() > 30 {
            return Err(format!("--public-pool {public} is too small; use a /30 or larger"));
        }
        if vpc.contains(&public) || public.contains(&vpc) {
            return Err(format!("--public-pool {public} overlaps the VPC {vpc}"));
        }
        Ok(Self {
            region: region.to_string(),
            vpc,
            zones: zone_pools,
            internal_lb: Pool::subnet(format!("subnet:{lb_net}"), lb_net),
            public: Pool::public(public),
            instance_types: default_instance_types(),
        })
    }

    pub fn zone_pool(&self, zone: &str) -> Option<&Pool> {
        self.zones.iter().find(|(z, _)| z == zone).map(|(_, p)| p)
    }

    pub fn zone_names(&self) -> Vec<&str> {
        self.zones.iter().map(|(z, _)| z.as_str()).collect()
    }

    pub fn to_api(&self) -> Region {
        Region {
            name: self.region.clone(),
            vpc_cidr: self.vpc.to_string(),
            zones: self.zones.iter().map(|(z, p)| Zone { name: z.clone(), subnet: p.net.to_string() }).collect(),
            public_pool: self.public.net.to_string(),
            internal_lb_subnet: self.internal_lb.net.to_string(),
            instance_types: self.instance_types.clone(),
        }
    }
}

impl Default for Topology {
    fn default() -> Self {
        let zones: Vec<String> = ["local-1a", "local-1b", "local-1c"].iter().map(|s| s.to_string()).collect();
        #[allow(clippy::unwrap_used)] // constant, valid inputs
        Self::new("local-1", &zones, "10.0.0.0/16".parse().unwrap(), "203.0.113.0/24".parse().unwrap()).unwrap()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            topology: Topology::default(),
            timings: Timings::default(),
            audit_max_entries: 100_000,
            seed: None,
            snapshot_dir: None,
            connections: crate::listener::Limits::default(),
            serve_load_balancers: false,
            data_plane: DataPlaneLimits::default(),
            holds_public_pool: false,
            loopback_instances: false,
            adopt_networks: Vec::new(),
        }
    }
}

/// Where the database lives. Its `Debug`, as its `Display`, hides a URL's password.
#[derive(Clone, PartialEq)]
pub enum DbLocation {
    File(PathBuf),
    Memory,
    /// A PostgreSQL database, by its `postgres://` URL (issue #28): one emulator's, or several replicas' serving
    /// one cloud.
    Postgres(String),
}

impl DbLocation {
    /// `--db`'s value: a file path, `:memory:`, the same as a `sqlite:` URL (`sqlite://PATH`, `sqlite:PATH`), or
    /// a `postgres://` (`postgresql://`) URL. Any other URL is refused: taken for a path, `mysql://host/db` would
    /// quietly become a SQLite file in a directory named `mysql:`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return check_postgres_url(s).map(|()| Self::Postgres(s.to_string()));
        }
        let path = s.strip_prefix("sqlite://").or_else(|| s.strip_prefix("sqlite:")).unwrap_or(s);
        if let Some((scheme, _)) = path.split_once("://")
            && !scheme.is_empty()
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        {
            return Err(format!(
                "--db {:?} is a {scheme}:// URL, and the emulator keeps its state in SQLite or PostgreSQL: give a \
                 file path (created if missing), sqlite://PATH, :memory: or postgres://USER@HOST/DATABASE",
                redact(s)
            ));
        }
        match path {
            "" => Err("--db is empty: give a file path (created if missing), sqlite://PATH or :memory:".into()),
            ":memory:" => Ok(Self::Memory),
            path => Ok(Self::File(PathBuf::from(path))),
        }
    }

    /// The directory the database file is in (the working directory for `:memory:` and PostgreSQL).
    pub fn dir(&self) -> PathBuf {
        match self {
            Self::File(p) => p.parent().filter(|d| !d.as_os_str().is_empty()).map_or_else(|| ".".into(), Into::into),
            Self::Memory | Self::Postgres(_) => ".".into(),
        }
    }
}

/// As logs and errors show it: a PostgreSQL URL without its password.
impl std::fmt::Display for DbLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => p.display().fmt(f),
            Self::Memory => f.write_str(":memory:"),
            Self::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl std::fmt::Debug for DbLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => f.debug_tuple("File").field(p).finish(),
            Self::Memory => f.write_str("Memory"),
            Self::Postgres(url) => f.debug_tuple("Postgres").field(&redact(url)).finish(),
        }
    }
}

/// A `--db` URL that PostgreSQL's client would refuse, refused up front, in the flag's words.
fn check_postgres_url(url: &str) -> Result<(), String> {
    sqlx::postgres::PgConnectOptions::from_str(url).map(drop).map_err(|e| {
        format!(
            "--db {:?} is not a PostgreSQL URL that can be used ({e}): give postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
            redact(url)
        )
    })
}

/// The URL as logs and errors may show it: without its password, given as `USER:PASSWORD@` or as a `password`
/// query parameter (`postgres://u@h/db?password=...`, which PostgreSQL's clients and sqlx take too); the rest as
/// given.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    // The user information ends at the last '@' before the path: a password may hold an unencoded '?' or '#'
    // that a URL parser would refuse, and the refusal shows the URL. At worst more than the password is hidden.
    let head_end = rest.find('/').unwrap_or(rest.len());
    let (userinfo, after) = match rest[..head_end].rfind('@') {
        Some(at) => {
            let (userinfo, after) = rest.split_at(at);
            let userinfo = match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***"),
                None => userinfo.to_string(),
            };
            (userinfo, after)
        }
        None => (String::new(), rest),
    };
    let after = match after.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _value)) if names_password(key) => format!("{key}=***"),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}{fragment}", pairs.join("&"))
        }
        None => after.to_string(),
    };
    format!("{scheme}://{userinfo}{after}")
}

/// Whether a query parameter's name is `password` as a URL's reader takes it: percent-decoded, `+` a space.
/// Any case: sqlx and libpq take only `password`, but a `Password` is surely meant as one.
fn names_password(key: &str) -> bool {
    let mut decoded = Vec::with_capacity(key.len());
    let mut bytes = key.bytes();
    while let Some(b) = bytes.next() {
        let hex = |b: Option<u8>| b.and_then(|b| char::from(b).to_digit(16));
        decoded.push(match b {
            b'+' => b' ',
            b'%' => {
                let mut ahead = bytes.clone();
                match (hex(ahead.next()), hex(ahead.next())) {
                    (Some(hi), Some(lo)) => {
                        bytes = ahead;
                        // Two hex digits: at most 255.
                        (hi * 16 + lo) as u8
                    }
                    // Not an escape: the '%' as it is.
                    _ => b'%',
                }
            }
            b => b,
        });
    }
    decoded.eq_ignore_ascii_case(b"password")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_is_never_taken_for_a_file_name() {
        assert_eq!(DbLocation::parse("fc.db"), Ok(DbLocation::File("fc.db".into())));
        assert_eq!(DbLocation::parse("sqlite://dir/fc.db"), Ok(DbLocation::File("dir/fc.db".into())));
        assert_eq!(DbLocation::parse("sqlite:fc.db"), Ok(DbLocation::File("fc.db".into())));
        assert_eq!(DbLocation::parse(":memory:"), Ok(DbLocation::Memory));
        assert_eq!(DbLocation::parse("sqlite::memory:"), Ok(DbLocation::Memory));
        for url in ["mysql://x", "sqlite://postgres://h/db", "sqlite://mysql://h/db"] {
            let e = DbLocation::parse(url).unwrap_err();
            assert!(e.contains("URL") && e.contains("sqlite://PATH") && e.contains(url), "{e}");
        }
        for url in ["postgres://u@localhost/fc", "postgresql://h:5433/db?sslmode=disable"] {
            assert_eq!(DbLocation::parse(url), Ok(DbLocation::Postgres(url.into())));
        }
        let e = DbLocation::parse("postgres://u@h:port/db").unwrap_err();
        assert!(e.contains("postgres://u@h:port/db") && e.contains("postgres://USER"), "{e}");
        assert!(DbLocation::parse("").is_err());
    }

    #[test]
    fn a_password_is_never_shown_in_either_form() {
        for (url, shown) in [
            // In the user information.
            ("postgres://fc:s3cret@db:5432/fc", "postgres://fc:***@db:5432/fc"),
            ("postgresql://:s3cret@db/fc?sslmode=disable", "postgresql://:***@db/fc?sslmode=disable"),
            // A query parameter, alone, among others, without a path, before a fragment, percent-encoded.
            ("postgres://fc@db/fc?password=s3cret", "postgres://fc@db/fc?password=***"),
            (
                "postgres://db/fc?sslmode=require&password=s3cret&application_name=x",
                "postgres://db/fc?sslmode=require&password=***&application_name=x",
            ),
            ("postgres://db?user=fc&password=s3cret", "postgres://db?user=fc&password=***"),
            ("postgres://db/fc?password=s3cret#f", "postgres://db/fc?password=***#f"),
            ("postgres://db/fc?pass%77ord=s3cret&Password=s3cret", "postgres://db/fc?pass%77ord=***&Password=***"),
            // Both forms at once.
            ("postgres://fc:s3cret@db/fc?password=s3cret", "postgres://fc:***@db/fc?password=***"),
            // A password with an unencoded '?' (a URL the client refuses, and the refusal shows): hidden whole.
            ("postgres://fc:s3?cret@db/fc", "postgres://fc:***@db/fc"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        // What holds no password is left as it is.
        for url in [
            "postgres://fc@db:5432/fc?sslmode=disable&options[search_path]=account_a",
            "postgres://db/fc?passwords=x&password_file=y&password",
            "fc.db",
            ":memory:",
        ] {
            assert_eq!(redact(url), url);
        }
        // Every way a location is shown.
        let url = "postgres://fc:s3cret@db/fc?password=s3cret";
        let location = DbLocation::parse(url).unwrap();
        for shown in [location.to_string(), format!("{location:?}")] {
            assert!(!shown.contains("s3cret") && shown.contains("db/fc"), "{shown}");
        }
        for bad in ["mysql://fc:s3cret@db/fc", "postgres://fc:s3cret@db:port/fc?password=s3cret"] {
            let e = DbLocation::parse(bad).unwrap_err();
            assert!(!e.contains("s3cret") && e.contains("@db"), "{e}");
        }
    }

    #[test]
    fn default_topology_splits_the_vpc_per_zone() {
        let t = Topology::default();
        let nets: Vec<String> = t.zones.iter().map(|(_, p)| p.net.to_string()).collect();
        assert_eq!(nets, ["10.0.0.0/18", "10.0.64.0/18", "10.0.128.0/18"]);
        assert_eq!(t.internal_lb.net.to_string(), "10.0.192.0/18");
        assert_eq!(t.public.capacity(), 254);
        assert_eq!(t.zones[0].1.addr(t.zones[0].1.first).to_string(), "10.0.0.2");
    }

    #[test]
    fn bad_topologies_are_refused_with_the_flag_named() {
        let z = vec!["a".to_string(), "a".to_string()];
        let err = Topology::new("r", &z, "10.0.0.0/16".parse().unwrap(), "203.0.113.0/24".parse().unwrap());
        assert!(err.unwrap_err().contains("--zones"));
        let z = vec!["a".to_string()];
        let err = Topology::new("r", &z, "10.0.0.0/16".parse().unwrap(), "10.0.5.0/24".parse().unwrap());
        assert!(err.unwrap_err().contains("overlaps"));
    }
}

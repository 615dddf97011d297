//! Request and response bodies. Every request type denies unknown fields, so a typo is a 400, not a silent no-op.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The error envelope every non-2xx response carries.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable code such as `RouteLimitExceeded` (see `fakecloud_api::codes`).
    pub code: String,
    /// What went wrong and, where there is one, what to do about it.
    pub message: String,
    pub request_id: String,
}

// ---------------------------------------------------------------------------------------------- region

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Region {
    pub name: String,
    pub vpc_cidr: String,
    pub zones: Vec<Zone>,
    /// Pool that internet-facing load balancer addresses come from.
    pub public_pool: String,
    /// Subnet that internal load balancer addresses come from.
    pub internal_lb_subnet: String,
    pub instance_types: Vec<InstanceType>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Zone {
    pub name: String,
    pub subnet: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct InstanceType {
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u32,
}

// ---------------------------------------------------------------------------------------------- instances

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
}

impl InstanceState {
    pub const ALL: [InstanceState; 6] =
        [Self::Pending, Self::Running, Self::Stopping, Self::Stopped, Self::ShuttingDown, Self::Terminated];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
            Self::ShuttingDown => "shutting-down",
            Self::Terminated => "terminated",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Market {
    #[default]
    OnDemand,
    Spot,
}

impl Market {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnDemand => "on-demand",
            Self::Spot => "spot",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateInstanceRequest {
    /// Becomes the Kubernetes node name, so it must be a lowercase RFC 1123 subdomain.
    pub name: String,
    /// Defaults to the region's first zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Defaults to the first type of the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default)]
    pub market: Market,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// A fixed private IP, to adopt an existing machine (such as a kind node). Inside the VPC it must lie in the
    /// zone's subnet; outside it, in a network the emulator adopts machines from (`serve --adopt-networks`, a
    /// kind network say), or on loopback with `serve --loopback-instances`. Never a load balancer's address, nor
    /// with the data plane on the emulator host's own. An IPv4-mapped IPv6 address is read as the IPv4 address it
    /// maps.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::net::deserialize_canonical")]
    #[schema(value_type = Option<String>)]
    pub private_ip: Option<IpAddr>,
    /// A fixed IPv6 address beside an IPv4 `private_ip`, to adopt a dual-stack machine (such as a node of a
    /// dual-stack kind cluster). The cloud allocates no IPv6 addresses of its own; any unicast address not in use
    /// is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub ipv6_address: Option<Ipv6Addr>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Instance {
    pub id: String,
    pub name: String,
    pub zone: String,
    pub region: String,
    pub instance_type: String,
    pub market: Market,
    pub state: InstanceState,
    #[schema(value_type = String)]
    pub private_ip: IpAddr,
    /// The instance's IPv6 address on a dual-stack machine; absent on single-stack ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub ipv6_address: Option<Ipv6Addr>,
    /// `fakecloud://<zone>/<instance-id>`, the value a CCM writes to `spec.providerID`.
    pub provider_id: String,
    pub tags: BTreeMap<String, String>,
    /// RFC 3339.
    pub created_at: String,
    /// When the instance entered its current state (RFC 3339).
    pub state_changed_at: String,
    /// Why the instance is in its state, when the cloud did it (e.g. `Server.SpotInstanceTermination`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,
    /// A spot interruption notice: when the instance will be interrupted (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_at: Option<String>,
}

impl Instance {
    /// The instance's addresses: the private IP, then the IPv6 address of a dual-stack machine.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.private_ip).chain(self.ipv6_address.map(IpAddr::V6))
    }

    /// The instance's address of the family of `like` (IPv4 or IPv6), if it has one.
    pub fn address_like(&self, like: IpAddr) -> Option<IpAddr> {
        self.addresses().find(|a| a.is_ipv4() == like.is_ipv4())
    }
}

/// Filters for `GET /v1/instances`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListInstancesQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>)]
    pub state: Option<InstanceState>,
    /// `key=value`, or `key` alone for "has the tag".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InstanceList {
    pub items: Vec<Instance>,
    /// Pass as `page_token` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

// ---------------------------------------------------------------------------------------------- routes

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct RouteTable {
    pub id: String,
    pub name: String,
    /// The main table exists from the start and cannot be deleted.
    pub main: bool,
    pub route_count: u32,
    /// The zones whose subnets use this table, associated with it through EC2's `AssociateRouteTable`; every
    /// other zone's subnet uses the main table.
    #[serde(default)]
    pub zones: Vec<String>,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRouteTableRequest {
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RouteTableList {
    pub items: Vec<RouteTable>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RouteState {
    Active,
    /// The target instance is terminated or gone, as a cloud reports it.
    Blackhole,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Route {
    pub id: String,
    pub route_table_id: String,
    pub name: String,
    /// The network in canonical form (IPv6 lowercase and compressed, as Go and Kubernetes print it), so CCMs
    /// can compare it with a node's pod CIDR as text.
    pub destination: String,
    pub target_instance: String,
    pub state: RouteState,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRouteRequest {
    pub name: String,
    /// A network in CIDR form (host bits zero, no leading zeros in IPv4 octets), IPv4 or IPv6. A table has one
    /// route per network: `fd00:0::/64` and `FD00::/64` are `fd00::/64`.
    pub destination: String,
    /// Instance ID the traffic goes to.
    pub target_instance: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RouteList {
    pub items: Vec<Route>,
}

// ---------------------------------------------------------------------------------------------- accounts

/// An account: a cloud of its own on the emulator — instances, networks, load balancers, quotas, faults, rate
/// limits and audit log — reached with its own tokens, as several clusters or CI jobs each get an account of a
/// real cloud.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Account {
    pub id: String,
    pub created_at: String,
    /// Who holds it, until when; none while it is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// A lease of an account: a CI job's, say. When it lapses (or is released) the account is wiped — emptied, and
/// given new tokens, so the old holder's stop working — and is free again.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Lease {
    pub holder: String,
    pub expires_at: String,
}

/// `POST /v1/leases`: take an account (the one named, or any free one) for `ttl_seconds`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// Who takes it, e.g. a CI job's name: 1-255 letters, digits, '-', '_' or '.'.
    pub holder: String,
    /// How long it lasts unless renewed: 1 s to 7 days.
    pub ttl_seconds: f64,
    /// This account (default: the first free one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

/// `PUT /v1/leases/{account}`: renew the lease, by its holder, for `ttl_seconds` from now.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewLeaseRequest {
    pub holder: String,
    /// 1 s to 7 days.
    pub ttl_seconds: f64,
}

/// A lease taken: the account, and its tokens for the holder.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LeasedAccount {
    pub account: Account,
    pub user_token: String,
    pub admin_token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AccountList {
    pub items: Vec<Account>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAccountRequest {
    /// 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (`default` is the
    /// emulator's own account).
    pub id: String,
}

/// A new account and its tokens, shown this once: its user token for its CCMs and clients, its admin token for
/// its quotas, faults and audit log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedAccount {
    pub id: String,
    pub created_at: String,
    pub user_token: String,
    pub admin_token: String,
}

// ---------------------------------------------------------------------------------------------- load balancers

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    #[default]
    InternetFacing,
    Internal,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InternetFacing => "internet-facing",
            Self::Internal => "internal",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub protocol: Protocol,
    /// 1–65535.
    pub port: u16,
    /// The port on the backends (a Service's NodePort), 1–65535.
    pub backend_port: u16,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub enum HealthCheckProtocol {
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "HTTP")]
    Http,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    #[serde(default)]
    pub protocol: HealthCheckProtocol,
    pub port: u16,
    /// Only for HTTP; must start with `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// 1–300 seconds.
    #[serde(default = "default_interval")]
    pub interval_seconds: u32,
}

fn default_interval() -> u32 {
    10
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LoadBalancerState {
    Provisioning,
    Active,
    Deleting,
}

impl LoadBalancerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "provisioning",
            Self::Active => "active",
            Self::Deleting => "deleting",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct LoadBalancer {
    pub id: String,
    pub name: String,
    pub scheme: Scheme,
    pub state: LoadBalancerState,
    pub listeners: Vec<Listener>,
    /// Instance IDs.
    pub backends: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    pub source_ranges: Vec<String>,
    #[serde(default)]
    pub session_affinity: SessionAffinity,
    #[serde(default)]
    pub forwarding: Forwarding,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub requested_ip: Option<IpAddr>,
    /// The VIP; present only once the load balancer is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub address: Option<IpAddr>,
    /// Present only once the load balancer is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Each listener's state in the data plane; only when the emulator serves load balancers
    /// (`fakecloud serve --serve-load-balancers`) and the load balancer is active.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listener_status: Vec<ListenerStatus>,
    /// Each backend's health as the data plane's checks see it; only when the emulator serves load balancers
    /// and the load balancer is active.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_health: Vec<BackendHealth>,
    /// How traffic to `address` reaches the backends: Kubernetes' `status.loadBalancer.ingress[].ipMode`.
    #[serde(default)]
    pub ip_mode: IpMode,
    /// Whether traffic gets through, as the listeners and backends above add up; only when the emulator serves
    /// load balancers and the load balancer is active. `state` stays the control plane's: a load balancer whose
    /// address cannot be bound is still `active`, and says so here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_plane: Option<DataPlaneStatus>,
}

/// Which backend a client's connections go to (Kubernetes' `spec.sessionAffinity`, as clouds offer it: ELB's
/// source-IP stickiness, GCP's `CLIENT_IP`, Azure's `SourceIP` distribution).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SessionAffinity {
    /// Each connection (UDP session) to the next healthy backend in turn.
    #[default]
    None,
    /// Every connection and UDP session of one client address to the same healthy backend, for as long as the
    /// set of healthy backends stays the same: kube-proxy's `ClientIP` affinity on that node then holds too,
    /// where spreading one client over several nodes would give it a different pod on each.
    ClientIp,
}

impl SessionAffinity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ClientIp => "client-ip",
        }
    }
}

/// How a load balancer's data plane carries a connection to a backend.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Forwarding {
    /// A proxy (ELB's Classic and Application load balancers, Envoy in cloud-provider-kind): it accepts the
    /// client's connection and opens its own to the backend's `backend_port`, a NodePort. The pod sees the
    /// load balancer as the client; `ip_mode` is `proxy`.
    #[default]
    Proxy,
    /// Packets are routed to a healthy backend unchanged, still addressed to the load balancer's address and
    /// port (GCP's passthrough Network Load Balancer, Azure's floating IP): kube-proxy on the node serves the
    /// address itself, so no NodePort is needed and the pod sees the client's own address. Each client address
    /// stays on one backend while the healthy set holds. `backend_port` is not used; `ip_mode` is `vip`. Needs
    /// the emulator to hold the public pool in a network namespace of its own, where it routes (as on kind).
    Passthrough,
}

impl Forwarding {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proxy => "proxy",
            Self::Passthrough => "passthrough",
        }
    }
}

/// How a load balancer's address carries traffic to the nodes (Kubernetes' `ipMode`, KEP-1860).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum IpMode {
    /// Packets reach the nodes still addressed to the load balancer's address: a passthrough load balancer, or
    /// any load balancer when the emulator serves no data plane (a record only).
    #[default]
    Vip,
    /// A proxy: the emulator's data plane opens its own connection to the node, so the backend sees the load
    /// balancer's address as the client, and kube-proxy must not short-cut pods' traffic to the address.
    Proxy,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DataPlaneState {
    /// Every listener listens and every backend is healthy.
    Serving,
    /// Some traffic gets through, not all: a listener failed or is not served, or a backend is not healthy.
    Degraded,
    /// No traffic gets through: no listener listens, or no backend is healthy.
    Down,
}

impl DataPlaneState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Serving => "serving",
            Self::Degraded => "degraded",
            Self::Down => "down",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct DataPlaneStatus {
    pub state: DataPlaneState,
    /// What keeps it from `serving`, one problem each: a failed listener with its reason, an unhealthy backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ListenerState {
    /// Accepting connections on the load balancer's address and the listener's port.
    Listening,
    /// The address and port could not be bound (see `reason`); retried while the listener exists.
    Failed,
    /// Not served by the data plane. The emulator serves TCP and UDP now, so it no longer says this; kept so that
    /// clients built against older emulators still read every answer.
    Unsupported,
}

impl ListenerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Listening => "listening",
            Self::Failed => "failed",
            Self::Unsupported => "unsupported",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct ListenerStatus {
    pub protocol: Protocol,
    pub port: u16,
    pub state: ListenerState,
    /// Why the listener is not listening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum BackendState {
    /// Gets new connections.
    Healthy,
    /// Gets no new connections: its checks fail, or the instance is missing or not running.
    Unhealthy,
    /// Not checked yet; gets no new connections.
    Unknown,
}

impl BackendState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
            Self::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct BackendHealth {
    /// The backend's instance ID.
    pub instance: String,
    pub state: BackendState,
    /// When the backend entered this state (RFC 3339).
    pub since: String,
    /// The last failed check's error (cleared when the backend turns healthy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateLoadBalancerRequest {
    pub name: String,
    #[serde(default)]
    pub scheme: Scheme,
    pub listeners: Vec<Listener>,
    #[serde(default)]
    pub backends: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    #[serde(default)]
    pub source_ranges: Vec<String>,
    #[serde(default)]
    pub session_affinity: SessionAffinity,
    #[serde(default)]
    pub forwarding: Forwarding,
    /// Must be free and inside the pool of the scheme. An IPv4-mapped IPv6 address is read as the IPv4 address
    /// it maps.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::net::deserialize_canonical")]
    #[schema(value_type = Option<String>)]
    pub requested_ip: Option<IpAddr>,
}

/// A partial update: each field given replaces the current value.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateLoadBalancerRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listeners: Option<Vec<Listener>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ranges: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<SessionAffinity>,
    /// In place: the address stays, as Azure's floating IP is a rule's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarding: Option<Forwarding>,
}

/// How long new load balancers stay `provisioning`, set at run time (as moto's state transitions are): for
/// every load balancer, or for those created with one name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetLbProvisioningRequest {
    /// Seconds; 0 makes new load balancers active at once.
    pub seconds: f64,
    /// Only load balancers created with this name (it wins over the setting for every one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<String>,
}

/// Which provisioning settings `DELETE /v1/load-balancer-provisioning` resets.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ResetLbProvisioningQuery {
    /// Only this name's setting; without it, every setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<String>,
}

/// How long a load balancer created now stays `provisioning`: its name's setting, else the one for every load
/// balancer, else the start flag's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LbProvisioning {
    /// `fakecloud serve --lb-provision-delay`, in seconds: what applies where nothing is set.
    pub default_seconds: f64,
    /// Set for every load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Set per load balancer name.
    #[serde(default)]
    pub load_balancers: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListLoadBalancersQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LoadBalancerList {
    pub items: Vec<LoadBalancer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

// ---------------------------------------------------------------------------------------------- quotas

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum QuotaName {
    Instances,
    LoadBalancers,
    ListenersPerLoadBalancer,
    BackendsPerLoadBalancer,
    RoutesPerRouteTable,
    PublicIps,
    SourceRangesPerLoadBalancer,
    /// Inbound rules per security group (the AWS face's groups).
    RulesPerSecurityGroup,
}

impl QuotaName {
    pub const ALL: [QuotaName; 8] = [
        Self::Instances,
        Self::LoadBalancers,
        Self::ListenersPerLoadBalancer,
        Self::BackendsPerLoadBalancer,
        Self::RoutesPerRouteTable,
        Self::PublicIps,
        Self::SourceRangesPerLoadBalancer,
        Self::RulesPerSecurityGroup,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::LoadBalancers => "load-balancers",
            Self::ListenersPerLoadBalancer => "listeners-per-load-balancer",
            Self::BackendsPerLoadBalancer => "backends-per-load-balancer",
            Self::RoutesPerRouteTable => "routes-per-route-table",
            Self::PublicIps => "public-ips",
            Self::SourceRangesPerLoadBalancer => "source-ranges-per-load-balancer",
            Self::RulesPerSecurityGroup => "rules-per-security-group",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|q| q.as_str() == s)
    }

    /// The default limit, chosen to match common public-cloud defaults where one exists.
    pub fn default_limit(self) -> u32 {
        match self {
            Self::Instances => 1000,
            Self::LoadBalancers => 100,
            Self::ListenersPerLoadBalancer => 50,
            Self::BackendsPerLoadBalancer => 1000,
            // AWS's default routes per route table.
            Self::RoutesPerRouteTable => 50,
            Self::PublicIps => 100,
            Self::SourceRangesPerLoadBalancer => 100,
            // AWS's default inbound rules per security group.
            Self::RulesPerSecurityGroup => 60,
        }
    }

    /// The error code a request gets when it would exceed this quota.
    pub fn exceeded_code(self) -> &'static str {
        use crate::codes::*;
        match self {
            Self::Instances => INSTANCE_LIMIT_EXCEEDED,
            Self::LoadBalancers => LOAD_BALANCER_LIMIT_EXCEEDED,
            Self::ListenersPerLoadBalancer => LISTENER_LIMIT_EXCEEDED,
            Self::BackendsPerLoadBalancer => TOO_MANY_TARGETS,
            Self::RoutesPerRouteTable => ROUTE_LIMIT_EXCEEDED,
            Self::PublicIps => ADDRESS_LIMIT_EXCEEDED,
            Self::SourceRangesPerLoadBalancer => SOURCE_RANGE_LIMIT_EXCEEDED,
            Self::RulesPerSecurityGroup => RULES_PER_SECURITY_GROUP_LIMIT_EXCEEDED,
        }
    }
}

impl std::fmt::Display for QuotaName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Quota {
    pub name: QuotaName,
    pub limit: u32,
    /// Current region-wide usage; absent for per-resource quotas (listeners per load balancer, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuotaList {
    pub items: Vec<Quota>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetQuotaRequest {
    pub limit: u32,
}

// ---------------------------------------------------------------------------------------------- audit

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct AuditEntry {
    /// Increases with every call; use it as `after` to read only newer entries.
    pub seq: i64,
    /// RFC 3339 with milliseconds.
    pub time: String,
    pub request_id: String,
    /// `user`, `admin`, or `anonymous` for calls without a valid token; `system` for what the emulator did itself
    /// (a data-plane fault rule firing on a load balancer, operation `LoadBalancerFault`).
    pub role: String,
    /// The API operation, e.g. `CreateLoadBalancer`; `Unknown` for paths the API does not have.
    pub operation: String,
    pub method: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// The HTTP status answered; 0 for a `LoadBalancerFault`, which is no HTTP call.
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    pub latency_ms: f64,
    /// The fault rule, rate limit or outage that shaped this call's answer, if any (for `LoadBalancerFault`: the
    /// data-plane rule that fired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// RFC 3339: only entries at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only entries with a larger `seq`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// At most this many, oldest first (default 1000, at most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `GET /v1/audit/stream`: where the live tail starts and how long it stays open.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditStreamQuery {
    /// Only entries with a larger `seq` (a reconnecting client passes the last one it saw); without it, the
    /// stream starts with the newest 200 entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// Seconds until the server ends the stream (default 300, at most 3600); the client reconnects with `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditList {
    pub items: Vec<AuditEntry>,
}

// ---------------------------------------------------------------------------------------------- admin

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// The snapshot's file name in the emulator's snapshot directory (`fakecloud serve --snapshot-dir`, by
    /// default the database's directory): 1–128 letters, digits, `.`, `_` or `-`, not starting with `.`, and
    /// not an existing name. (`path`, its old name, is accepted too; so is a full path to a file directly in
    /// the snapshot directory.)
    #[serde(alias = "path")]
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotResponse {
    /// Where the snapshot was written, on the emulator's machine.
    pub path: String,
    pub bytes: u64,
}

//! Error codes in the `{"error":{"code",...}}` envelope. Clients match on these, so they are part of the API.

// 400
pub const INVALID_JSON: &str = "InvalidJson";
pub const INVALID_PARAMETER: &str = "InvalidParameter";
pub const INVALID_CIDR: &str = "InvalidCidr";
pub const INVALID_PAGE_TOKEN: &str = "InvalidPageToken";
pub const INVALID_ROUTE_TARGET: &str = "InvalidRouteTarget";
/// A load balancer backend that is no running instance, or listed twice (ELB's code for the same refusals).
pub const INVALID_TARGET: &str = "InvalidTarget";
pub const INVALID_ADDRESS: &str = "InvalidAddress";
// 401 / 403
pub const UNAUTHORIZED: &str = "Unauthorized";
pub const FORBIDDEN: &str = "Forbidden";
// 404
pub const NOT_FOUND: &str = "NotFound";
pub const INSTANCE_NOT_FOUND: &str = "InstanceNotFound";
pub const ROUTE_TABLE_NOT_FOUND: &str = "RouteTableNotFound";
pub const ROUTE_NOT_FOUND: &str = "RouteNotFound";
pub const LOAD_BALANCER_NOT_FOUND: &str = "LoadBalancerNotFound";
pub const QUOTA_NOT_FOUND: &str = "QuotaNotFound";
pub const FAULT_NOT_FOUND: &str = "FaultNotFound";
pub const HANG_NOT_FOUND: &str = "HangNotFound";
pub const RATE_LIMIT_PRESET_NOT_FOUND: &str = "RateLimitPresetNotFound";
pub const ACCOUNT_NOT_FOUND: &str = "AccountNotFound";
pub const SECURITY_GROUP_NOT_FOUND: &str = "SecurityGroupNotFound";
pub const SECURITY_GROUP_RULE_NOT_FOUND: &str = "SecurityGroupRuleNotFound";
pub const ROUTE_TABLE_ASSOCIATION_NOT_FOUND: &str = "RouteTableAssociationNotFound";
// 405 / 408 / 413 / 415 / 429
pub const METHOD_NOT_ALLOWED: &str = "MethodNotAllowed";
pub const PAYLOAD_TOO_LARGE: &str = "PayloadTooLarge";
pub const REQUEST_TIMEOUT: &str = "RequestTimeout";
pub const UNSUPPORTED_MEDIA_TYPE: &str = "UnsupportedMediaType";
pub const TOO_MANY_STREAMS: &str = "TooManyStreams";
// 409
pub const INSTANCE_NAME_IN_USE: &str = "InstanceNameInUse";
pub const INCORRECT_INSTANCE_STATE: &str = "IncorrectInstanceState";
pub const ADDRESS_IN_USE: &str = "AddressInUse";
pub const ROUTE_ALREADY_EXISTS: &str = "RouteAlreadyExists";
pub const ROUTE_TABLE_ALREADY_EXISTS: &str = "RouteTableAlreadyExists";
/// A zone's subnet associated with a route table already.
pub const ZONE_ALREADY_ASSOCIATED: &str = "ZoneAlreadyAssociated";
pub const LOAD_BALANCER_ALREADY_EXISTS: &str = "LoadBalancerAlreadyExists";
pub const INCORRECT_LOAD_BALANCER_STATE: &str = "IncorrectLoadBalancerState";
pub const IDEMPOTENCY_KEY_REUSED: &str = "IdempotencyKeyReused";
pub const SNAPSHOT_EXISTS: &str = "SnapshotExists";
pub const DEPENDENCY_VIOLATION: &str = "DependencyViolation";
pub const SECURITY_GROUP_ALREADY_EXISTS: &str = "SecurityGroupAlreadyExists";
pub const SECURITY_GROUP_RULE_ALREADY_EXISTS: &str = "SecurityGroupRuleAlreadyExists";
/// A resource the cloud keeps for itself (a VPC's default security group).
pub const CANNOT_DELETE: &str = "CannotDelete";
pub const FAULT_EXISTS: &str = "FaultExists";
pub const ACCOUNT_ALREADY_EXISTS: &str = "AccountAlreadyExists";
pub const ACCOUNT_LEASED: &str = "AccountLeased";
pub const NO_FREE_ACCOUNT: &str = "NoFreeAccount";
pub const NOT_SPOT: &str = "NotSpotInstance";
// 422: quotas (each names the quota it hit)
pub const INSTANCE_LIMIT_EXCEEDED: &str = "InstanceLimitExceeded";
pub const LOAD_BALANCER_LIMIT_EXCEEDED: &str = "LoadBalancerLimitExceeded";
pub const LISTENER_LIMIT_EXCEEDED: &str = "ListenerLimitExceeded";
/// Too many backends on one load balancer: ELB's code, which cloud providers match on.
pub const TOO_MANY_TARGETS: &str = "TooManyTargets";
pub const ROUTE_LIMIT_EXCEEDED: &str = "RouteLimitExceeded";
pub const ADDRESS_LIMIT_EXCEEDED: &str = "AddressLimitExceeded";
pub const SOURCE_RANGE_LIMIT_EXCEEDED: &str = "SourceRangeLimitExceeded";
/// EC2's own code: the native API has no security groups to refuse otherwise.
pub const RULES_PER_SECURITY_GROUP_LIMIT_EXCEEDED: &str = "RulesPerSecurityGroupLimitExceeded";
pub const ACCOUNT_LIMIT_EXCEEDED: &str = "AccountLimitExceeded";
/// More tags on one resource than it may carry (`limits::TAGS_MAX`): EC2's code.
pub const TAG_LIMIT_EXCEEDED: &str = "TagLimitExceeded";
pub const INSUFFICIENT_ADDRESS_CAPACITY: &str = "InsufficientAddressCapacity";
// 5xx
pub const INTERNAL_ERROR: &str = "InternalError";
pub const SERVICE_UNAVAILABLE: &str = "ServiceUnavailable";
pub const REQUEST_LIMIT_EXCEEDED: &str = "RequestLimitExceeded";

/// Throttling codes clouds answer with a status that otherwise means a bad request (ELB's 400 `Throttling`,
/// `ThrottlingException` in the SDKs; GCP's 403 `rateLimitExceeded`, `userRateLimitExceeded` per user): the
/// call was refused before it ran, as a 429's was.
pub const THROTTLES: [&str; 4] = ["Throttling", "ThrottlingException", "rateLimitExceeded", "userRateLimitExceeded"];

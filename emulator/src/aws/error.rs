//! The AWS face's errors: AWS's code, message and HTTP status. The one place the cloud's errors
//! (`crate::error::ApiError`) and the face's own refusals (a signature, a parameter) become AWS's codes.

use std::borrow::Cow;

use axum::http::StatusCode;
use fakecloud_api::{RateLimitPreset, codes};

use super::api::Api;
use super::sigv4::Refusal;
use crate::error::{ApiError, Kind};
use crate::faults::quota_refusal;
use crate::store::elbv2::code as elbv2_codes;

/// An error as an AWS service answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsError {
    pub status: StatusCode,
    pub code: Cow<'static, str>,
    pub message: String,
}

pub type Result<T, E = AwsError> = std::result::Result<T, E>;

impl AwsError {
    pub fn new(status: StatusCode, code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self { status, code: code.into(), message: message.into() }
    }

    /// A client error: EC2 answers them all 400, whatever the code.
    pub fn client(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn invalid_value(message: impl Into<String>) -> Self {
        Self::client("InvalidParameterValue", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }
}

/// What EC2 answers a credential or signature it does not accept (its words: boto3 users search for them).
const NOT_VALIDATED: &str = "AWS was not able to validate the provided access credentials";

impl From<Refusal> for AwsError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Missing => Self::new(
                StatusCode::UNAUTHORIZED,
                "MissingAuthenticationToken",
                "The request must contain a valid (registered) AWS access key ID: sign it with AWS Signature Version 4 \
                 (the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY lines of fakecloud's credentials file)",
            ),
            Refusal::Incomplete(why) => Self::client("IncompleteSignature", why),
            Refusal::Expired(why) => Self::client("RequestExpired", why),
            // Told apart in the message only, as EC2 does: the code is AuthFailure either way.
            Refusal::UnknownKey => Self::new(StatusCode::UNAUTHORIZED, "AuthFailure", NOT_VALIDATED),
            Refusal::Scope(why) => {
                Self::new(StatusCode::UNAUTHORIZED, "AuthFailure", format!("{NOT_VALIDATED}: {why}"))
            }
            Refusal::Mismatch => Self::new(StatusCode::UNAUTHORIZED, "AuthFailure", NOT_VALIDATED),
        }
    }
}

impl AwsError {
    /// The cloud's error `e` (a store's, or a fault's) as `api` answers it: each API has its own codes for the
    /// cloud's kinds of error (a throttled call is EC2's `RequestLimitExceeded` 503 but Elastic Load Balancing's
    /// `Throttling` 400).
    pub fn of(e: ApiError, api: Api) -> Self {
        let (status, code): (StatusCode, Cow<'static, str>) = match api {
            Api::Ec2 => ec2(&e),
            Api::Elb => elb(&e, false),
            Api::Elbv2 => elb(&e, true),
        };
        Self::new(status, code, e.message)
    }
}

/// What a status a fault chose (a rule's, a rate limit's) stands for, so that an AWS SDK treats the answer as the
/// native API's client treats the native one: a 429, or the native throttling code whatever its status, is
/// throttling; a 503 the cloud unavailable. Other statuses keep their own meaning (see [`ec2`]).
fn kind_of(e: &ApiError) -> Kind {
    match e.kind {
        Kind::Status(_) if e.code == codes::REQUEST_LIMIT_EXCEEDED => Kind::Throttled,
        Kind::Status(429) => Kind::Throttled,
        Kind::Status(503) => Kind::Unavailable,
        kind => kind,
    }
}

/// EC2's status and code for the cloud's error `e`: its kinds as EC2's codes (EC2 answers client errors 400,
/// throttling and unavailability 503), the native code where EC2 has a finer one.
///
/// What the SDKs make of them (botocore's standard retryer, `botocore/retries/standard.py`; aws-sdk-go-v2's,
/// `aws/retry/standard.go`): 500, 502, 503 and 504 are retried whatever the code; `RequestLimitExceeded` is a
/// throttling code to both (botocore's legacy `_retry.json` names it for EC2 with its 503), retried with the
/// throttling backoff; any other 4xx is not retried. So a fault's 5xx keeps its status; its 4xx is a client
/// error, 400 with the fault's own code, as EC2 answers one.
fn ec2(e: &ApiError) -> (StatusCode, Cow<'static, str>) {
    let fixed = |status: StatusCode, code: &'static str| (status, Cow::Borrowed(code));
    // A quota is refused with AWS's own code for it (`RouteLimitExceeded`, ...), as the aws-ec2 preset answers
    // it natively: on the AWS face, whatever preset is installed.
    if let (Kind::Exceeded, Some(quota)) = (e.kind, e.quota) {
        let (status, code) = quota_refusal(RateLimitPreset::AwsEc2, quota);
        return fixed(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), code);
    }
    match (kind_of(e), e.code.as_ref()) {
        (Kind::NotFound, codes::INSTANCE_NOT_FOUND) => fixed(StatusCode::BAD_REQUEST, "InvalidInstanceID.NotFound"),
        (Kind::NotFound, codes::ROUTE_TABLE_NOT_FOUND) => {
            fixed(StatusCode::BAD_REQUEST, "InvalidRouteTableID.NotFound")
        }
        (Kind::NotFound, codes::ROUTE_NOT_FOUND) => fixed(StatusCode::BAD_REQUEST, "InvalidRoute.NotFound"),
        (Kind::NotFound, codes::SECURITY_GROUP_NOT_FOUND) => fixed(StatusCode::BAD_REQUEST, "InvalidGroup.NotFound"),
        (Kind::NotFound, codes::SECURITY_GROUP_RULE_NOT_FOUND) => {
            fixed(StatusCode::BAD_REQUEST, "InvalidPermission.NotFound")
        }
        (Kind::Conflict, codes::SECURITY_GROUP_ALREADY_EXISTS) => {
            fixed(StatusCode::BAD_REQUEST, "InvalidGroup.Duplicate")
        }
        (Kind::Conflict, codes::SECURITY_GROUP_RULE_ALREADY_EXISTS) => {
            fixed(StatusCode::BAD_REQUEST, "InvalidPermission.Duplicate")
        }
        (Kind::Conflict, codes::CANNOT_DELETE) => fixed(StatusCode::BAD_REQUEST, "CannotDelete"),
        // A route's target that does not exist, or no longer does (terminated).
        (Kind::Invalid, codes::INVALID_ROUTE_TARGET) => fixed(StatusCode::BAD_REQUEST, "InvalidInstanceID.NotFound"),
        (Kind::Conflict, codes::INCORRECT_INSTANCE_STATE) => fixed(StatusCode::BAD_REQUEST, "IncorrectInstanceState"),
        (Kind::Conflict, codes::ROUTE_ALREADY_EXISTS) => fixed(StatusCode::BAD_REQUEST, "RouteAlreadyExists"),
        (Kind::Conflict, codes::IDEMPOTENCY_KEY_REUSED) => {
            fixed(StatusCode::BAD_REQUEST, "IdempotentParameterMismatch")
        }
        (Kind::Conflict, codes::DEPENDENCY_VIOLATION) => fixed(StatusCode::BAD_REQUEST, "DependencyViolation"),
        (Kind::Exceeded, codes::TAG_LIMIT_EXCEEDED) => fixed(StatusCode::BAD_REQUEST, "TagLimitExceeded"),
        (Kind::Exceeded, codes::INSUFFICIENT_ADDRESS_CAPACITY) => {
            fixed(StatusCode::BAD_REQUEST, "InsufficientFreeAddressesInSubnet")
        }
        (Kind::Invalid | Kind::NotFound, _) => fixed(StatusCode::BAD_REQUEST, "InvalidParameterValue"),
        (Kind::Conflict, _) => fixed(StatusCode::BAD_REQUEST, "IncorrectState"),
        // A quota's own code comes above; an excess without one.
        (Kind::Exceeded, _) => fixed(StatusCode::BAD_REQUEST, "ResourceLimitExceeded"),
        // EC2's throttle (its throttling guide: "you get the RequestLimitExceeded error code").
        (Kind::Throttled, _) => fixed(StatusCode::SERVICE_UNAVAILABLE, "RequestLimitExceeded"),
        (Kind::Unavailable, _) => fixed(StatusCode::SERVICE_UNAVAILABLE, "Unavailable"),
        (Kind::Status(401), _) => fixed(StatusCode::UNAUTHORIZED, "AuthFailure"),
        (Kind::Status(408), _) => fixed(StatusCode::REQUEST_TIMEOUT, "RequestTimeout"),
        (Kind::Status(s), code) if (400..500).contains(&s) => (StatusCode::BAD_REQUEST, Cow::Owned(code.to_string())),
        (Kind::Status(s), _) => {
            fixed(StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), "InternalError")
        }
        (Kind::Internal, _) => fixed(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    }
}

/// Elastic Load Balancing's status and code for the cloud's error `e`, classic's (`v2` false) or ELBv2's. Both
/// throttle with 400 `Throttling` (the ELB throttling guide), which botocore's standard retryer
/// (`botocore/retries/standard.py`) and aws-sdk-go-v2's (`aws/retry/standard.go`) take for throttling; the cloud
/// unavailable is 503 `ServiceUnavailable`, a bug 500 `InternalFailure`, both retried. Their client errors are
/// 400 (botocore's models), but classic's `InvalidConfigurationRequest`, 409; ELBv2's store errors carry its own
/// codes (`store::elbv2::code`).
fn elb(e: &ApiError, v2: bool) -> (StatusCode, Cow<'static, str>) {
    let fixed = |status: StatusCode, code: &'static str| (status, Cow::Borrowed(code));
    if let (Kind::Exceeded, Some(quota)) = (e.kind, e.quota) {
        let (status, code) = quota_refusal(RateLimitPreset::AwsElb, quota);
        return fixed(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), code);
    }
    match (kind_of(e), e.code.as_ref()) {
        (Kind::NotFound, codes::LOAD_BALANCER_NOT_FOUND) => fixed(StatusCode::BAD_REQUEST, "LoadBalancerNotFound"),
        (Kind::Conflict, codes::LOAD_BALANCER_ALREADY_EXISTS) => {
            fixed(StatusCode::BAD_REQUEST, "DuplicateLoadBalancerName")
        }
        (Kind::NotFound, codes::SECURITY_GROUP_NOT_FOUND) => fixed(StatusCode::BAD_REQUEST, "InvalidSecurityGroup"),
        (Kind::Exceeded, codes::TAG_LIMIT_EXCEEDED) => fixed(StatusCode::BAD_REQUEST, "TooManyTags"),
        // Classic's: an instance that does not exist, or cannot be registered (not running); ELBv2's targets.
        (_, codes::INVALID_TARGET) if v2 => fixed(StatusCode::BAD_REQUEST, "InvalidTarget"),
        (Kind::Invalid, codes::INVALID_TARGET) | (Kind::NotFound, codes::INSTANCE_NOT_FOUND) if !v2 => {
            fixed(StatusCode::BAD_REQUEST, "InvalidInstance")
        }
        // Classic's: the scheme's pool has no address left.
        (Kind::Exceeded, codes::INSUFFICIENT_ADDRESS_CAPACITY) if !v2 => {
            fixed(StatusCode::BAD_REQUEST, "InvalidSubnet")
        }
        (Kind::Conflict, codes::INCORRECT_LOAD_BALANCER_STATE) if v2 => {
            fixed(StatusCode::BAD_REQUEST, "OperationNotPermitted")
        }
        (Kind::Invalid | Kind::NotFound | Kind::Conflict, code) if v2 && elbv2_codes::ALL.contains(&code) => {
            (StatusCode::BAD_REQUEST, Cow::Owned(code.to_string()))
        }
        (Kind::Invalid | Kind::NotFound, _) => fixed(StatusCode::BAD_REQUEST, "ValidationError"),
        (Kind::Conflict, _) if v2 => fixed(StatusCode::BAD_REQUEST, "OperationNotPermitted"),
        (Kind::Conflict, _) => fixed(StatusCode::CONFLICT, "InvalidConfigurationRequest"),
        (Kind::Exceeded, _) if v2 => fixed(StatusCode::BAD_REQUEST, "InvalidConfigurationRequest"),
        (Kind::Exceeded, _) => fixed(StatusCode::BAD_REQUEST, "LimitExceeded"),
        (Kind::Throttled, _) => fixed(StatusCode::BAD_REQUEST, "Throttling"),
        (Kind::Unavailable, _) => fixed(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        (Kind::Status(401), _) if v2 => fixed(StatusCode::FORBIDDEN, "InvalidClientTokenId"),
        (Kind::Status(401), _) => fixed(StatusCode::UNAUTHORIZED, "AuthFailure"),
        (Kind::Status(408), _) => fixed(StatusCode::REQUEST_TIMEOUT, "RequestTimeout"),
        (Kind::Status(s), code) if (400..500).contains(&s) => (StatusCode::BAD_REQUEST, Cow::Owned(code.to_string())),
        (Kind::Status(s), _) => {
            fixed(StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), "InternalFailure")
        }
        (Kind::Internal, _) => fixed(StatusCode::INTERNAL_SERVER_ERROR, "InternalFailure"),
    }
}

/// EC2's, the API of every call the face answers so far (`AwsError::of` names the API).
impl From<ApiError> for AwsError {
    fn from(e: ApiError) -> Self {
        Self::of(e, Api::Ec2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clouds_errors_get_ec2s_codes() {
        let not_found = ApiError::not_found(codes::INSTANCE_NOT_FOUND, "instance i-1 does not exist");
        assert_eq!(AwsError::from(not_found).code, "InvalidInstanceID.NotFound");
        let busy = AwsError::from(ApiError::new(Kind::Unavailable, codes::SERVICE_UNAVAILABLE, "busy"));
        assert_eq!((busy.status, busy.code.as_ref()), (StatusCode::SERVICE_UNAVAILABLE, "Unavailable"));
        let bug = AwsError::from(ApiError::internal("a bug"));
        assert_eq!((bug.status, bug.code.as_ref()), (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"));
        let routes = ApiError::quota_exceeded(fakecloud_api::QuotaName::RoutesPerRouteTable, 50, "adding a route");
        assert_eq!(AwsError::from(routes).code, "RouteLimitExceeded");
        let instances = ApiError::quota_exceeded(fakecloud_api::QuotaName::Instances, 3, "launching 4 instances");
        assert_eq!(AwsError::from(instances).code, "InstanceLimitExceeded");
        let rules = ApiError::quota_exceeded(fakecloud_api::QuotaName::RulesPerSecurityGroup, 60, "adding a rule");
        assert_eq!(AwsError::from(rules).code, "RulesPerSecurityGroupLimitExceeded");
        let group = ApiError::not_found(codes::SECURITY_GROUP_NOT_FOUND, "no sg-1");
        assert_eq!(AwsError::from(group).code, "InvalidGroup.NotFound");
        let twice = ApiError::conflict(codes::SECURITY_GROUP_RULE_ALREADY_EXISTS, "the rule exists");
        assert_eq!(AwsError::from(twice).code, "InvalidPermission.Duplicate");
        let reused = ApiError::conflict(codes::IDEMPOTENCY_KEY_REUSED, "the token was used for another request");
        assert_eq!(AwsError::from(reused).code, "IdempotentParameterMismatch");
        // A fault's status and code, as an SDK should take them: throttling, unavailable, a client error kept.
        let injected = |status: u16, code: &'static str| {
            let e = AwsError::of(ApiError::new(Kind::Status(status), code, "injected"), Api::Ec2);
            (e.status.as_u16(), e.code.into_owned())
        };
        assert_eq!(injected(429, "TooManyRequests"), (503, "RequestLimitExceeded".into()));
        assert_eq!(injected(400, codes::REQUEST_LIMIT_EXCEEDED), (503, "RequestLimitExceeded".into()));
        assert_eq!(injected(503, "ServiceUnavailable"), (503, "Unavailable".into()));
        assert_eq!(injected(500, "Oops"), (500, "InternalError".into()));
        assert_eq!(injected(504, "GatewayTimeout"), (504, "InternalError".into()));
        assert_eq!(injected(409, "DependencyViolation"), (400, "DependencyViolation".into()));
        let routes = ApiError::quota_exceeded(fakecloud_api::QuotaName::RoutesPerRouteTable, 50, "a route");
        let routes = AwsError::from(routes);
        assert_eq!((routes.status, routes.code.as_ref()), (StatusCode::BAD_REQUEST, "RouteLimitExceeded"));
        let limited = AwsError::from(ApiError::new(Kind::Throttled, "SlowDown", "a rate limit"));
        assert_eq!((limited.status, limited.code.as_ref()), (StatusCode::SERVICE_UNAVAILABLE, "RequestLimitExceeded"));
        // Classic ELB's words for the same errors.
        let elb = |e: ApiError| {
            let e = AwsError::of(e, Api::Elb);
            (e.status.as_u16(), e.code.into_owned())
        };
        let missing = ApiError::not_found(codes::LOAD_BALANCER_NOT_FOUND, "no load balancer x");
        assert_eq!(elb(missing), (400, "LoadBalancerNotFound".into()));
        let taken = ApiError::conflict(codes::LOAD_BALANCER_ALREADY_EXISTS, "name x is in use");
        assert_eq!(elb(taken), (400, "DuplicateLoadBalancerName".into()));
        assert_eq!(elb(ApiError::bad_request(codes::INVALID_TARGET, "no i-1")), (400, "InvalidInstance".into()));
        let lbs = ApiError::quota_exceeded(fakecloud_api::QuotaName::LoadBalancers, 1, "a load balancer");
        assert_eq!(elb(lbs), (400, "TooManyLoadBalancers".into()));
        let listeners = ApiError::quota_exceeded(fakecloud_api::QuotaName::ListenersPerLoadBalancer, 1, "a listener");
        assert_eq!(elb(listeners), (400, "TooManyListeners".into()));
        let tags = ApiError::new(Kind::Exceeded, codes::TAG_LIMIT_EXCEEDED, "51 tags");
        assert_eq!(elb(tags), (400, "TooManyTags".into()));
        assert_eq!(elb(ApiError::new(Kind::Throttled, "SlowDown", "a rate limit")), (400, "Throttling".into()));
        assert_eq!(elb(ApiError::new(Kind::Status(429), "TooManyRequests", "a rule")), (400, "Throttling".into()));
        assert_eq!(elb(ApiError::new(Kind::Status(503), "Unavailable", "a rule")), (503, "ServiceUnavailable".into()));
        assert_eq!(elb(ApiError::new(Kind::Unavailable, "Busy", "busy")), (503, "ServiceUnavailable".into()));
        assert_eq!(elb(ApiError::internal("a bug")), (500, "InternalFailure".into()));
        let state = ApiError::conflict(codes::INCORRECT_LOAD_BALANCER_STATE, "being deleted");
        assert_eq!(elb(state), (409, "InvalidConfigurationRequest".into()));
        let bad = AwsError::from(Refusal::Mismatch);
        assert_eq!(
            (bad.status, bad.code.as_ref(), bad.message.as_str()),
            (StatusCode::UNAUTHORIZED, "AuthFailure", NOT_VALIDATED)
        );
    }

    #[test]
    fn the_clouds_errors_get_elbv2s_codes() {
        let elb = |e: ApiError| {
            let e = AwsError::of(e, Api::Elbv2);
            (e.status.as_u16(), e.code.into_owned())
        };
        assert_eq!(elb(ApiError::new(Kind::Throttled, "SlowDown", "a rate limit")), (400, "Throttling".into()));
        assert_eq!(elb(ApiError::new(Kind::Status(429), "TooManyRequests", "a rule")), (400, "Throttling".into()));
        assert_eq!(elb(ApiError::new(Kind::Unavailable, "x", "busy")), (503, "ServiceUnavailable".into()));
        assert_eq!(elb(ApiError::new(Kind::Status(503), "x", "an outage")), (503, "ServiceUnavailable".into()));
        assert_eq!(elb(ApiError::internal("a bug")), (500, "InternalFailure".into()));
        let listeners = ApiError::quota_exceeded(fakecloud_api::QuotaName::ListenersPerLoadBalancer, 5, "x");
        assert_eq!(elb(listeners), (400, "TooManyListeners".into()));
        let targets = ApiError::quota_exceeded(fakecloud_api::QuotaName::BackendsPerLoadBalancer, 5, "x");
        assert_eq!(elb(targets), (400, "TooManyTargets".into()));
        let lbs = ApiError::quota_exceeded(fakecloud_api::QuotaName::LoadBalancers, 5, "x");
        assert_eq!(elb(lbs), (400, "TooManyLoadBalancers".into()));
        let taken = ApiError::conflict(codes::LOAD_BALANCER_ALREADY_EXISTS, "in use");
        assert_eq!(elb(taken), (400, "DuplicateLoadBalancerName".into()));
        let gone = ApiError::not_found(codes::LOAD_BALANCER_NOT_FOUND, "gone");
        assert_eq!(elb(gone), (400, "LoadBalancerNotFound".into()));
        let in_use = ApiError::conflict(elbv2_codes::RESOURCE_IN_USE, "in use");
        assert_eq!(elb(in_use), (400, "ResourceInUse".into()));
        let tags = ApiError::new(Kind::Exceeded, codes::TAG_LIMIT_EXCEEDED, "51 tags");
        assert_eq!(elb(tags), (400, "TooManyTags".into()));
    }
}

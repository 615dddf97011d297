//! The AWS face's errors: AWS's code, message and HTTP status. The one place the cloud's errors
//! (`crate::error::ApiError`) and the face's own refusals (a signature, a parameter) become AWS's codes.

use std::borrow::Cow;

use axum::http::StatusCode;
use fakecloud_api::{RateLimitPreset, codes};

use super::sigv4::Refusal;
use crate::error::{ApiError, Kind};
use crate::faults::quota_refusal;

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

/// The cloud's errors as EC2's: its kinds as EC2's codes (EC2 answers client errors 400, throttling and
/// unavailability 503), the native code where EC2 has a finer one, a quota's refusal as EC2 refuses it (the
/// fault engine's table of AWS's quota codes, which a preset's refusals on the native API use too).
impl From<ApiError> for AwsError {
    fn from(e: ApiError) -> Self {
        let (status, code): (StatusCode, &'static str) = match (e.kind, e.code.as_ref()) {
            (Kind::NotFound, codes::INSTANCE_NOT_FOUND) => (StatusCode::BAD_REQUEST, "InvalidInstanceID.NotFound"),
            (Kind::NotFound, codes::ROUTE_TABLE_NOT_FOUND) => (StatusCode::BAD_REQUEST, "InvalidRouteTableID.NotFound"),
            (Kind::NotFound, codes::ROUTE_NOT_FOUND) => (StatusCode::BAD_REQUEST, "InvalidRoute.NotFound"),
            // A route's target that does not exist, or no longer does (terminated).
            (Kind::Invalid, codes::INVALID_ROUTE_TARGET) => (StatusCode::BAD_REQUEST, "InvalidInstanceID.NotFound"),
            (Kind::Conflict, codes::INCORRECT_INSTANCE_STATE) => (StatusCode::BAD_REQUEST, "IncorrectInstanceState"),
            (Kind::Conflict, codes::ROUTE_ALREADY_EXISTS) => (StatusCode::BAD_REQUEST, "RouteAlreadyExists"),
            (Kind::Conflict, codes::IDEMPOTENCY_KEY_REUSED) => (StatusCode::BAD_REQUEST, "IdempotentParameterMismatch"),
            (Kind::Conflict, codes::DEPENDENCY_VIOLATION) => (StatusCode::BAD_REQUEST, "DependencyViolation"),
            (Kind::Exceeded, codes::TAG_LIMIT_EXCEEDED) => (StatusCode::BAD_REQUEST, "TagLimitExceeded"),
            (Kind::Exceeded, codes::INSUFFICIENT_ADDRESS_CAPACITY) => {
                (StatusCode::BAD_REQUEST, "InsufficientFreeAddressesInSubnet")
            }
            (Kind::Invalid | Kind::NotFound, _) => (StatusCode::BAD_REQUEST, "InvalidParameterValue"),
            (Kind::Conflict, _) => (StatusCode::BAD_REQUEST, "IncorrectState"),
            (Kind::Exceeded, _) => match e.quota {
                Some(quota) => (StatusCode::BAD_REQUEST, quota_refusal(RateLimitPreset::AwsEc2, quota).1),
                None => (StatusCode::BAD_REQUEST, "ResourceLimitExceeded"),
            },
            (Kind::Throttled, _) => (StatusCode::SERVICE_UNAVAILABLE, "RequestLimitExceeded"),
            (Kind::Unavailable, _) => (StatusCode::SERVICE_UNAVAILABLE, "Unavailable"),
            (Kind::Status(401), _) => (StatusCode::UNAUTHORIZED, "AuthFailure"),
            (Kind::Status(408), _) => (StatusCode::REQUEST_TIMEOUT, "RequestTimeout"),
            (Kind::Internal | Kind::Status(_), _) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
        };
        Self::new(status, code, e.message)
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
        let reused = ApiError::conflict(codes::IDEMPOTENCY_KEY_REUSED, "the token was used for another request");
        assert_eq!(AwsError::from(reused).code, "IdempotentParameterMismatch");
        let bad = AwsError::from(Refusal::Mismatch);
        assert_eq!(
            (bad.status, bad.code.as_ref(), bad.message.as_str()),
            (StatusCode::UNAUTHORIZED, "AuthFailure", NOT_VALIDATED)
        );
    }
}

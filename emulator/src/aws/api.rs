//! The AWS APIs the face answers, one module each, told apart as AWS's endpoints tell them: by the service a
//! request is signed for (its credential scope) and, where two APIs share one (Elastic Load Balancing's two
//! versions), by its `Version`. What each API's table says of an action (its name, the native operation it
//! stands for, whether it reads) is asked here, so that the face's one path serves them all.

use super::{ec2, elb};

/// An AWS API answered by the face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Ec2,
    /// Classic Elastic Load Balancing (2012-06-01).
    Elb,
}

/// How an API writes its answers (the Query protocol has two dialects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// EC2's: `<XResponse><requestId/>…`, lists of `<item>`, errors as `<Response><Errors><Error>…`.
    Ec2,
    /// The other Query APIs' (Elastic Load Balancing, IAM, STS): `<XResponse><XResult>…</XResult>
    /// <ResponseMetadata><RequestId/>…`, lists of `<member>`, errors as `<ErrorResponse><Error><Type>…`.
    Query,
}

impl Api {
    pub const ALL: [Api; 2] = [Api::Ec2, Api::Elb];

    /// The service name its requests are signed for.
    pub fn service(self) -> &'static str {
        match self {
            Api::Ec2 => ec2::SERVICE,
            Api::Elb => elb::SERVICE,
        }
    }

    /// Its API version: what the SDKs send as `Version`.
    pub fn version(self) -> &'static str {
        match self {
            Api::Ec2 => ec2::VERSION,
            Api::Elb => elb::VERSION,
        }
    }

    /// The XML namespace of its answers.
    pub fn xmlns(self) -> &'static str {
        match self {
            Api::Ec2 => ec2::XMLNS,
            Api::Elb => elb::XMLNS,
        }
    }

    pub fn style(self) -> Style {
        match self {
            Api::Ec2 => Style::Ec2,
            Api::Elb => Style::Query,
        }
    }

    /// `action` if this API answers it, as a name that outlives the request.
    pub fn action(self, action: &str) -> Option<&'static str> {
        match self {
            Api::Ec2 => ec2::action(action),
            Api::Elb => elb::action(action),
        }
    }

    /// The native operation `action` stands for, for the fault engine.
    pub fn native(self, action: &str) -> Option<&'static str> {
        match self {
            Api::Ec2 => ec2::native(action),
            Api::Elb => elb::native(action),
        }
    }

    /// Whether `action` only reads (a rate limit of scope `reads` counts it).
    pub fn reads(self, action: &str) -> bool {
        match self {
            Api::Ec2 => ec2::reads(action),
            Api::Elb => elb::reads(action),
        }
    }

    /// The names of its actions, which fault rules and rate limits may use beside the native operations'.
    pub fn names(self) -> Vec<&'static str> {
        match self {
            Api::Ec2 => ec2::names().collect(),
            Api::Elb => elb::names().collect(),
        }
    }

    /// Every action it answers.
    #[cfg(test)]
    fn actions(self) -> &'static [&'static str] {
        match self {
            Api::Ec2 => ec2::ACTIONS,
            Api::Elb => elb::ACTIONS,
        }
    }

    /// The API a call signed for `service` is to: the one that signs as `service` with the call's `version`, or,
    /// failing that, the first that signs as `service`, which then refuses the version in its own words. `None`
    /// for a service the face does not answer.
    pub fn of(service: &str, version: Option<&str>) -> Option<Api> {
        let mut signing = Self::ALL.into_iter().filter(|api| api.service() == service).peekable();
        let first = signing.peek().copied();
        signing.find(|api| Some(api.version()) == version).or(first)
    }

    /// The service names requests may be signed for.
    pub fn services() -> Vec<&'static str> {
        let mut services = Vec::new();
        for service in Self::ALL.map(Api::service) {
            if !services.contains(&service) {
                services.push(service);
            }
        }
        services
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every action an API answers has one row in its table (`ec2/operations.rs`, `elb/operations.rs`), naming
    /// one of the native API's operations or none; the table names no other action.
    #[test]
    fn every_action_stands_for_one_native_operation() {
        let natives = crate::http::operation_names();
        for api in Api::ALL {
            let names = api.names();
            for action in api.actions() {
                assert_eq!(names.iter().filter(|a| *a == action).count(), 1, "{action} has one row in {api:?}'s table");
                if let Some(native) = api.native(action) {
                    assert!(
                        natives.iter().any(|n| n == native),
                        "{action} stands for {native}, not a native operation"
                    );
                }
            }
            for action in names {
                assert!(api.actions().contains(&action), "{action} is in {api:?}'s table but not answered");
            }
        }
        assert!(Api::Ec2.reads("DescribeInstances") && !Api::Ec2.reads("RunInstances"));
        assert!(Api::Elb.reads("DescribeInstanceHealth") && !Api::Elb.reads("AddTags"));
    }

    #[test]
    fn a_call_is_to_the_api_its_signature_and_version_name() {
        assert_eq!(Api::of("ec2", Some(ec2::VERSION)), Some(Api::Ec2));
        // EC2 refuses a version it does not answer itself.
        assert_eq!(Api::of("ec2", Some("2010-01-01")), Some(Api::Ec2));
        assert_eq!(Api::of("ec2", None), Some(Api::Ec2));
        assert_eq!(Api::of("s3", Some(ec2::VERSION)), None);
        assert_eq!(Api::of("elasticloadbalancing", Some(elb::VERSION)), Some(Api::Elb));
        assert_eq!(Api::services(), ["ec2", "elasticloadbalancing"]);
    }
}

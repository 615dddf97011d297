//! What each AWS API's table says of an action: whether the API answers it, the native operation it stands for
//! (for the fault engine) and whether it only reads. Each API keeps its own table (`ec2/operations.rs`,
//! `elb/operations.rs`, `elbv2/operations.rs`); this is where the face's one path asks them.

use super::api::Api;
use super::{ec2, elb, elbv2};

/// Every action `api` answers.
fn answered(api: Api) -> &'static [&'static str] {
    match api {
        Api::Ec2 => ec2::ACTIONS,
        Api::Elb => elb::ACTIONS,
        Api::Elbv2 => elbv2::ACTIONS,
    }
}

/// Each of `api`'s actions and the native operation it stands for, if any.
fn stands_for(api: Api) -> &'static [(&'static str, Option<&'static str>)] {
    match api {
        Api::Ec2 => ec2::STANDS_FOR,
        Api::Elb => elb::STANDS_FOR,
        Api::Elbv2 => elbv2::STANDS_FOR,
    }
}

/// `action` if `api` answers it, as a name that outlives the request.
pub fn action(api: Api, action: &str) -> Option<&'static str> {
    answered(api).iter().find(|a| **a == action).copied()
}

/// The native operation `action` stands for.
pub fn native(api: Api, action: &str) -> Option<&'static str> {
    stands_for(api).iter().find(|(a, _)| *a == action).and_then(|(_, native)| *native)
}

/// Whether `action` only reads: what a rate limit of scope `reads` and the presets' read buckets count. EC2's
/// non-mutating actions are `Describe*`, `Get*`, `List*` and `Search*` (its throttling guide's classes,
/// <https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html>); Elastic Load Balancing's are its
/// `Describe*` (<https://docs.aws.amazon.com/elasticloadbalancing/latest/userguide/elb-api-throttling.html>).
pub fn reads(api: Api, action: &str) -> bool {
    let classes: &[&str] = match api {
        Api::Ec2 => &["Describe", "Get", "List", "Search"],
        Api::Elb | Api::Elbv2 => &["Describe"],
    };
    classes.iter().any(|c| action.starts_with(c))
}

/// The names of `api`'s actions, which fault rules and rate limits may use beside the native operations'.
pub fn names(api: Api) -> Vec<&'static str> {
    stands_for(api).iter().map(|(action, _)| *action).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every action an API answers has one row in its table (`ec2/operations.rs`, `elb/operations.rs`,
    /// `elbv2/operations.rs`), naming
    /// one of the native API's operations or none; the table names no other action.
    #[test]
    fn every_action_stands_for_one_native_operation() {
        let natives = crate::http::operation_names();
        for api in Api::ALL {
            let names = names(api);
            for action in answered(api) {
                assert_eq!(names.iter().filter(|a| *a == action).count(), 1, "{action} has one row in {api:?}'s table");
                if let Some(native) = native(api, action) {
                    assert!(
                        natives.iter().any(|n| n == native),
                        "{action} stands for {native}, not a native operation"
                    );
                }
            }
            for action in names {
                assert!(answered(api).contains(&action), "{action} is in {api:?}'s table but not answered");
            }
        }
        assert!(reads(Api::Ec2, "DescribeInstances") && !reads(Api::Ec2, "RunInstances"));
        assert!(reads(Api::Elb, "DescribeInstanceHealth") && !reads(Api::Elb, "AddTags"));
        assert!(reads(Api::Elbv2, "DescribeTargetHealth") && !reads(Api::Elbv2, "RegisterTargets"));
    }
}

//! What each AWS API's table says of an action: whether the API answers it, the native operation it stands for
//! (for the fault engine) and whether it only reads. Each API keeps its own table (`ec2/operations.rs`,
//! `elb/operations.rs`, `elbv2/operations.rs`); this is where the face's one path asks them.

use super::api::Api;
use super::{ec2, elb, elbv2};

/// `action` if `api` answers it, as a name that outlives the request.
pub fn action(api: Api, action: &str) -> Option<&'static str> {
    match api {
        Api::Ec2 => ec2::action(action),
        Api::Elb => elb::action(action),
        Api::Elbv2 => elbv2::action(action),
    }
}

/// The native operation `action` stands for.
pub fn native(api: Api, action: &str) -> Option<&'static str> {
    match api {
        Api::Ec2 => ec2::native(action),
        Api::Elb => elb::native(action),
        Api::Elbv2 => elbv2::native(action),
    }
}

/// Whether `action` only reads (a rate limit of scope `reads` counts it).
pub fn reads(api: Api, action: &str) -> bool {
    match api {
        Api::Ec2 => ec2::reads(action),
        Api::Elb => elb::reads(action),
        Api::Elbv2 => elbv2::reads(action),
    }
}

/// The names of `api`'s actions, which fault rules and rate limits may use beside the native operations'.
pub fn names(api: Api) -> Vec<&'static str> {
    match api {
        Api::Ec2 => ec2::names().collect(),
        Api::Elb => elb::names().collect(),
        Api::Elbv2 => elbv2::names().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every action `api` answers.
    fn answered(api: Api) -> &'static [&'static str] {
        match api {
            Api::Ec2 => ec2::ACTIONS,
            Api::Elb => elb::ACTIONS,
            Api::Elbv2 => elbv2::ACTIONS,
        }
    }

    /// Every action an API answers has one row in its table (`ec2/operations.rs`, `elb/operations.rs`), naming
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
    }
}

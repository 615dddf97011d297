//! Elastic Load Balancing's own error codes, for what the native API has no code for (`aws::error` answers
//! them as they are).

pub const DUPLICATE_TARGET_GROUP_NAME: &str = "DuplicateTargetGroupName";
pub const TARGET_GROUP_NOT_FOUND: &str = "TargetGroupNotFound";
pub const LISTENER_NOT_FOUND: &str = "ListenerNotFound";
pub const DUPLICATE_LISTENER: &str = "DuplicateListener";
pub const RESOURCE_IN_USE: &str = "ResourceInUse";
pub const INCOMPATIBLE_PROTOCOLS: &str = "IncompatibleProtocols";
pub const INVALID_CONFIGURATION_REQUEST: &str = "InvalidConfigurationRequest";
pub const OPERATION_NOT_PERMITTED: &str = "OperationNotPermitted";
pub const TARGET_GROUP_ASSOCIATION_LIMIT: &str = "TargetGroupAssociationLimit";
pub const ALL: &[&str] = &[
    DUPLICATE_TARGET_GROUP_NAME,
    TARGET_GROUP_NOT_FOUND,
    LISTENER_NOT_FOUND,
    DUPLICATE_LISTENER,
    RESOURCE_IN_USE,
    INCOMPATIBLE_PROTOCOLS,
    INVALID_CONFIGURATION_REQUEST,
    OPERATION_NOT_PERMITTED,
    TARGET_GROUP_ASSOCIATION_LIMIT,
];

//! The VPC router's integration tests, in one binary: its netlink apply step and its route loop against a real
//! kernel, in network namespaces of the tests' own.

mod netlink_netns;

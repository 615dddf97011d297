//! The emulator's integration tests, in one binary (one link instead of one per file): each module is a file of
//! tests over real HTTP against a real emulator (in process, or as a process of its own: see `common::spawn_emulator`), with a real SQLite file.

mod accounts;
mod audit_and_metrics;
mod aws;
mod aws_elb;
mod aws_elbv2;
mod aws_faults;
mod aws_security_groups;
mod body_props;
mod common;
mod connections;
mod console;
mod dataplane;
mod dns;
mod errors_and_auth;
mod fail_safe;
mod faults;
mod group_commit;
mod hangs;
mod idempotency;
mod instances;
mod ipam_props;
mod load_balancers;
mod network;
mod openapi_snapshot;
mod passthrough;
mod persistence;
mod postgres;
mod public_pool;
mod rate_limit_shapes;
mod replicas;

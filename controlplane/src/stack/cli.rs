//! The `stack` subcommands and their options.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the local stack in the background and return once its Nodes are Ready (what `make up` runs).
    ///
    /// In the run directory (.run/, or FAKECLOUD_RUN_DIR): the upstream control plane (etcd, kube-apiserver,
    /// kube-controller-manager on 127.0.0.1, in controlplane/), the emulator (`fakecloud serve`, state in
    /// fakecloud.db, tokens in fakecloud.credentials), fakecloud-ccm (HTTPS /healthz and /metrics) and the
    /// simulated kubelets with kwok (`make kwok` builds it; FAKECLOUD_KWOK names another); then instances node-a, node-b and node-c (or --nodes N) over the region's zones. Returns
    /// when their Nodes are Ready, initialized and routed by the CCM, saying how long each stage took, and prints how to
    /// use the stack; it keeps running until `stack down` (`make down`).
    ///
    /// `fakecloud` and `fakecloud-ccm` are taken from beside this binary (target/debug/ after `cargo build`),
    /// the control-plane binaries from FAKECLOUD_K8S_BIN or the cache scripts/build-control-plane.sh fills; a
    /// missing one (or kwok) is refused before anything starts.
    /// Logs: <run dir>/{stack,emulator,ccm,kubelets,kwok}.log and <run dir>/controlplane/logs/. If a step fails,
    /// everything started is stopped again and the logs are kept.
    Up(Options),
    /// Stop everything `stack up` started from the run directory and remove the files it made there.
    ///
    /// Only processes recorded in the run directory are signalled, each only while its PID still names the
    /// process that was started. Fails if a process of the run directory is still alive afterwards.
    Down {
        #[command(flatten)]
        run_dir: RunDirArg,
    },
    /// The background process `stack up` starts; it owns the components until SIGTERM.
    #[command(hide = true)]
    Supervise(Options),
}

#[derive(Debug, Clone, Args)]
pub struct RunDirArg {
    /// Directory for the stack's state, logs and credentials.
    #[arg(long = "run-dir", env = "FAKECLOUD_RUN_DIR", default_value = ".run")]
    pub path: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct Options {
    #[command(flatten)]
    pub run_dir: RunDirArg,
    /// The emulator's port on 127.0.0.1.
    #[arg(long, env = "FAKECLOUD_PORT", default_value_t = 8787)]
    pub port: u16,
    /// The CCM's HTTPS port (/healthz, /metrics) on 127.0.0.1.
    #[arg(long, env = "FAKECLOUD_CCM_PORT", default_value_t = 10258)]
    pub ccm_port: u16,
    /// The port on 127.0.0.1 where the emulator answers the cloud's names over DNS, UDP and TCP (a load balancer's
    /// DNS name, an instance's private DNS name): `dig @127.0.0.1 -p PORT NAME`.
    #[arg(long, env = "FAKECLOUD_DNS_PORT", default_value_t = 8753)]
    pub dns_port: u16,
    /// How many instances (and so Nodes) to bring up: node-a, node-b and node-c by default, node-01 ... for more
    /// (`make up NODES=N`). Created 32 at a time; the instance and route quotas are raised to fit; past 256 Nodes
    /// each gets a smaller pod CIDR. At most 8192, and no more than this machine's memory holds (refused up
    /// front with the estimate). For 1,000 and more, use release builds (`make up NODES=N PROFILE=release`).
    #[arg(long, env = "FAKECLOUD_NODES", default_value_t = super::layout::DEFAULT_NODES)]
    pub nodes: u32,
    /// Directory holding etcd, kube-apiserver, kube-controller-manager (and kubectl); default: the build cache.
    #[arg(long, env = "FAKECLOUD_K8S_BIN")]
    pub bin_dir: Option<PathBuf>,
    /// The CCM: `fakecloud` (fakecloud-ccm) or `aws` (cloud-provider-aws, unmodified, on the emulator's AWS face:
    /// `make up CCM=aws`). With `aws`, the Nodes are named by their instances' private DNS names, as kubelets on
    /// EC2 name them, and the region's subnets and main route table are tagged for cluster `fakecloud`.
    #[arg(long, value_enum, env = "FAKECLOUD_STACK_CCM", default_value_t)]
    pub ccm: StackCcm,
    /// cloud-provider-aws's binary, for `--ccm aws` (`make aws-ccm` builds it and prints its path).
    #[arg(long, env = "FAKECLOUD_AWS_CCM", value_name = "FILE")]
    pub aws_ccm: Option<PathBuf>,
    /// The AWS CLI that tags the cluster's subnets and route table, for `--ccm aws` (`make aws-clients` installs
    /// one; its bin/aws).
    #[arg(long, env = "FAKECLOUD_AWS_CLI", value_name = "FILE")]
    pub aws_cli: Option<PathBuf>,
    /// With `--ccm aws`: cloud-provider-aws's cloud config, your own instead of the one the stack writes (to try
    /// your `[Global]` options, say). Checked before anything starts, and against the cloud before the CCM
    /// starts: it must name this cloud (its region, VPC, a subnet, cluster ID `fakecloud`) and point an override
    /// for each of EC2, Elastic Load Balancing and Elastic Load Balancing v2 at the emulator, with its signing
    /// region and name. Every problem is refused at once, saying what to set (`make up CCM=aws
    /// AWS_CLOUD_CONFIG=FILE`).
    #[arg(long, env = "FAKECLOUD_AWS_CLOUD_CONFIG", value_name = "FILE")]
    pub aws_cloud_config: Option<PathBuf>,
}

/// Which CCM the stack runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StackCcm {
    #[default]
    Fakecloud,
    Aws,
}

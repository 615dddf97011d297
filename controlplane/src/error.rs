//! The launcher's error type: every variant says what happened and what to do about it,
//! because these messages are what a developer sees when `make up` or a test fails.

use std::path::PathBuf;

/// Errors from building, starting, querying or stopping the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "control-plane binaries missing from {}: {missing}. Run scripts/build-control-plane.sh to build Kubernetes {version} and etcd into that cache (or set FAKECLOUD_K8S_BIN to a directory holding kube-apiserver, kube-controller-manager and etcd)",
        .dir.display()
    )]
    BinariesMissing { dir: PathBuf, missing: String, version: String },

    #[error(
        "kwok {version} or its pod stages (pod-stages/*.yaml beside it) are not at {}: run `make kwok` (scripts/build-go-tool.sh controlplane/kwok) to build it into that cache, or set FAKECLOUD_KWOK to a kwok binary",
        .path.display()
    )]
    KwokMissing { path: PathBuf, version: String },

    #[error("cannot locate the binary cache: neither FAKECLOUD_K8S_BIN, FAKECLOUD_CACHE nor HOME is set")]
    NoCacheDir,

    #[error(
        "port {port} on 127.0.0.1, wanted for {component}, is already in use: stop whatever listens there (`ss -ltnp 'sport = :{port}'` shows it) or choose another port"
    )]
    PortInUse {
        component: &'static str,
        port: u16,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{} already runs a control plane ({running}); stop it with `fakecloud-controlplane down --run-dir {}` first",
        .run_dir.display(), .run_dir.display()
    )]
    AlreadyRunning { run_dir: PathBuf, running: String },

    #[error(
        "{} was left by a control plane that is no longer running (its logs are in {}/logs); remove it with `fakecloud-controlplane down --run-dir {}` (or start with `up --clean`) and try again",
        .run_dir.display(), .run_dir.display(), .run_dir.display()
    )]
    StaleRunDir { run_dir: PathBuf },

    #[error(
        "refusing to use {} as a run directory: it is not empty and holds no control plane of ours; pass a new or empty directory",
        .run_dir.display()
    )]
    RunDirNotEmpty { run_dir: PathBuf },

    #[error("could not start {component} ({}): {source}", .binary.display())]
    Spawn {
        component: &'static str,
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{component} exited during start ({status}); its log is {}:\n{tail}", .log.display())]
    ProcessExited { component: &'static str, status: String, log: PathBuf, tail: String },

    #[error("{component} exited unexpectedly ({status}); its log is {}:\n{tail}", .log.display())]
    ProcessDied { component: &'static str, status: String, log: PathBuf, tail: String },

    #[error(
        "{component} was not ready within {timeout:?} (last check: {last_error}); its log is {}:\n{tail}",
        .log.display()
    )]
    NotReady { component: &'static str, timeout: std::time::Duration, last_error: String, log: PathBuf, tail: String },

    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("kubeconfig {}: {source}", .path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },

    #[error("{}: {message}", .path.display())]
    StateFile { path: PathBuf, message: String },

    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),

    #[error("`{command}` {failure}")]
    AwsCli { command: String, failure: String },

    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches a human context to `io::Error`s, e.g. `.io_context(|| format!("writing {path}"))`.
pub(crate) trait IoContext<T> {
    fn io_context<F: FnOnce() -> String>(self, context: F) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn io_context<F: FnOnce() -> String>(self, context: F) -> Result<T> {
        self.map_err(|source| Error::Io { context: context(), source })
    }
}

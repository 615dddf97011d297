//! The Kubernetes client: from `--kubeconfig`, else in-cluster (else `KUBECONFIG`/`~/.kube/config`), with
//! client-go's client-side rate limit (`--kube-api-qps`, `--kube-api-burst`) in front of every request.

use std::path::{Path, PathBuf};

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::client_go::ratelimit::ThrottleLayer;

#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error("--kubeconfig {path}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    #[error("no --kubeconfig given and no in-cluster or default kubeconfig: {0}")]
    Infer(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

pub async fn kube_client(kubeconfig: Option<&Path>, qps: f32, burst: u32) -> Result<kube::Client, KubeClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let err = |reason: String| KubeClientError::Kubeconfig { path: path.to_path_buf(), reason };
            let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| err(e.to_string()))?
        }
        None => kube::Config::infer().await.map_err(|e| KubeClientError::Infer(e.to_string()))?,
    };
    Ok(ClientBuilder::try_from(config)?.with_layer(&ThrottleLayer::new(f64::from(qps), burst)).build())
}

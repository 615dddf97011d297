//! The Kubernetes clients: from `--kubeconfig`, else in-cluster (else `KUBECONFIG`/`~/.kube/config`), each with
//! client-go's client-side rate limit (`--kube-api-qps`, `--kube-api-burst`) in front of every request.
//!
//! As upstream's controller manager, every part gets a client of its own, hence a token bucket of its own
//! (`SimpleControllerClientBuilder.ClientOrDie(name)` builds a clientset per call, and client-go a rate limiter
//! per clientset): each controller, the shared informers, leader election and the manager's own events. So one
//! busy controller does not hold back another, and together they may send several times `--kube-api-qps`, as
//! upstream's do. The name goes into the User-Agent, as upstream's `AddUserAgent`, so an audit log tells them
//! apart.

use std::path::{Path, PathBuf};

use hyper::header::{HeaderValue, USER_AGENT};
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

/// Builds the clients from one configuration.
pub struct KubeClients {
    config: kube::Config,
    qps: f64,
    burst: u32,
}

impl KubeClients {
    pub async fn new(kubeconfig: Option<&Path>, qps: f32, burst: u32) -> Result<Self, KubeClientError> {
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
        Ok(Self { config, qps: f64::from(qps), burst })
    }

    /// A client with a rate limit of its own, its User-Agent ending in `name` (upstream's client names:
    /// `node-controller`, `service-controller`, `route-controller`, `shared-informers`, `leader-election`).
    pub fn client(&self, name: &str) -> Result<kube::Client, KubeClientError> {
        let mut config = self.config.clone();
        let agent = format!(
            "fakecloud-ccm/{} ({}/{}) {name}",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        );
        // Only the name comes from the caller, and the callers' names are plain words.
        if let Ok(value) = HeaderValue::from_str(&agent) {
            config.headers.push((USER_AGENT, value));
        }
        Ok(ClientBuilder::try_from(config)?.with_layer(&ThrottleLayer::new(self.qps, self.burst)).build())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Node;

    use super::*;

    /// An API server answering every Node listing with none, keeping each request's User-Agent.
    async fn api_server() -> (kube::Config, Arc<Mutex<Vec<String>>>) {
        let agents = Arc::new(Mutex::new(Vec::new()));
        let seen = agents.clone();
        let app = axum::Router::new().route(
            "/api/v1/nodes",
            axum::routing::get(move |headers: hyper::HeaderMap| async move {
                let agent = headers.get(USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default();
                seen.lock().unwrap().push(agent.to_string());
                axum::Json(serde_json::json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []}))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (kube::Config::new(url.parse().unwrap()), agents)
    }

    async fn list(client: &kube::Client) {
        kube::Api::<Node>::all(client.clone()).list(&Default::default()).await.unwrap();
    }

    #[tokio::test]
    async fn each_client_has_a_bucket_and_a_user_agent_of_its_own() {
        let (config, agents) = api_server().await;
        // A burst of one, then a request every 1,000 s.
        let clients = KubeClients { config, qps: 0.001, burst: 1 };
        let (a, b) = (clients.client("node-controller").unwrap(), clients.client("route-controller").unwrap());
        list(&a).await;
        // Would wait 1,000 s on a shared bucket; a minute is the hang detector.
        tokio::time::timeout(Duration::from_secs(60), list(&b)).await.expect("b's bucket is b's own");
        assert!(tokio::time::timeout(Duration::from_millis(200), list(&a)).await.is_err(), "a's burst is spent");
        let agents = agents.lock().unwrap().clone();
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(agents.len(), 2, "{agents:?}");
        assert!(agents[0].starts_with(&format!("fakecloud-ccm/{version} (")), "{agents:?}");
        assert!(agents[0].ends_with(") node-controller") && agents[1].ends_with(") route-controller"), "{agents:?}");
    }
}

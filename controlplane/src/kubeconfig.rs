//! Kubeconfig files for the components, the admin and ServiceAccounts.
//!
//! Credentials are embedded (`*-data`), so a kubeconfig stays valid when copied elsewhere,
//! e.g. into a Secret for a CCM pod.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;

use crate::error::{Error, Result};

/// Who a kubeconfig authenticates as.
#[derive(Debug, Clone)]
pub enum Credentials<'a> {
    /// A client certificate and its key (PEM).
    ClientCert { cert_pem: &'a str, key_pem: &'a str },
    /// A bearer token, e.g. from the TokenRequest API.
    Token(&'a str),
}

/// Renders a single-context kubeconfig for `server`, trusting `ca_pem`.
pub fn render(server: &str, ca_pem: &str, user: &str, credentials: &Credentials<'_>) -> String {
    let user_fields = match credentials {
        Credentials::ClientCert { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(cert_pem),
            STANDARD.encode(key_pem)
        ),
        // Tokens are JWTs (base64url and dots), but quote anyway: YAML must not reinterpret them.
        Credentials::Token(token) => format!("    token: \"{token}\"\n"),
    };
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: fakecloud\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n\
         - name: {user}\n  user:\n{user_fields}\
         contexts:\n\
         - name: fakecloud\n  context:\n    cluster: fakecloud\n    user: {user}\n\
         current-context: fakecloud\n",
        ca = STANDARD.encode(ca_pem),
    )
}

/// Writes a kubeconfig readable only by us (it carries credentials).
pub fn write(path: &Path, contents: &str) -> Result<()> {
    crate::files::write(path, contents.as_bytes(), 0o600)
}

/// An API server as a kubeconfig names it.
#[derive(Debug, Clone, Copy)]
pub struct Server<'a> {
    pub url: &'a str,
    pub ca_pem: &'a str,
}

/// Writes at `path` a kubeconfig for `server` that authenticates as ServiceAccount `namespace/name` with a token
/// from the TokenRequest API (asked for through `client`). The ServiceAccount must exist; the token carries
/// only that account's RBAC.
pub async fn write_service_account(
    client: &kube::Client,
    server: &Server<'_>,
    namespace: &str,
    name: &str,
    expiration: std::time::Duration,
    path: &Path,
) -> Result<()> {
    // The apiserver rejects TokenRequests shorter than 10 minutes.
    let seconds = i64::try_from(expiration.as_secs()).unwrap_or(i64::MAX).max(600);
    let api = kube::Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec { expiration_seconds: Some(seconds), ..Default::default() },
        ..Default::default()
    };
    let response = api.create_token_request(name, &PostParams::default(), &request).await?;
    let token = response
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Invalid(format!("TokenRequest for {namespace}/{name} returned no token")))?;
    let user = format!("system:serviceaccount:{namespace}:{name}");
    write(path, &render(server.url, server.ca_pem, &user, &Credentials::Token(&token)))
}

/// A kube client for the kubeconfig at `path` (its current context).
pub async fn client(path: &Path) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|source| Error::Kubeconfig { path: path.to_path_buf(), source })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|source| Error::Kubeconfig { path: path.to_path_buf(), source })?;
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_kubeconfig_parses_with_kube() {
        let text = render(
            "https://127.0.0.1:6443",
            "-----BEGIN CERTIFICATE-----\n",
            "ccm",
            &Credentials::Token("abc.def.ghi"),
        );
        let parsed = kube::config::Kubeconfig::from_yaml(&text).expect("valid kubeconfig");
        assert_eq!(parsed.current_context.as_deref(), Some("fakecloud"));
        let user = parsed.auth_infos[0].auth_info.as_ref().expect("user");
        assert!(user.token.is_some());
        let cluster = parsed.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
    }
}

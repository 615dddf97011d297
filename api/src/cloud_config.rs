//! The cloud-config file that the emulator's in-cluster clients read (`fakecloud-ccm --cloud-config`,
//! `fakecloud-vpc-router --cloud-config`): one format and one parser for all of them.
//!
//! YAML, unknown keys refused:
//!
//! ```yaml
//! endpoint: http://127.0.0.1:8787      # the emulator's URL (required)
//! token-file: /etc/fakecloud/token      # a file holding the API token ...
//! # token: <value>                      # ... or the token itself: exactly one of the two
//! region: local-1                       # optional: refuse to start against an emulator serving another region
//! ```
//!
//! Who starts a CCM writes the file with [`CloudConfig::write`], so the format is written where it is read.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Why a cloud-config file cannot be used, worded as what to fix.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct CloudConfigError {
    pub path: PathBuf,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CloudConfig {
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

impl CloudConfig {
    /// The emulator at `endpoint`, called with the token in `token_file`.
    pub fn with_token_file(endpoint: impl Into<String>, token_file: impl Into<PathBuf>) -> Self {
        Self { endpoint: endpoint.into(), token: None, token_file: Some(token_file.into()), region: None }
    }

    /// The emulator at `endpoint`, called with `token`, written into the file itself.
    pub fn with_token(endpoint: impl Into<String>, token: impl Into<String>) -> Self {
        Self { endpoint: endpoint.into(), token: Some(token.into()), token_file: None, region: None }
    }

    /// Write it to `path` as [`CloudConfig::load`] reads it.
    pub fn write(&self, path: &Path) -> Result<(), CloudConfigError> {
        let err = |reason: String| CloudConfigError { path: path.to_path_buf(), reason };
        let text = serde_saphyr::to_string(self).map_err(|e| err(format!("cannot write it as YAML: {e}")))?;
        std::fs::write(path, text).map_err(|e| err(format!("cannot write it: {e}")))
    }

    /// Read and check the file, and the token file it names.
    pub fn load(path: &Path) -> Result<Self, CloudConfigError> {
        let err = |reason: String| CloudConfigError { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read it: {e}")))?;
        let mut cfg: Self = serde_saphyr::from_str(&text).map_err(|e| err(e.to_string()))?;
        match (&cfg.token, &cfg.token_file) {
            (Some(_), None) => {}
            (None, Some(f)) => {
                let token = std::fs::read_to_string(f)
                    .map_err(|e| err(format!("token-file {}: cannot read it: {e}", f.display())))?;
                cfg.token = Some(token.trim().to_string());
            }
            _ => return Err(err("give exactly one of token and token-file".into())),
        }
        if cfg.token.as_deref().is_some_and(str::is_empty) {
            return Err(err("the token is empty".into()));
        }
        Ok(cfg)
    }

    /// The API token (read from `token-file` at load).
    pub fn token(&self) -> &str {
        self.token.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_config_needs_one_token() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.yaml");
        let load = |text: &str| {
            std::fs::write(&p, text).unwrap();
            CloudConfig::load(&p)
        };
        assert!(load("endpoint: http://x\n").unwrap_err().to_string().contains("exactly one of token"));
        assert!(load("endpoint: http://x\ntoken: t\nregoin: r\n").unwrap_err().to_string().contains("regoin"));
        assert_eq!(load("endpoint: http://x\ntoken: t\n").unwrap().token(), "t");
        let tf = dir.path().join("token");
        std::fs::write(&tf, "secret\n").unwrap();
        let cfg = load(&format!("endpoint: http://x\ntoken-file: {}\nregion: r\n", tf.display())).unwrap();
        assert_eq!((cfg.token(), cfg.region.as_deref()), ("secret", Some("r")));
        let missing = load("endpoint: http://x\ntoken-file: /nonexistent/token\n").unwrap_err().to_string();
        assert!(missing.contains("token-file /nonexistent/token: cannot read it"), "{missing}");
        std::fs::write(&tf, "\n").unwrap();
        assert!(
            load(&format!("endpoint: http://x\ntoken-file: {}\n", tf.display()))
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
    }

    #[test]
    fn what_is_written_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let (p, tf) = (dir.path().join("c: a.yaml"), dir.path().join("the token: 'x'"));
        std::fs::write(&tf, "secret\n").unwrap();
        let by_file = CloudConfig::with_token_file("http://127.0.0.1:8787", &tf);
        by_file.write(&p).unwrap();
        let read = CloudConfig::load(&p).unwrap();
        assert_eq!((read.token(), read.token_file.as_deref()), ("secret", Some(tf.as_path())));
        let inline = CloudConfig { region: Some("local-1".into()), ..CloudConfig::with_token("http://x", "t: #1") };
        inline.write(&p).unwrap();
        assert_eq!(CloudConfig::load(&p).unwrap(), inline);
    }
}

//! The user and admin tokens. Given by flag or environment, or read from / generated into a credentials file
//! (mode 0600) that scripts can `source`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use fakecloud_api::{ENV_ADMIN_TOKEN, ENV_USER_TOKEN};

use crate::auth::Tokens;

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot read credentials file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("credentials file {path} has no {key}= line; delete it to have new tokens generated")]
    Missing { path: PathBuf, key: &'static str },
    #[error("cannot write credentials file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{0} must be at least 16 characters")]
    TooShort(&'static str),
}

/// Where the tokens came from, to tell the user.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Given,
    File(PathBuf),
    Generated(PathBuf),
}

/// Tokens from the flags if both are given; else from `file` if it exists; else new ones written to `file`, with
/// the lines `derived` makes of them (the AWS face's keys, which the SDKs read from the same variables).
pub fn load_or_create(
    user: Option<String>,
    admin: Option<String>,
    file: &Path,
    derived: impl FnOnce(&Tokens) -> String,
) -> Result<(Tokens, Source), CredentialsError> {
    if let (Some(user), Some(admin)) = (user.clone(), admin.clone()) {
        check_len(&user, ENV_USER_TOKEN)?;
        check_len(&admin, ENV_ADMIN_TOKEN)?;
        return Ok((Tokens { user, admin }, Source::Given));
    }
    if file.exists() {
        let text =
            std::fs::read_to_string(file).map_err(|source| CredentialsError::Read { path: file.into(), source })?;
        let get = |key: &'static str| {
            fakecloud_api::credential(&text, key).ok_or(CredentialsError::Missing { path: file.into(), key })
        };
        let tokens =
            Tokens { user: user.unwrap_or(get(ENV_USER_TOKEN)?), admin: admin.unwrap_or(get(ENV_ADMIN_TOKEN)?) };
        return Ok((tokens, Source::File(file.into())));
    }
    let tokens = Tokens { user: user.unwrap_or_else(random_token), admin: admin.unwrap_or_else(random_token) };
    let body = format!(
        "# fakecloud credentials: `source` this file to use the CLI (and the AWS SDKs and CLI).\nexport {ENV_USER_TOKEN}={}\nexport {ENV_ADMIN_TOKEN}={}\n{}",
        tokens.user,
        tokens.admin,
        derived(&tokens)
    );
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(|source| CredentialsError::Write { path: file.into(), source })?;
    f.write_all(body.as_bytes()).map_err(|source| CredentialsError::Write { path: file.into(), source })?;
    Ok((tokens, Source::Generated(file.into())))
}

fn check_len(token: &str, name: &'static str) -> Result<(), CredentialsError> {
    if token.len() < 16 { Err(CredentialsError::TooShort(name)) } else { Ok(()) }
}

/// A new pair of tokens, as an account gets at its creation and at each wipe.
pub(crate) fn random_tokens() -> Tokens {
    Tokens { user: random_token(), admin: random_token() }
}

/// A new token: 64 random hex digits after `fc_`.
fn random_token() -> String {
    format!("fc_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn generated_tokens_are_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fakecloud.credentials");
        let (t1, src) = load_or_create(None, None, &file, |_| "export EXTRA=1\n".into()).unwrap();
        assert_eq!(src, Source::Generated(file.clone()));
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(fakecloud_api::credential(&text, ENV_USER_TOKEN), Some(t1.user.clone()));
        assert_eq!(fakecloud_api::credential(&text, "EXTRA").as_deref(), Some("1"));
        let (t2, src) = load_or_create(None, None, &file, |_| unreachable!("a file read is not written")).unwrap();
        assert_eq!(src, Source::File(file.clone()));
        assert_eq!((t1.user, t1.admin), (t2.user, t2.admin));
    }

    #[test]
    fn short_tokens_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_or_create(Some("short".into()), Some("x".repeat(20)), &dir.path().join("c"), |_| String::new())
            .unwrap_err();
        assert!(err.to_string().contains(ENV_USER_TOKEN));
    }
}

//! Each cloud's AWS key pair, derived from its user token: nothing new to store, hand out or rotate (a wiped
//! account's new token gives new keys), and the admin token never signs an AWS call — the AWS face is a user's.

use sha2::{Digest, Sha256};

use crate::auth::Tokens;

/// The variables the AWS SDKs and CLI read the keys from.
pub const ENV_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const ENV_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";

/// Domain separation: the two halves of a pair, and any other use of the token, never hash the same input.
const KEY_ID_LABEL: &[u8] = b"fakecloud aws access key id v1\0";
const SECRET_LABEL: &[u8] = b"fakecloud aws secret access key v1\0";
const ACCOUNT_LABEL: &[u8] = b"fakecloud aws account id v1\0";

/// An AWS access key: its ID (public, in every request) and its secret (never sent, only signed with); and the
/// account ID the cloud shows as the owner of what it holds.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// 12 digits, as AWS's.
    pub account_id: String,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({}, <redacted>)", self.access_key_id)
    }
}

impl Keys {
    /// The key pair of the cloud whose tokens are `tokens`: `AKIA` and 16 base32 characters (an AWS long-term
    /// key ID's form), and a 40-character secret.
    pub fn of(tokens: &Tokens) -> Self {
        Self {
            access_key_id: Self::access_key_id_of(tokens),
            secret_access_key: derive(SECRET_LABEL, &tokens.user)[..40].to_string(),
            account_id: format!("{:012}", u64::from_be_bytes(digest(ACCOUNT_LABEL, &tokens.user)) % 1_000_000_000_000),
        }
    }

    /// The key ID alone: what routing a call needs, without deriving the secret and the account ID.
    pub fn access_key_id_of(tokens: &Tokens) -> String {
        format!("AKIA{}", &derive(KEY_ID_LABEL, &tokens.user)[..16])
    }

    /// The lines of a credentials file that set them for the AWS SDKs and CLI.
    pub fn file_lines(&self) -> String {
        format!(
            "export {ENV_ACCESS_KEY_ID}={}\nexport {ENV_SECRET_ACCESS_KEY}={}\n",
            self.access_key_id, self.secret_access_key
        )
    }
}

/// Uppercase base32 (no padding) of [`hash`]: 52 characters.
fn derive(label: &[u8], token: &str) -> String {
    data_encoding::BASE32_NOPAD.encode(&hash(label, token))
}

/// The first 8 bytes of [`hash`].
fn digest(label: &[u8], token: &str) -> [u8; 8] {
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash(label, token)[..8]);
    first
}

/// SHA-256 over `label` and `token`.
fn hash(label: &[u8], token: &str) -> [u8; 32] {
    Sha256::new().chain_update(label).chain_update(token.as_bytes()).finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(user: &str) -> Tokens {
        Tokens { user: user.into(), admin: "admin-token-0123456789".into() }
    }

    #[test]
    fn keys_are_stable_shaped_and_distinct_per_user_token() {
        let a = Keys::of(&tokens("user-token-aaaaaaaaaa"));
        assert_eq!(a, Keys::of(&tokens("user-token-aaaaaaaaaa")));
        // The admin token plays no part.
        assert_eq!(a, Keys::of(&Tokens { admin: "another-admin-token".into(), ..tokens("user-token-aaaaaaaaaa") }));
        let b = Keys::of(&tokens("user-token-bbbbbbbbbb"));
        assert_ne!(a.access_key_id, b.access_key_id);
        assert_ne!(a.secret_access_key, b.secret_access_key);
        assert_eq!(a.access_key_id.len(), 20);
        assert!(a.access_key_id.starts_with("AKIA"));
        assert!(a.access_key_id.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()));
        assert_eq!(a.secret_access_key.len(), 40);
        assert!(a.account_id.len() == 12 && a.account_id.chars().all(|c| c.is_ascii_digit()));
        assert_ne!(a.account_id, b.account_id);
        // The secret is not the ID's continuation.
        assert!(!a.secret_access_key.contains(&a.access_key_id[4..]));
        assert!(!format!("{a:?}").contains(&a.secret_access_key));
    }

    #[test]
    fn file_lines_are_read_back_by_the_credentials_parser() {
        let k = Keys::of(&tokens("user-token-aaaaaaaaaa"));
        let text = k.file_lines();
        assert_eq!(fakecloud_api::credential(&text, ENV_ACCESS_KEY_ID), Some(k.access_key_id.clone()));
        assert_eq!(fakecloud_api::credential(&text, ENV_SECRET_ACCESS_KEY), Some(k.secret_access_key.clone()));
    }
}

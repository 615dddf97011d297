//! Bearer tokens and roles. Tokens are compared in constant time and never logged.

/// Who a caller is. Admins may do everything users may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    User,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Admin => "admin",
        }
    }
}

#[derive(Clone)]
pub struct Tokens {
    pub user: String,
    pub admin: String,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(<redacted>)")
    }
}

impl Tokens {
    /// The role a `Authorization` header value grants, if any. The scheme is case-insensitive and followed by
    /// one or more spaces (RFC 7235).
    pub fn role_of(&self, authorization: Option<&str>) -> Option<Role> {
        let (scheme, token) = authorization?.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim();
        if constant_time_eq(token.as_bytes(), self.admin.as_bytes()) {
            Some(Role::Admin)
        } else if constant_time_eq(token.as_bytes(), self.user.as_bytes()) {
            Some(Role::User)
        } else {
            None
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_come_from_the_bearer_token() {
        let t = Tokens { user: "u-tok".into(), admin: "a-tok".into() };
        assert_eq!(t.role_of(Some("Bearer u-tok")), Some(Role::User));
        assert_eq!(t.role_of(Some("Bearer a-tok")), Some(Role::Admin));
        assert_eq!(t.role_of(Some("Bearer nope")), None);
        assert_eq!(t.role_of(Some("u-tok")), None);
        assert_eq!(t.role_of(Some("bearer u-tok")), Some(Role::User));
        assert_eq!(t.role_of(Some("BEARER  a-tok")), Some(Role::Admin));
        assert_eq!(t.role_of(Some("Basic u-tok")), None);
        assert_eq!(t.role_of(None), None);
        assert_eq!(format!("{t:?}"), "Tokens(<redacted>)");
    }
}

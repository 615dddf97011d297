//! ELBv2's ARNs, formed as AWS forms them (`arn:aws:elasticloadbalancing:<region>:<account>:loadbalancer/net/
//! <name>/<16 hex>`, `…:targetgroup/<name>/<16 hex>`, `…:listener/net/<lb name>/<lb hex>/<16 hex>`) and read
//! back to the store's IDs: the 16 hex digits of a load balancer, `tg-` or `lst-` and theirs.

use super::common::validation;
use crate::aws::error::Result;

/// The prefix of this cloud's ARNs: its region and the account the EC2 face answers as `ownerId`.
pub struct Arns {
    prefix: String,
}

/// The store's ID of a target group or listener from its ARN's hex, and back.
pub const GROUP_PREFIX: &str = "tg-";
pub const LISTENER_PREFIX: &str = "lst-";

/// 16 new hex digits, as an ARN's last part.
pub fn new_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

impl Arns {
    pub fn new(region: &str, account: &str) -> Self {
        Self { prefix: format!("arn:aws:elasticloadbalancing:{region}:{account}:") }
    }

    pub fn load_balancer(&self, name: &str, hex: &str) -> String {
        format!("{}loadbalancer/net/{name}/{hex}", self.prefix)
    }

    pub fn target_group(&self, name: &str, id: &str) -> String {
        format!("{}targetgroup/{name}/{}", self.prefix, id.trim_start_matches(GROUP_PREFIX))
    }

    pub fn listener(&self, lb_name: &str, lb_hex: &str, id: &str) -> String {
        format!("{}listener/net/{lb_name}/{lb_hex}/{}", self.prefix, id.trim_start_matches(LISTENER_PREFIX))
    }

    /// The parts after `kind/` of `arn`, if it is this cloud's and of that kind; a string that is no ARN of
    /// that kind at all is ELB's `ValidationError`.
    fn parts<'a>(&self, arn: &'a str, kind: &str, n: usize) -> Result<Option<Vec<&'a str>>> {
        let malformed = || validation(format!("'{arn}' is not a valid {} ARN", kind.replace('/', " ")));
        let resource = arn.rsplit_once(':').map(|(_, r)| r).ok_or_else(malformed)?;
        let rest = resource.strip_prefix(kind).and_then(|r| r.strip_prefix('/')).ok_or_else(malformed)?;
        let parts: Vec<&str> = rest.split('/').collect();
        if !arn.starts_with("arn:aws:elasticloadbalancing:")
            || parts.len() != n
            || parts.iter().any(|p| p.is_empty())
            || parts.last().is_none_or(|h| h.len() != 16 || !h.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return Err(malformed());
        }
        // Another region's or account's: not here.
        Ok(arn.starts_with(&self.prefix).then_some(parts))
    }

    /// The load balancer's hex; `None` for another cloud's.
    pub fn load_balancer_hex(&self, arn: &str) -> Result<Option<String>> {
        Ok(self.parts(arn, "loadbalancer/net", 2)?.map(|p| p[1].to_string()))
    }

    /// The target group's store ID, or an ID no group has (another cloud's).
    pub fn target_group_id(&self, arn: &str) -> Result<String> {
        Ok(self.parts(arn, "targetgroup", 2)?.map_or_else(String::new, |p| format!("{GROUP_PREFIX}{}", p[1])))
    }

    /// The listener's store ID, or an ID no listener has.
    pub fn listener_id(&self, arn: &str) -> Result<String> {
        Ok(self.parts(arn, "listener/net", 3)?.map_or_else(String::new, |p| format!("{LISTENER_PREFIX}{}", p[2])))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn arns_are_formed_as_aws_forms_them_and_read_back() {
        let arns = Arns::new("local-1", "123456789012");
        let lb = arns.load_balancer("web", "0123456789abcdef");
        assert_eq!(lb, "arn:aws:elasticloadbalancing:local-1:123456789012:loadbalancer/net/web/0123456789abcdef");
        assert_eq!(arns.load_balancer_hex(&lb).unwrap().as_deref(), Some("0123456789abcdef"));
        let tg = arns.target_group("k8s-tg", "tg-00000000000000aa");
        assert_eq!(tg, "arn:aws:elasticloadbalancing:local-1:123456789012:targetgroup/k8s-tg/00000000000000aa");
        assert_eq!(arns.target_group_id(&tg).unwrap(), "tg-00000000000000aa");
        let l = arns.listener("web", "0123456789abcdef", "lst-00000000000000bb");
        assert_eq!(arns.listener_id(&l).unwrap(), "lst-00000000000000bb");
        // Another account's is nowhere here; a string that is no ARN of the kind is refused.
        let other = Arns::new("local-1", "999999999999").load_balancer("web", "0123456789abcdef");
        assert_eq!(arns.load_balancer_hex(&other).unwrap(), None);
        for bad in ["web", &tg, "arn:aws:elasticloadbalancing:local-1:1:loadbalancer/app/web/0123456789abcdef"] {
            assert_eq!(arns.load_balancer_hex(bad).unwrap_err().code, "ValidationError", "{bad}");
        }
        assert_eq!(arns.target_group_id(&lb).unwrap_err().code, "ValidationError");
    }
}

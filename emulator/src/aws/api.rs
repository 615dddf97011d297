//! The AWS APIs the face answers (one module each), told apart as AWS's endpoints tell them: by the service a
//! request is signed for (its credential scope) and, where two APIs share one (Elastic Load Balancing's two
//! versions), by its `Version`. Their identities only: what each one's table says of an action is `actions`'.

/// An AWS API answered by the face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Ec2,
    /// Classic Elastic Load Balancing (2012-06-01).
    Elb,
    /// Elastic Load Balancing v2 (2015-12-01): network load balancers.
    Elbv2,
}

/// How an API writes its answers (the Query protocol has two dialects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// EC2's: `<XResponse><requestId/>…`, lists of `<item>`, errors as `<Response><Errors><Error>…`.
    Ec2,
    /// The other Query APIs' (Elastic Load Balancing, IAM, STS): `<XResponse><XResult>…</XResult>
    /// <ResponseMetadata><RequestId/>…`, lists of `<member>`, errors as `<ErrorResponse><Error><Type>…`.
    Query,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::Ec2, Api::Elb, Api::Elbv2];

    /// The service name its requests are signed for (both Elastic Load Balancing APIs are `elasticloadbalancing`).
    pub fn service(self) -> &'static str {
        match self {
            Api::Ec2 => "ec2",
            Api::Elb | Api::Elbv2 => "elasticloadbalancing",
        }
    }

    /// Its API version: what the SDKs send as `Version`.
    pub fn version(self) -> &'static str {
        match self {
            Api::Ec2 => "2016-11-15",
            Api::Elb => "2012-06-01",
            Api::Elbv2 => "2015-12-01",
        }
    }

    /// The XML namespace of its answers.
    pub fn xmlns(self) -> &'static str {
        match self {
            Api::Ec2 => "http://ec2.amazonaws.com/doc/2016-11-15/",
            Api::Elb => "http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/",
            Api::Elbv2 => "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/",
        }
    }

    pub fn style(self) -> Style {
        match self {
            Api::Ec2 => Style::Ec2,
            Api::Elb | Api::Elbv2 => Style::Query,
        }
    }

    /// The API a call signed for `service` is to: the one that signs as `service` with the call's `version`, or,
    /// failing that, the first that signs as `service`, which then refuses the version in its own words. `None`
    /// for a service the face does not answer.
    pub fn of(service: &str, version: Option<&str>) -> Option<Api> {
        let mut signing = Self::ALL.into_iter().filter(|api| api.service() == service).peekable();
        let first = signing.peek().copied();
        signing.find(|api| Some(api.version()) == version).or(first)
    }

    /// The service names requests may be signed for.
    pub fn services() -> Vec<&'static str> {
        let mut services = Vec::new();
        for service in Self::ALL.map(Api::service) {
            if !services.contains(&service) {
                services.push(service);
            }
        }
        services
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_to_the_api_its_signature_and_version_name() {
        assert_eq!(Api::of("ec2", Some("2016-11-15")), Some(Api::Ec2));
        // EC2 refuses a version it does not answer itself.
        assert_eq!(Api::of("ec2", Some("2010-01-01")), Some(Api::Ec2));
        assert_eq!(Api::of("ec2", None), Some(Api::Ec2));
        assert_eq!(Api::of("s3", Some("2016-11-15")), None);
        assert_eq!(Api::of("elasticloadbalancing", Some("2012-06-01")), Some(Api::Elb));
        assert_eq!(Api::of("elasticloadbalancing", Some("2015-12-01")), Some(Api::Elbv2));
        assert_eq!(Api::services(), ["ec2", "elasticloadbalancing"]);
    }
}

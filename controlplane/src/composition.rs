//! How the stack's services are started, written once for `stack up` (the supervisor in this crate's binary) and
//! for the e2e suite's local clusters (fakecloud-e2e's `local.rs`): the emulator's command line and a CCM's. The
//! cloud config fakecloud's CCMs read is [`fakecloud_api::CloudConfig`], written where it is parsed;
//! cloud-provider-aws's ([`AwsCloudConfig`], issue #50) is written here, in the form its source reads.
//!
//! The e2e crate's tests parse both command lines with the `fakecloud` binary's and fakecloud-ccm's own flag
//! definitions, so a renamed flag fails a test there rather than a stack.

use std::path::Path;

/// `fakecloud serve` on a SQLite file.
#[derive(Debug, Clone)]
pub struct Emulator<'a> {
    /// `host:port` on loopback.
    pub listen: &'a str,
    pub db: &'a Path,
    /// The user and the admin token. Without them the emulator reads its credentials file beside the database,
    /// or generates one there.
    pub tokens: Option<(&'a str, &'a str)>,
    /// `host:port` where it answers the cloud's names over DNS, if anywhere.
    pub dns_listen: Option<&'a str>,
}

impl Emulator<'_> {
    /// Its arguments, from `serve` on.
    pub fn args(&self) -> Vec<String> {
        let mut args =
            vec!["serve".to_string(), format!("--listen={}", self.listen), format!("--db={}", self.db.display())];
        if let Some((user, admin)) = self.tokens {
            args.extend([format!("--user-token={user}"), format!("--admin-token={admin}")]);
        }
        args.extend(self.dns_listen.map(|dns| format!("--dns-listen={dns}")));
        args
    }
}

/// A CCM (fakecloud-ccm, or upstream's `k8s.io/cloud-provider` build: the flags are upstream's) on the emulator.
#[derive(Debug, Clone)]
pub struct Ccm<'a> {
    /// The [`fakecloud_api::CloudConfig`] file.
    pub cloud_config: &'a Path,
    pub kubeconfig: &'a Path,
    /// The controller manager's `--cluster-cidr`, which the route controller reads too.
    pub cluster_cidr: &'a str,
    /// Its HTTPS port (`/healthz`, `/metrics`) on 127.0.0.1.
    pub port: u16,
}

impl Ccm<'_> {
    pub fn args(&self) -> Vec<String> {
        vec![
            "--cloud-provider=fakecloud".to_string(),
            format!("--cloud-config={}", self.cloud_config.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--cluster-cidr={}", self.cluster_cidr),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={}", self.port),
        ]
    }
}

/// cloud-provider-aws (`make aws-ccm`, unmodified) on the emulator's AWS face: upstream's flags, and the
/// environment its AWS SDK reads the cloud's key pair from.
#[derive(Debug, Clone)]
pub struct AwsCcm<'a> {
    /// The [`AwsCloudConfig`] file.
    pub cloud_config: &'a Path,
    pub kubeconfig: &'a Path,
    pub cluster_cidr: &'a str,
    /// The cluster's ID, as [`AwsCloudConfig::cluster_id`].
    pub cluster_name: &'a str,
    pub port: u16,
    /// The account's access key ID and secret (`fakecloud serve` writes them beside its tokens).
    pub keys: (&'a str, &'a str),
}

impl AwsCcm<'_> {
    pub fn args(&self) -> Vec<String> {
        vec![
            "--cloud-provider=aws".to_string(),
            format!("--cloud-config={}", self.cloud_config.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--cluster-cidr={}", self.cluster_cidr),
            format!("--cluster-name={}", self.cluster_name),
            // Upstream's route controller runs only when the CCM allocates the Nodes' CIDRs too (k8s.io/
            // cloud-provider's `startRouteController`); kube-controller-manager allocates them here, the CCM
            // only reads them.
            "--allocate-node-cidrs=true".to_string(),
            "--configure-cloud-routes=true".to_string(),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={}", self.port),
            // Its controllers say what they do from --v=2 on.
            "--v=2".to_string(),
        ]
    }

    /// [`aws_client_env`], and no instance metadata service to ask (its startup probe would wait for one).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = aws_client_env(self.keys);
        env.push(("AWS_EC2_METADATA_DISABLED", "true".to_string()));
        env
    }
}

/// Where the AWS SDKs and CLI read a key pair from (and where the emulator's credentials file has the cloud's).
pub const AWS_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const AWS_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";

/// The environment of an AWS client the stack starts (cloud-provider-aws, the AWS CLI): the key pair `keys`,
/// and nothing of the user's AWS configuration (a profile's region, endpoint or keys).
pub fn aws_client_env(keys: (&str, &str)) -> Vec<(&'static str, String)> {
    vec![
        (AWS_ACCESS_KEY_ID, keys.0.to_string()),
        (AWS_SECRET_ACCESS_KEY, keys.1.to_string()),
        ("AWS_CONFIG_FILE", "/dev/null".to_string()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_string()),
    ]
}

/// cloud-provider-aws's cloud config (its `config.CloudConfig`, read with gcfg): `[Global]` says where the
/// cluster is, so the CCM asks no instance metadata service (with `VPC`, `SubnetID` and `KubernetesClusterID`
/// set, `newAWSCloud2` builds its own instance from them), and one `[ServiceOverride]` per API points the SDK at
/// the emulator. The signing name must be given: the override replaces the SDK's (`GetEC2EndpointOpts`), and an
/// empty one signs for no service.
#[derive(Debug, Clone)]
pub struct AwsCloudConfig<'a> {
    pub region: &'a str,
    /// The zone the CCM says it runs in.
    pub zone: &'a str,
    pub vpc: &'a str,
    pub subnet: &'a str,
    /// `KubernetesClusterID`: the value of the `kubernetes.io/cluster/<id>` tags the CCM looks for.
    pub cluster_id: &'a str,
    /// The emulator's URL, where its AWS face answers.
    pub url: &'a str,
}

/// The SDK's service IDs (`ec2.ServiceID`, ...) and their SigV4 signing names.
pub(crate) const AWS_SERVICES: [(&str, &str); 3] = [
    ("EC2", "ec2"),
    ("Elastic Load Balancing", "elasticloadbalancing"),
    ("Elastic Load Balancing v2", "elasticloadbalancing"),
];

impl AwsCloudConfig<'_> {
    /// The file's text. Values are quoted, as gcfg reads a quoted value whole.
    pub fn text(&self) -> String {
        let q = |v: &str| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""));
        let mut text = format!(
            "[Global]\nRegion = {}\nZone = {}\nVPC = {}\nSubnetID = {}\nKubernetesClusterID = {}\n\
             NLBSecurityGroupMode = {}\n",
            q(self.region),
            q(self.zone),
            q(self.vpc),
            q(self.subnet),
            q(self.cluster_id),
            q("Managed"),
        );
        for (n, (service, signing)) in AWS_SERVICES.iter().enumerate() {
            text.push_str(&format!(
                "\n[ServiceOverride \"{n}\"]\nService = {}\nRegion = {}\nURL = {}\nSigningRegion = {}\nSigningName = {}\n",
                q(service),
                q(self.region),
                q(self.url),
                q(self.region),
                q(signing),
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aws_cloud_config_points_every_api_at_the_face_and_signs_for_it() {
        let text = AwsCloudConfig {
            region: "local-1",
            zone: "local-1a",
            vpc: "vpc-0123456789abcdef0",
            subnet: "subnet-0123456789abcdef0",
            cluster_id: "a \"quoted\" id",
            url: "http://127.0.0.1:8787",
        }
        .text();
        assert!(text.starts_with("[Global]\nRegion = \"local-1\"\nZone = \"local-1a\"\n"), "{text}");
        assert!(text.contains("KubernetesClusterID = \"a \\\"quoted\\\" id\"\n"), "{text}");
        // The three APIs cloud-provider-aws makes clients of, by the SDK's service IDs, each signed as AWS signs it.
        let overrides: Vec<&str> = text.split("[ServiceOverride ").skip(1).collect();
        assert_eq!(overrides.len(), 3, "{text}");
        for ((service, signing), section) in AWS_SERVICES.iter().zip(&overrides) {
            for line in [
                format!("Service = \"{service}\""),
                "URL = \"http://127.0.0.1:8787\"".to_string(),
                "SigningRegion = \"local-1\"".to_string(),
                format!("SigningName = \"{signing}\""),
            ] {
                assert!(section.contains(&line), "{section} lacks {line}");
            }
        }
    }
}

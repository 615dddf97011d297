//! A cluster's network on the emulator's AWS face, set up as an AWS user sets one up for cloud-provider-aws
//! (issue #50): the subnets and the VPC's main route table tagged as the cluster's (its `findRouteTable` takes the
//! one table with the tag), the subnets with the ELB role's too (`findELBSubnets` prefers them) — all with the AWS
//! CLI, a client nobody here wrote. The stack (`make up CCM=aws`) and the suite's local backend
//! (`FAKECLOUD_E2E_CCM=aws`) set their clusters up with it; the instances are made with [`cluster_tag`] too, as
//! the CCM's `describeInstances` keeps only those.

use std::path::Path;
use std::time::Duration;

use crate::composition::{AwsCloudConfig, aws_client_env};
use crate::error::{Error, Result};

/// The cluster ID the stack and the suite give cloud-provider-aws: its `--cluster-name` and
/// `KubernetesClusterID`.
pub const CLUSTER_ID: &str = "fakecloud";

/// The tag that says a resource is cluster `id`'s, as cloud-provider-aws reads it (`awsTagging.hasClusterTag`);
/// its value is `owned`.
pub fn cluster_tag(id: &str) -> String {
    format!("kubernetes.io/cluster/{id}")
}

/// The providerID a kubelet on EC2 registers its Node with (`--provider-id`, as cloud-provider-aws's
/// `KubernetesInstanceID` parses it): `aws:///<zone>/<instance ID>`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The instance ID in a providerID of [`provider_id`]'s form; `None` for any other.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let (_zone, id) = provider_id.strip_prefix("aws:///")?.split_once('/')?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// How long one AWS CLI call may take (a cold Python start is seconds on a busy machine).
const CLI_HANG: Duration = Duration::from_secs(60);

/// The AWS CLI (`make aws-clients`), pointed at the face at `url` with an account's key pair, and nothing of the
/// user's own AWS configuration.
#[derive(Debug, Clone, Copy)]
pub struct AwsCli<'a> {
    pub path: &'a Path,
    pub url: &'a str,
    pub region: &'a str,
    /// The access key ID and secret.
    pub keys: (&'a str, &'a str),
}

impl AwsCli<'_> {
    /// `program` with the face's settings in its environment and nothing of the user's own.
    fn command(&self, program: &Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("AWS_ENDPOINT_URL", self.url)
            .env("AWS_DEFAULT_REGION", self.region)
            .envs(aws_client_env(self.keys))
            .kill_on_drop(true);
        command
    }

    /// Run `command` (`what` it is, for errors) within [`CLI_HANG`]; what it printed.
    async fn output(mut command: tokio::process::Command, what: String) -> Result<Vec<u8>> {
        let failed = |failure: String| Error::AwsCli { command: what.clone(), failure };
        let out = tokio::time::timeout(CLI_HANG, command.output())
            .await
            .map_err(|_| failed(format!("did not finish within {CLI_HANG:?}")))?
            .map_err(|e| failed(format!("could not be run: {e}")))?;
        if !out.status.success() {
            return Err(failed(format!("failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(out.stdout)
    }

    /// `aws ec2 <args>`, and what it printed as JSON (`Null` for a command that prints nothing, as create-tags).
    pub async fn ec2(&self, args: &[&str]) -> Result<serde_json::Value> {
        self.call("ec2", args).await
    }

    /// `aws elb <args>` (classic Elastic Load Balancing), as [`Self::ec2`].
    pub async fn elb(&self, args: &[&str]) -> Result<serde_json::Value> {
        self.call("elb", args).await
    }

    async fn call(&self, api: &str, args: &[&str]) -> Result<serde_json::Value> {
        let what = format!("aws {api} {}", args.join(" "));
        let mut cli = self.command(self.path);
        cli.args([api, "--endpoint-url", self.url, "--region", self.region, "--output", "json"]).args(args);
        let out = Self::output(cli, what.clone()).await?;
        if out.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&out)
            .map_err(|e| Error::AwsCli { command: what, failure: format!("printed what is not JSON: {e}") })
    }

    /// The shell script `script` with `args`, the AWS CLI as `AWS_CLI` and the face's settings as `source aws.env`
    /// gives them (`scripts/aws-subnets.sh`, say); what it printed.
    pub async fn script(&self, script: &Path, args: &[&str]) -> Result<String> {
        let what = format!("{} {}", script.display(), args.join(" "));
        let mut bash = self.command(Path::new("bash"));
        bash.arg(script).args(args).env("AWS_CLI", self.path);
        Ok(String::from_utf8_lossy(&Self::output(bash, what).await?).into_owned())
    }
}

/// Where a cluster is, as its cloud config says it: the first subnet's VPC and zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub vpc: String,
    pub subnet: String,
    pub zone: String,
    /// Every subnet of the region, and its zone.
    pub subnets: Vec<(String, String)>,
}

impl Network {
    /// cloud-provider-aws's cloud config for cluster `cluster_id` here, its APIs at the face at `url`.
    pub fn cloud_config<'a>(&'a self, region: &'a str, cluster_id: &'a str, url: &'a str) -> AwsCloudConfig<'a> {
        AwsCloudConfig { region, zone: &self.zone, vpc: &self.vpc, subnet: &self.subnet, cluster_id, url }
    }
}

/// Tag instances `ids` as cluster `cluster_id`'s, as an AWS user tags the machines a cluster runs on (the CCM's
/// `describeInstances` keeps only those).
pub async fn tag_instances(cli: &AwsCli<'_>, ids: &[&str], cluster_id: &str) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let owned = format!("Key={},Value=owned", cluster_tag(cluster_id));
    cli.ec2(&[&["create-tags", "--resources"], ids, &["--tags", &owned]].concat()).await.map(drop)
}

/// Find the region's subnets and the VPC's main route table and tag them as cluster `cluster_id`'s.
pub async fn tag_network(cli: &AwsCli<'_>, cluster_id: &str) -> Result<Network> {
    let invalid = |what: &str| Error::Invalid(format!("the AWS face at {}: {what}", cli.url));
    let found = cli.ec2(&["describe-subnets"]).await?;
    let subnets: Vec<(&str, &str, &str)> = found["Subnets"]
        .as_array()
        .ok_or_else(|| invalid("describe-subnets printed no Subnets"))?
        .iter()
        .filter_map(|s| Some((s["SubnetId"].as_str()?, s["VpcId"].as_str()?, s["AvailabilityZone"].as_str()?)))
        .collect();
    let &(subnet, vpc, zone) = subnets.first().ok_or_else(|| invalid("the region has no subnets"))?;
    let main = cli.ec2(&["describe-route-tables", "--filters", "Name=association.main,Values=true"]).await?;
    let route_table =
        main["RouteTables"][0]["RouteTableId"].as_str().ok_or_else(|| invalid("the VPC has no main route table"))?;

    let subnet_ids: Vec<&str> = subnets.iter().map(|s| s.0).collect();
    let owned = format!("Key={},Value=owned", cluster_tag(cluster_id));
    cli.ec2(&[&["create-tags", "--resources"], subnet_ids.as_slice(), &[route_table, "--tags", &owned]].concat())
        .await?;
    let elb_role = "Key=kubernetes.io/role/elb,Value=1";
    cli.ec2(&[&["create-tags", "--resources"], subnet_ids.as_slice(), &["--tags", elb_role]].concat()).await?;
    let subnets = subnets.iter().map(|s| (s.0.to_string(), s.2.to_string())).collect();
    Ok(Network { vpc: vpc.into(), subnet: subnet.into(), zone: zone.into(), subnets })
}

#[cfg(test)]
mod tests {
    use super::{instance_id, provider_id};

    #[test]
    fn an_instance_id_is_read_back_from_its_provider_id() {
        assert_eq!(instance_id(&provider_id("local-1a", "i-0123456789abcdef0")), Some("i-0123456789abcdef0"));
        for other in
            ["fakecloud://local-1a/i-0123", "aws:///local-1a/", "aws:///local-1a", "aws:///a/b/c", "aws://x/y/z"]
        {
            assert_eq!(instance_id(other), None, "{other}");
        }
    }
}

//! The stack with cloud-provider-aws (`stack up --ccm aws`, issue #50): the cluster set up on the emulator's AWS
//! face as an AWS user sets one up — its subnets and route table tagged with the AWS CLI — and the CCM's cloud
//! config and key pair.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use fakecloud_controlplane::composition::{
    AWS_ACCESS_KEY_ID as ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY as SECRET_ACCESS_KEY, AwsCloudConfig, aws_client_env,
};

use super::layout::{AWS_CLOUD_CONFIG, AWS_ENV, RunDir};

/// The cluster's ID: the CCM's `--cluster-name` and `KubernetesClusterID`, and so the `kubernetes.io/cluster/<id>`
/// tag it looks for on the route table.
pub const CLUSTER_ID: &str = "fakecloud";

/// The tag that says a resource is the cluster's, as cloud-provider-aws reads it (`awsTagging.hasClusterTag`).
pub fn cluster_tag() -> String {
    format!("kubernetes.io/cluster/{CLUSTER_ID}")
}

/// How long one AWS CLI call may take (a cold Python start is seconds on a busy machine).
const CLI_HANG: Duration = Duration::from_secs(60);

/// What the AWS CCM runs with, once the cluster is set up.
pub struct Setup {
    pub cloud_config: PathBuf,
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// cloud-provider-aws's binary and the AWS CLI, refused up front when missing, with what to do.
pub fn binaries(aws_ccm: Option<&Path>, aws_cli: Option<&Path>) -> anyhow::Result<(PathBuf, PathBuf)> {
    let found = |path: Option<&Path>, what: &str, how: &str| match path {
        Some(p) if p.is_file() => Ok(p.to_path_buf()),
        Some(p) => anyhow::bail!("{what} is not at {}: {how}", p.display()),
        None => anyhow::bail!("--ccm aws needs {what}: {how}"),
    };
    Ok((
        found(aws_ccm, "cloud-provider-aws", "`make aws-ccm` builds it and prints its path (FAKECLOUD_AWS_CCM)")?,
        found(aws_cli, "the AWS CLI", "`make aws-clients` installs it; its bin/aws is FAKECLOUD_AWS_CLI")?,
    ))
}

/// Find the cluster's network and tag it as an AWS user does for cloud-provider-aws — the subnets and the VPC's
/// main route table with the cluster's tag (its `findRouteTable` takes the one table that has it), the subnets
/// with the ELB role's too (`findELBSubnets` prefers them) — all with the AWS CLI (the instances are made with the
/// cluster's tag: [`cluster_tag`]); then write the CCM's cloud config and, for the user's shell, the face's
/// settings ([`AWS_ENV`]) in the run directory.
pub async fn set_up(region: &str, url: &str, dir: &RunDir, aws_cli: &Path) -> anyhow::Result<Setup> {
    let credentials_file = dir.credentials();
    let text = std::fs::read_to_string(&credentials_file)
        .with_context(|| format!("reading the emulator's credentials, {}", credentials_file.display()))?;
    let key = |name| {
        fakecloud_api::credential(&text, name).with_context(|| {
            format!("{} has no {name}: is the emulator older than its AWS face?", credentials_file.display())
        })
    };
    let (access_key_id, secret_access_key) = (key(ACCESS_KEY_ID)?, key(SECRET_ACCESS_KEY)?);
    let aws = |args: &[&str]| {
        let said = format!("aws ec2 {}", args.join(" "));
        let mut command = tokio::process::Command::new(aws_cli);
        command
            .args(["ec2", "--endpoint-url", url, "--region", region, "--output", "json"])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .envs(aws_client_env((&access_key_id, &secret_access_key)))
            .kill_on_drop(true);
        async move {
            let out = tokio::time::timeout(CLI_HANG, command.output())
                .await
                .map_err(|_| anyhow::anyhow!("`{said}` did not finish within {CLI_HANG:?}"))?
                .with_context(|| format!("running {said}"))?;
            anyhow::ensure!(
                out.status.success(),
                "`{said}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            // (create-tags prints nothing.)
            match out.stdout.is_empty() {
                true => Ok(serde_json::Value::Null),
                false => serde_json::from_slice(&out.stdout).with_context(|| format!("reading what `{said}` printed")),
            }
        }
    };
    let found = aws(&["describe-subnets"]).await?;
    let subnets: Vec<(&str, &str, &str)> = found["Subnets"]
        .as_array()
        .context("describe-subnets printed no Subnets")?
        .iter()
        .filter_map(|s| Some((s["SubnetId"].as_str()?, s["VpcId"].as_str()?, s["AvailabilityZone"].as_str()?)))
        .collect();
    let &(subnet, vpc, zone) = subnets.first().context("the emulator's region has no subnets")?;
    let main = aws(&["describe-route-tables", "--filters", "Name=association.main,Values=true"]).await?;
    let route_table = main["RouteTables"][0]["RouteTableId"].as_str().context("the VPC has no main route table")?;

    let subnet_ids: Vec<&str> = subnets.iter().map(|s| s.0).collect();
    let cluster_tag = format!("Key={},Value=owned", cluster_tag());
    let owned = [&["create-tags", "--resources"], subnet_ids.as_slice(), &[route_table, "--tags", &cluster_tag]];
    aws(&owned.concat()).await?;
    let elb_role =
        [&["create-tags", "--resources"], subnet_ids.as_slice(), &["--tags", "Key=kubernetes.io/role/elb,Value=1"]];
    aws(&elb_role.concat()).await?;

    let config = AwsCloudConfig { region, zone, vpc, subnet, cluster_id: CLUSTER_ID, url };
    fakecloud_controlplane::files::write(&dir.file(AWS_CLOUD_CONFIG), config.text().as_bytes(), 0o644)?;
    // What a user's shell needs for the AWS CLI or boto3 on the face: `source` it.
    let env = format!(
        "export AWS_ENDPOINT_URL={url}\nexport AWS_DEFAULT_REGION={region}\nexport {ACCESS_KEY_ID}={access_key_id}\n\
         export {SECRET_ACCESS_KEY}={secret_access_key}\n"
    );
    fakecloud_controlplane::files::write(&dir.file(AWS_ENV), env.as_bytes(), 0o600)?;
    Ok(Setup { cloud_config: dir.file(AWS_CLOUD_CONFIG), access_key_id, secret_access_key })
}

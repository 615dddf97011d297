//! The stack with cloud-provider-aws (`stack up --ccm aws`, issue #50): the cluster set up on the emulator's AWS
//! face as an AWS user sets one up ([`aws_cluster`]), and the CCM's cloud config and key pair in the run
//! directory.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fakecloud_controlplane::aws_cloud_config;
use fakecloud_controlplane::aws_cluster::{self, AwsCli, CLUSTER_ID};
use fakecloud_controlplane::composition::{
    AWS_ACCESS_KEY_ID as ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY as SECRET_ACCESS_KEY,
};

use super::layout::{AWS_CLOUD_CONFIG, AWS_ENV, RunDir};

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

/// The user's own cloud config at `path`, if cloud-provider-aws can use it on `cloud` (without one, what holds on
/// any cloud): else every problem, each saying what to set ([`aws_cloud_config::problems`]).
pub fn user_cloud_config(path: &Path, cloud: Option<&aws_cloud_config::Cloud<'_>>) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the cloud config {}", path.display()))?;
    let problems = aws_cloud_config::problems(&text, cloud);
    if !problems.is_empty() {
        anyhow::bail!(
            "cloud-provider-aws could not use the cloud config {} here:\n  - {}\n(or leave --aws-cloud-config out: the \
             stack writes one for this cloud)",
            path.display(),
            problems.join("\n  - ")
        );
    }
    Ok(text)
}

/// Tag the cluster's network as an AWS user does for cloud-provider-aws ([`aws_cluster::tag_network`]), then
/// write the CCM's cloud config (the user's own, `user_config`, once it is found to name this cloud) and, for the
/// user's shell, the face's settings ([`AWS_ENV`]) in the run directory.
pub async fn set_up(
    region: &str,
    url: &str,
    dir: &RunDir,
    aws_cli: &Path,
    user_config: Option<&Path>,
) -> anyhow::Result<Setup> {
    let credentials_file = dir.credentials();
    let text = std::fs::read_to_string(&credentials_file)
        .with_context(|| format!("reading the emulator's credentials, {}", credentials_file.display()))?;
    let key = |name| {
        fakecloud_api::credential(&text, name).with_context(|| {
            format!("{} has no {name}: is the emulator older than its AWS face?", credentials_file.display())
        })
    };
    let (access_key_id, secret_access_key) = (key(ACCESS_KEY_ID)?, key(SECRET_ACCESS_KEY)?);
    let cli = AwsCli { path: aws_cli, url, region, keys: (&access_key_id, &secret_access_key) };
    let network = aws_cluster::tag_network(&cli, CLUSTER_ID).await?;
    let config = match user_config {
        Some(path) => {
            let cloud = aws_cloud_config::Cloud {
                region,
                vpc: &network.vpc,
                subnets: &network.subnets,
                cluster_id: CLUSTER_ID,
                url,
            };
            user_cloud_config(path, Some(&cloud))?
        }
        None => network.cloud_config(region, CLUSTER_ID, url).text(),
    };
    fakecloud_controlplane::files::write(&dir.file(AWS_CLOUD_CONFIG), config.as_bytes(), 0o644)?;
    // What a user's shell needs for the AWS CLI or boto3 on the face: `source` it.
    let env = format!(
        "export AWS_ENDPOINT_URL={url}\nexport AWS_DEFAULT_REGION={region}\nexport {ACCESS_KEY_ID}={access_key_id}\n\
         export {SECRET_ACCESS_KEY}={secret_access_key}\n"
    );
    fakecloud_controlplane::files::write(&dir.file(AWS_ENV), env.as_bytes(), 0o600)?;
    Ok(Setup { cloud_config: dir.file(AWS_CLOUD_CONFIG), access_key_id, secret_access_key })
}

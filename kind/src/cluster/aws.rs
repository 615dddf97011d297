//! kind-up's part for cloud-provider-aws (`FAKECLOUD_KIND_CCM=aws`, issue #50): the cluster set up on the
//! emulator's AWS face as an AWS user sets one up for that CCM — with the AWS CLI, as the local stack does
//! (`fakecloud_controlplane::aws_cluster`) — and the kind nodes registered as kubelets on EC2 register theirs.
//!
//! cloud-provider-aws finds a Node's machine by its providerID, else by the Node's name taken as the machine's
//! private DNS name (`getProviderID`, instances_v2.go). kind names its nodes after their containers, so each
//! Node gets the providerID a kubelet started with `--provider-id aws:///<zone>/<i-…>` would have registered:
//! kind's kubelets start before their machines are instances, so kind-up writes it once they are.

use std::path::Path;

use anyhow::Context as _;
use fakecloud_api::{Client, InstanceState, ListInstancesQuery};
use fakecloud_controlplane::aws_cluster::{self, AwsCli, CLUSTER_ID};
use fakecloud_controlplane::composition::{AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY};

use super::tools::Tools;

/// What the CCM's Secret holds and the user's shell gets.
pub struct Setup {
    /// cloud-provider-aws's cloud config, its APIs at the face as the pods reach it.
    pub cloud_config: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: String,
}

/// Tag the instances adopted for the kind nodes and the region's network as cluster [`CLUSTER_ID`]'s, give each
/// Node its providerID, and write the CCM's cloud config for `in_cluster_url`. `endpoint` is where this host
/// reaches the emulator; `credentials` the emulator's credentials file (its tokens and key pair).
pub fn set_up(
    tools: &Tools<'_>,
    endpoint: &str,
    in_cluster_url: &str,
    credentials: &str,
    aws_cli: &Path,
) -> anyhow::Result<Setup> {
    let key = |name: &str| {
        fakecloud_api::credential(credentials, name).with_context(|| {
            format!("the emulator's credentials file has no {name}: is its image older than its AWS face?")
        })
    };
    let (access_key_id, secret_access_key) = (key(AWS_ACCESS_KEY_ID)?, key(AWS_SECRET_ACCESS_KEY)?);
    let cloud = Client::new(endpoint, key(fakecloud_api::ENV_USER_TOKEN)?)?;
    let nodes = tools.kubectl(["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"]).output()?;
    let nodes: Vec<&str> = nodes.split_whitespace().collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let region = cloud.region().await.context("reading the emulator's region")?.name;
        let cli = AwsCli { path: aws_cli, url: endpoint, region: &region, keys: (&access_key_id, &secret_access_key) };
        // `fakecloud adopt` named each instance after its Node.
        let adopted: Vec<_> = cloud
            .list_all_instances(&ListInstancesQuery { page_size: Some(1000), ..Default::default() })
            .await?
            .into_iter()
            .filter(|i| i.state != InstanceState::Terminated && nodes.contains(&i.name.as_str()))
            .collect();
        let ids: Vec<&str> = adopted.iter().map(|i| i.id.as_str()).collect();
        aws_cluster::tag_instances(&cli, &ids, CLUSTER_ID).await?;
        let network = aws_cluster::tag_network(&cli, CLUSTER_ID).await?;
        for i in &adopted {
            let patch = serde_json::json!({"spec": {"providerID": aws_cluster::provider_id(&i.zone, &i.id)}});
            tools.kubectl(["patch", "node", &i.name, "-p", &patch.to_string()]).run()?;
        }
        tracing::info!(
            "tagged {} instances, {} and its subnets as cluster {CLUSTER_ID}'s; every Node has its aws:/// providerID",
            ids.len(),
            network.vpc
        );
        let cloud_config = network.cloud_config(&region, CLUSTER_ID, in_cluster_url).text();
        Ok(Setup {
            cloud_config,
            access_key_id: access_key_id.clone(),
            secret_access_key: secret_access_key.clone(),
            region,
        })
    })
}

//! Bug pack: kubernetes/cloud-provider-openstack#3114 — a Node without a providerID whose instance was deleted:
//! the provider looked the instance up by the Node's name, got "failed to find object" (an error, not "not
//! found"), and the lifecycle controller, which deletes only on a clean "does not exist", kept the NotReady
//! Node forever.
//!
//! Staged: a machine whose Node was registered with neither the uninitialized taint nor a providerID (as before
//! any CCM ran), the machine then terminated (the cloud keeps listing it, terminated, for a while: the lookup by
//! name finds it) and its kubelet silent. Asserted: the Node is deleted, with `DeletingNode`. Any backend, every
//! CCM.
//!
//! cloud-provider-aws finds a Node without a providerID by its name taken as the private DNS name, among
//! instances that are not terminated (`findInstanceByNodeName`, aws.go L3610), so the Node is named so, as a
//! kubelet on EC2 names it; none found is `InstanceNotFound`, a clean "does not exist" (`InstanceExists`,
//! instances_v2.go).
#![allow(clippy::unwrap_used)]

use fakecloud_api::net::private_dns_name;
use fakecloud_e2e::own_node::{OwnNode, Registration};
use fakecloud_e2e::{HANG, Setup, case, until};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_provider_id_whose_instance_is_gone_is_deleted() {
    case("bug-3114", Setup::new(CCM).stated_for_aws(), async |env| {
        let m = env.machine_without_kubelet("k3114").await;
        let name = if env.ccm_is_aws() { private_dns_name(&m.id, m.private_ip, &m.region) } else { m.name.clone() };
        let mut node = OwnNode::register(env.nodes(), &m, &name, Registration::Bare, &[], true).await;
        env.cloud.terminate_instance(&m.id).await.unwrap();
        node.stop();
        until(env.timing.node_loss(), "the Node deleted", async || env.node_gone(&name).await.then_some(())).await;
        let deleting = env.event("default", &name, "DeletingNode", HANG).await;
        let expected = format!("Deleting node {name} because it does not exist in the cloud provider");
        assert_eq!(deleting.message, Some(expected));
        if env.ccm_is_aws() {
            // (The AWS face's audit log names no instance for a DescribeInstances: a filter is no resource.)
            return;
        }
        let had_id = env.ccm_calls(&["GetInstance"]).await.into_iter().any(|c| c.resource_id.as_ref() == Some(&m.id));
        assert!(!had_id, "looked up by name: the Node never had a providerID");
    })
    .await;
}

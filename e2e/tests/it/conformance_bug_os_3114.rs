//! Bug pack: kubernetes/cloud-provider-openstack#3114 — a Node without a providerID whose instance was deleted:
//! the provider looked the instance up by the Node's name, got "failed to find object" (an error, not "not
//! found"), and the lifecycle controller, which deletes only on a clean "does not exist", kept the NotReady
//! Node forever.
//!
//! Staged: a machine whose Node was registered with neither the uninitialized taint nor a providerID (as before
//! any CCM ran), the machine then terminated (the cloud keeps listing it, terminated, for a while: the lookup by
//! name finds it) and its kubelet silent. Asserted: the Node is deleted, with `DeletingNode`. Any backend, both
//! CCMs.
#![allow(clippy::unwrap_used)]

use fakecloud_e2e::own_node::{OwnNode, Registration};
use fakecloud_e2e::{HANG, Setup, case, until};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_provider_id_whose_instance_is_gone_is_deleted() {
    case("bug-3114", Setup::new(CCM), async |env| {
        let m = env.machine_without_kubelet("k3114").await;
        let mut node = OwnNode::register(env.nodes(), &m, &m.name, Registration::Bare, &[], true).await;
        env.cloud.terminate_instance(&m.id).await.unwrap();
        node.stop();
        until(env.timing.node_loss(), "the Node deleted", async || env.node_gone(&m.name).await.then_some(())).await;
        let deleting = env.event("default", &m.name, "DeletingNode", HANG).await;
        let expected = format!("Deleting node {} because it does not exist in the cloud provider", m.name);
        assert_eq!(deleting.message, Some(expected));
        let had_id = env.ccm_calls(&["GetInstance"]).await.into_iter().any(|c| c.resource_id.as_ref() == Some(&m.id));
        assert!(!had_id, "looked up by name: the Node never had a providerID");
    })
    .await;
}

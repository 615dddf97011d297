//! Bug pack: kubernetes/kubernetes#29298 (with kops#2608) — on AWS, a LoadBalancer Service stayed `<pending>`:
//! "could not find any suitable subnets for creating the ELB". cloud-provider-aws puts an internet-facing ELB in
//! the public subnets tagged as its cluster's (or claimed by no cluster); failing those, only in its own subnet,
//! and only if that one is public (`findSubnets`, `findELBSubnets`, `isSubnetPublic`: aws.go L1648, L1687, L1882).
//! A VPC whose subnets carry another cluster's tag, with the nodes in a private subnet, offers none. No fix in the
//! CCM: the user tags the public subnets as the cluster's, and the Service must then heal.
//!
//! Staged with the reproduction users run, `scripts/aws-subnets.sh` (the AWS CLI on the face): `another-cluster`
//! (every subnet tagged for another cluster; the CCM's own associated with a route table of its own, which has no
//! internet gateway route), then `tagged`, and `as-made` at the end. Asserted: `<pending>`, with a Warning that
//! carries the CCM's error; once tagged, the ELB without a restart, in the public subnets only.
#![allow(clippy::unwrap_used)]

use fakecloud_e2e::{HANG, Setup, case, lb};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
const SCRIPT: &str = "aws-subnets.sh";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subnets_tagged_for_another_cluster_pend_until_tagged() {
    let why = "its ELBs' subnets come from subnet tags and route tables; the other CCMs place load balancers by zone";
    case("bug-29298", Setup::new(CCM).only_for_aws(why), async |env| {
        let cluster = env.cluster_name.as_str();
        env.aws_script(SCRIPT, &["another-cluster", cluster]).await;
        let outcome = async {
            env.initialized_nodes("k29298", 1).await;
            let ns = env.namespace("bug-29298").await;
            let services = Api::<Service>::namespaced(env.client(), &ns);
            let web = services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await;
            let web = web.unwrap();

            let failed = env.event(&ns, "web", "SyncLoadBalancerFailed", HANG).await;
            let msg = failed.message.unwrap_or_default();
            assert_eq!(failed.type_.as_deref(), Some("Warning"));
            assert!(msg.contains("could not find any suitable subnets for creating the ELB"), "{msg}");
            assert_eq!(lb::ingress(&services.get("web").await.unwrap()), None, "<pending> while no subnet suits");

            env.aws_script(SCRIPT, &["tagged", cluster]).await;
            lb::wait_for_ingress(&services, "web", HANG).await;
            let subnets = env.aws_ec2(&["describe-subnets"]).await;
            let all: Vec<&str> =
                subnets["Subnets"].as_array().unwrap().iter().filter_map(|s| s["SubnetId"].as_str()).collect();
            let elb = env.aws_elb(&["describe-load-balancers", "--load-balancer-names", &lb::name(&web)]).await;
            let placed: Vec<&str> = elb["LoadBalancerDescriptions"][0]["Subnets"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s.as_str())
                .collect();
            // The CCM's own subnet is the region's first (the cloud config's SubnetID), private now.
            assert_eq!(placed, all[1..], "the ELB in the public subnets, not the CCM's private one");
        };
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
        // Put back whatever happened: the next case on a shared cluster needs the subnets as they were.
        env.aws_script(SCRIPT, &["as-made", cluster]).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    })
    .await;
}

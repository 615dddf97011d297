//! Bug pack: kubernetes/kubernetes#68684 (with #73086 and zalando-incubator/kubernetes-on-aws#195) — a
//! LoadBalancer Service with many `loadBalancerSourceRanges` stayed `<pending>`: the AWS provider writes them as
//! the rules of the ELB's one security group, and AWS refuses a group more rules than its quota
//! (`RulesPerSecurityGroupLimitExceeded`, 60 by default). Since #63572 (1.12) every range costs two rules, the
//! port and ICMP "fragmentation needed" for path MTU discovery (#73086), so 31 ranges are already too many. No
//! fix in the CCM: the user raises the quota (or brings fewer ranges), and the Service must then heal.
//!
//! Staged: a Service with 40 source ranges on a cloud whose limit holds fewer: the security group's 60 rules
//! under cloud-provider-aws (40 ranges are 80 rules), the load balancer's source-range quota lowered to 30 for
//! fakecloud's CCMs (they carry the ranges on the load balancer itself). Asserted: `<pending>`, with a Warning
//! that names the refusal; raised, the Service gets its address without a restart, and all 40 ranges are
//! enforced (under cloud-provider-aws: the group's 80 rules). Any backend, every CCM.
#![allow(clippy::unwrap_used)]

use fakecloud_api::QuotaName;
use fakecloud_e2e::{HANG, Setup, case, lb};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
const RANGES: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_source_ranges_over_the_clouds_limit_pend_until_it_is_raised() {
    case("bug-68684", Setup::new(CCM).stated_for_aws(), async |env| {
        let aws = env.ccm_is_aws();
        // The limit that refuses 40 ranges, and the code that says so.
        let (quota, low, code) = if aws {
            (
                QuotaName::RulesPerSecurityGroup,
                QuotaName::RulesPerSecurityGroup.default_limit(),
                "RulesPerSecurityGroupLimitExceeded",
            )
        } else {
            (QuotaName::SourceRangesPerLoadBalancer, 30, "SourceRangeLimitExceeded")
        };
        env.cloud.set_quota(quota, low).await.unwrap();
        env.initialized_nodes("k68684", 1).await;
        let ns = env.namespace("bug-68684").await;
        let services = Api::<Service>::namespaced(env.client(), &ns);
        // 198.18.0.0/15, the benchmarking range: 40 /24s of it.
        let ranges: Vec<String> = (0..RANGES).map(|i| format!("198.18.{i}.0/24")).collect();
        let spec = serde_json::json!({"loadBalancerSourceRanges": ranges});
        let web = services.create(&PostParams::default(), &lb::service("web", 443, spec)).await.unwrap();

        let failed = env.event(&ns, "web", "SyncLoadBalancerFailed", HANG).await;
        let msg = failed.message.unwrap_or_default();
        assert_eq!(failed.type_.as_deref(), Some("Warning"));
        assert!(msg.contains(code), "the event names the refusal ({code}): {msg}");
        let pending = services.get("web").await.unwrap();
        assert_eq!(lb::ingress(&pending), None, "<pending> while refused");

        // Raised: the next retry of the service controller's backoff heals it, without a restart.
        env.cloud.set_quota(quota, 100).await.unwrap();
        lb::wait_for_ingress(&services, "web", HANG).await;
        if aws {
            let cidrs: Vec<&str> = ranges.iter().map(String::as_str).collect();
            let rules = env.elb_group_rules(&web).await.unwrap();
            assert_eq!(rules, lb::elb_rules(443, &cidrs), "two rules a range, all there");
            assert_eq!(rules.len(), 2 * RANGES);
        } else {
            let found = env.cloud.find_load_balancer(&lb::name(&web)).await.unwrap().unwrap();
            assert_eq!(found.source_ranges, ranges, "every range on the load balancer");
        }
    })
    .await;
}

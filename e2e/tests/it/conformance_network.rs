//! Conformance: the pod network is the cloud's routing. A pod on one node reaches a pod on another only while
//! the cloud's route table has the route to the other node's pod CIDR — the route the CCM's route controller
//! creates. With the route deleted and the route quota full ("route table limit"), traffic to that node's pods
//! stops; raising the quota lets the CCM put the route back and traffic flows again, without a restart. On a
//! dual-stack cluster every family is checked: one route per pod CIDR, one probe per pod IP.
//!
//! Needs real pods on two nodes (kind: `make e2e-kind`, whose VPC router programs the cloud's routes onto the
//! nodes); skipped where the kubelets are simulated.
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::time::Duration;

use fakecloud_api::{QuotaName, Route};
use fakecloud_e2e::{HANG, Setup, case, condition, until};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
/// An image every node has: `make kind-up` loads the emulator's into the kind nodes. Its `fakecloud serve` is
/// the server and its bash (`/dev/tcp`) the client.
const DEFAULT_IMAGE: &str = "fakecloud/emulator:dev";
const PORT: u16 = 8080;

fn pod(name: &str, node: &str, image: &str, command: &[&str]) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "fakecloud-e2e"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": command}],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_traffic_between_nodes_follows_the_cloud_route_table() {
    // cloud-provider-aws routes through the same table (`CreateRoute` to the instance), refused at the quota with
    // `RouteLimitExceeded`: nothing here differs.
    case("pod-network", Setup::new(CCM).runs_pods_on(2).stated_for_aws(), async |env| {
        let image = std::env::var("FAKECLOUD_E2E_POD_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.into());
        let nodes = env.pod_nodes().await;
        let (server_node, client_node) = (&nodes[0], &nodes[1]);
        let server_node_name = server_node.metadata.name.clone().unwrap();
        let pod_cidrs: Vec<ipnet::IpNet> = server_node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidrs.clone())
            .unwrap_or_default()
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        assert!(!pod_cidrs.is_empty(), "{server_node_name} has pod CIDRs");
        let ns = env.namespace("net").await;
        let pods = Api::<Pod>::namespaced(env.client(), &ns);

        // On a dual-stack node `[::]` takes both families (Linux maps IPv4 onto an IPv6 socket).
        let any = if pod_cidrs.iter().any(|c| matches!(c, ipnet::IpNet::V6(_))) { "[::]" } else { "0.0.0.0" };
        let listen = format!("{any}:{PORT}");
        let server = ["fakecloud", "serve", "--listen", &listen, "--db", ":memory:"];
        pods.create(&PostParams::default(), &pod("server", &server_node_name, &image, &server)).await.unwrap();
        let server_ips = until(HANG, "the server pod running with its IPs", async || {
            let status = pods.get("server").await.ok()?.status?;
            let ips: Vec<IpAddr> = status.pod_ips?.iter().filter_map(|p| p.ip.parse().ok()).collect();
            (status.phase.as_deref() == Some("Running") && ips.len() == pod_cidrs.len()).then_some(ips)
        })
        .await;
        for ip in &server_ips {
            assert!(
                pod_cidrs.iter().any(|c| c.contains(ip)),
                "the server pod's IP {ip} is from one of its node's pod CIDRs {pod_cidrs:?}"
            );
        }
        // One line a second, a word per server IP: whether a TCP connection to it got through.
        let targets = server_ips.iter().map(|ip| format!("'{ip}'")).collect::<Vec<_>>().join(" ");
        let probe = format!(
            "while true; do out=; for ip in {targets}; do \
             if timeout 2 bash -c \"echo > /dev/tcp/$ip/{PORT}\" 2>/dev/null; then out=\"$out reach\"; \
             else out=\"$out unreachable\"; fi; done; echo $out; sleep 1; done"
        );
        let client_node_name = client_node.metadata.name.clone().unwrap();
        pods.create(&PostParams::default(), &pod("client", &client_node_name, &image, &["bash", "-c", &probe]))
            .await
            .unwrap();
        // The last three answers agree on `want` for every server IP.
        let answers = async |want: &str| {
            let want = vec![want; server_ips.len()].join(" ");
            let params = LogParams { tail_lines: Some(3), ..Default::default() };
            let log = pods.logs("client", &params).await.ok()?;
            let lines: Vec<&str> = log.lines().collect();
            (lines.len() == 3 && lines.iter().all(|l| *l == want)).then_some(())
        };
        let route_wait = env.timing.routes() + Duration::from_secs(30);
        until(route_wait, &format!("{client_node_name} reaching a pod on {server_node_name}"), async || {
            answers("reach").await
        })
        .await;

        // The routes to the server's node deleted (one per family), and no room for the CCM to create them again.
        let cloud = &env.cloud;
        let to_server = |r: &&Route| r.destination.parse::<ipnet::IpNet>().is_ok_and(|d| pod_cidrs.contains(&d));
        let routes = cloud.list_routes("main").await.unwrap().items;
        let server_routes: Vec<&Route> = routes.iter().filter(to_server).collect();
        assert_eq!(server_routes.len(), pod_cidrs.len(), "the cloud has a route per pod CIDR: {routes:#?}");
        cloud.set_quota(QuotaName::RoutesPerRouteTable, (routes.len() - server_routes.len()) as u32).await.unwrap();
        for route in server_routes {
            cloud.delete_route("main", &route.id).await.unwrap();
        }
        until(route_wait, "traffic to the node without a route stopping", async || answers("unreachable").await).await;
        until(route_wait, "the node NetworkUnavailable (the CCM could not route it)", async || {
            let n = env.node(&server_node_name).await?;
            condition(&n, "NetworkUnavailable").filter(|c| c.0 == "True").map(|_| ())
        })
        .await;

        // Room again: the CCM routes the node, and traffic flows.
        cloud.set_quota(QuotaName::RoutesPerRouteTable, routes.len() as u32 + 10).await.unwrap();
        until(route_wait, "traffic flowing again once the CCM re-created the route", async || answers("reach").await)
            .await;
        let again = cloud.list_routes("main").await.unwrap().items;
        assert_eq!(again.iter().filter(to_server).count(), pod_cidrs.len(), "the routes are back: {again:#?}");
    })
    .await;
}

//! Conformance: a LoadBalancer Service's EXTERNAL-IP carries traffic. The emulator's data plane
//! (`fakecloud serve --serve-load-balancers`) accepts on the load balancer's address and forwards to the nodes'
//! NodePort, where kube-proxy sends it on to the Service's pod; the answer comes from that pod. When the Service
//! stops being a LoadBalancer, the CCM deletes the load balancer and its address stops answering.
//!
//! Needs real pods and an emulator that serves its load balancers on addresses this host reaches (kind:
//! `make e2e-kind`, whose emulator holds a slice of the kind network); skipped where the kubelets are simulated.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use fakecloud_e2e::{Setup, case, lb, until};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CCM: &str = env!("CARGO_BIN_EXE_e2e-fakecloud-ccm");
/// An image every kind node has (`make kind-up` loads it): its `fakecloud serve` answers `GET /healthz`.
const DEFAULT_IMAGE: &str = "fakecloud/emulator:dev";

/// `GET /healthz` on `ip:port`: the status line, or why there was none.
async fn get_healthz(ip: &str, port: u16) -> Result<String, String> {
    let exchange = async {
        let mut s = TcpStream::connect((ip, port)).await.map_err(|e| format!("connect: {e}"))?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&answer);
        text.lines().next().filter(|l| !l.is_empty()).map(str::to_string).ok_or_else(|| "no answer".to_string())
    };
    tokio::time::timeout(Duration::from_secs(10), exchange).await.map_err(|_| "timed out".to_string())?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_external_ip_answers_from_a_pod_until_the_service_is_no_load_balancer() {
    case("lb-traffic", Setup::new(CCM).runs_pods_on(1), async |env| {
        let image = std::env::var("FAKECLOUD_E2E_POD_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.into());
        let node = env.pod_nodes().await[0].metadata.name.clone().unwrap();
        let ns = env.namespace("lb-traffic").await;
        let pods = Api::<Pod>::namespaced(env.client(), &ns);
        let web: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "labels": {"app": "web", "app.kubernetes.io/part-of": "fakecloud-e2e"}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                    "command": ["fakecloud", "serve", "--listen", "0.0.0.0:8080", "--db", ":memory:"]}],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &web).await.unwrap();
        until(Duration::from_secs(120), "the web pod running", async || {
            let status = pods.get("web").await.ok()?.status?;
            (status.phase.as_deref() == Some("Running")).then_some(())
        })
        .await;

        let services = Api::<Service>::namespaced(env.client(), &ns);
        let svc =
            services.create(&PostParams::default(), &lb::service("web", 80, serde_json::json!({}))).await.unwrap();
        let ip = lb::wait_for_ip(&services, "web", Duration::from_secs(60)).await;
        let name = lb::name(&svc);
        let cloud_lb = env.cloud.list_load_balancers(&Default::default()).await.unwrap().items;
        let cloud_lb = cloud_lb.into_iter().find(|l| l.name == name).expect("the Service's load balancer");
        if cloud_lb.listener_status.is_empty() {
            panic!(
                "the emulator does not serve load balancers (no listener_status on {}): run it with \
                 --serve-load-balancers and a public pool this host reaches, as make kind-up does",
                cloud_lb.id
            );
        }
        // From the host: through the emulator's listener, a node's NodePort and kube-proxy, to the pod.
        let answered = until(Duration::from_secs(60), &format!("http://{ip}:80/healthz answering"), async || {
            get_healthz(&ip, 80).await.ok()
        })
        .await;
        assert!(answered.contains(" 200"), "the pod answers through the EXTERNAL-IP: {answered}");
        let lb_now = env.cloud.get_load_balancer(&cloud_lb.id).await.unwrap();
        assert!(
            lb_now.listener_status.iter().any(|l| l.port == 80 && l.state == fakecloud_api::ListenerState::Listening),
            "the cloud shows its listener listening: {:?}",
            lb_now.listener_status
        );

        // Not a LoadBalancer any more: the CCM deletes the load balancer, and its address stops answering.
        let to_cluster_ip = serde_json::json!({"spec": {"type": "ClusterIP"}});
        services.patch("web", &PatchParams::default(), &Patch::Merge(&to_cluster_ip)).await.unwrap();
        let gone = until(Duration::from_secs(60), &format!("http://{ip}:80 no longer answering"), async || {
            get_healthz(&ip, 80).await.err()
        })
        .await;
        eprintln!("after the type change: {gone}");
    })
    .await;
}

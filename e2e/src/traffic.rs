//! Traffic for the load balancer cases: pods of upstream's e2e test server (`agnhost netexec`, which says which
//! pod answered) and a small HTTP/1.1 client that talks to an EXTERNAL-IP from this host, one request per
//! connection or several on one kept-alive connection.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// `make kind-up` builds upstream's agnhost from the cluster's Kubernetes release and loads it into the nodes;
/// upstream's own image (`registry.k8s.io/e2e-test-images/agnhost:2.x`) does the same where a registry is near.
pub const DEFAULT_AGNHOST_IMAGE: &str = "fakecloud/agnhost:dev";
/// The port `netexec` serves HTTP on in the pods (the Services' `targetPort`).
pub const NETEXEC_PORT: u16 = 8080;
/// The port `netexec` answers UDP on: a `hostname` datagram gets the pod's name back.
pub const NETEXEC_UDP_PORT: u16 = 8081;
/// How long one exchange may take before it counts as failed: the checks on what comes back depend on it, so
/// only a hang takes this long (a refused or closed connection fails at once).
const EXCHANGE_TIMEOUT: Duration = crate::HANG;

/// The agnhost image the cases run (`FAKECLOUD_E2E_AGNHOST_IMAGE`, else [`DEFAULT_AGNHOST_IMAGE`]).
pub fn agnhost_image() -> String {
    std::env::var("FAKECLOUD_E2E_AGNHOST_IMAGE").unwrap_or_else(|_| DEFAULT_AGNHOST_IMAGE.into())
}

/// A pod on `node` labelled `app: <app>` running `agnhost netexec`, ready once it answers `/hostname` (so an
/// endpoint, and a node's `healthCheckNodePort`, count it only when it serves).
pub fn netexec_pod(name: &str, app: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": app, "app.kubernetes.io/part-of": "fakecloud-e2e"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "netexec", "image": agnhost_image(), "imagePullPolicy": "IfNotPresent",
                "args": ["netexec", format!("--http-port={NETEXEC_PORT}"), format!("--udp-port={NETEXEC_UDP_PORT}")],
                "readinessProbe": {"httpGet": {"path": "/hostname", "port": NETEXEC_PORT}, "periodSeconds": 1},
            }],
        },
    }))
    .expect("a valid Pod")
}

/// Create `netexec_pod(name, app, node)` in `pods`' namespace and wait until it is Ready.
pub async fn start_netexec(pods: &Api<Pod>, name: &str, app: &str, node: &str) {
    pods.create(&PostParams::default(), &netexec_pod(name, app, node)).await.expect("the netexec pod is created");
    crate::until(crate::HANG, &format!("pod {name} ready"), async || {
        let conditions = pods.get(name).await.ok()?.status?.conditions?;
        conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await;
}

/// An HTTP answer: the status code and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// `GET path` on a new connection to `ip:port`; the answer, or what went wrong (refused, reset, closed
/// without an answer, timed out).
pub async fn get(ip: &str, port: u16, path: &str) -> Result<Answer, String> {
    let mut conn = Conn::open(ip, port).await?;
    conn.get(path).await
}

/// One kept-alive connection: several requests, one after the other, on the same socket.
pub struct Conn {
    stream: BufReader<TcpStream>,
}

impl Conn {
    pub async fn open(ip: &str, port: u16) -> Result<Self, String> {
        let connect = TcpStream::connect((ip, port));
        let stream = tokio::time::timeout(EXCHANGE_TIMEOUT, connect)
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| format!("connect: {e}"))?;
        Ok(Self { stream: BufReader::new(stream) })
    }

    /// This end's address: what a backend sees as the client's when the packets reach it unchanged.
    pub fn local_addr(&self) -> Result<std::net::SocketAddr, String> {
        self.stream.get_ref().local_addr().map_err(|e| format!("local address: {e}"))
    }

    /// `GET path` on this connection, which stays open for the next one.
    pub async fn get(&mut self, path: &str) -> Result<Answer, String> {
        tokio::time::timeout(EXCHANGE_TIMEOUT, self.exchange(path)).await.map_err(|_| "timed out".to_string())?
    }

    async fn exchange(&mut self, path: &str) -> Result<Answer, String> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: lb\r\n\r\n");
        self.stream.get_mut().write_all(request.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
        let mut line = String::new();
        let n = self.stream.read_line(&mut line).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed without an answer".into());
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not an HTTP status line: {line:?}"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.map_err(|e| format!("read: {e}"))?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().map_err(|_| format!("bad Content-Length: {header}"))?;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.map_err(|e| format!("read body: {e}"))?;
        Ok(Answer { status, body: String::from_utf8_lossy(&body).into_owned() })
    }
}

/// Send `hostname` in a datagram to `ip:port` from a new socket; netexec's answer (the pod's name), or why
/// none came (within 2 s: UDP has no refusal to wait for).
pub async fn udp_hostname(ip: &str, port: u16) -> Result<String, String> {
    let socket = tokio::net::UdpSocket::bind("0.0.0.0:0").await.map_err(|e| format!("bind: {e}"))?;
    socket.connect((ip, port)).await.map_err(|e| format!("connect: {e}"))?;
    socket.send(b"hostname").await.map_err(|e| format!("send: {e}"))?;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(2), socket.recv(&mut buf))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| format!("recv: {e}"))?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

/// `GET /hostname` `count` times on new connections: the pods that answered, in order, or the first failure.
pub async fn hostnames(ip: &str, port: u16, count: usize) -> Result<Vec<String>, String> {
    let mut names = Vec::with_capacity(count);
    for _ in 0..count {
        let answer = get(ip, port, "/hostname").await?;
        if answer.status != 200 {
            return Err(format!("GET /hostname answered {}: {}", answer.status, answer.body));
        }
        names.push(answer.body);
    }
    Ok(names)
}

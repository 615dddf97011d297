//! fakecloud in a test, started the way a test starts Postgres or LocalStack: a [testcontainers] module for
//! the emulator's image (`fakecloud/emulator`, which `make kind-up` builds), ready once it says it is serving,
//! with clients of the API crate for both tokens.
//!
//! ```no_run
//! use fakecloud_testcontainers::FakeCloud;
//!
//! # async fn example() -> Result<(), fakecloud_testcontainers::Error> {
//! let cloud = FakeCloud::default().with_serve_args(["--boot-delay", "0s"]).run().await?;
//! let req = fakecloud_api::CreateInstanceRequest { name: "node-a".into(), ..Default::default() };
//! let instance = cloud.user().create_instance(&req, None).await?;
//! // Point the code under test at cloud.endpoint() with cloud.user_token(); the container is removed when
//! // `cloud` is dropped.
//! # Ok(())
//! # }
//! ```
//!
//! [`FakeCloud::run`] publishes the emulator's port on the engine host's loopback address only (`127.0.0.1`):
//! `/console` and `/metrics` answer without a token, and nothing else on the network should reach them. A test
//! that is not on the engine's host — the engine on another machine (`DOCKER_HOST=tcp://...`), or the test in a
//! container beside the engine rather than in its host's network — publishes it on another address with
//! [`FakeCloud::with_published_address`] (e.g. `0.0.0.0`, every interface). Starting the image with
//! testcontainers' own runner (`AsyncRunner::start`) instead publishes it as testcontainers does, on every
//! interface.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use fakecloud_api::{Client, ClientError};
use testcontainers::bollard::models::PortBinding;
use testcontainers::core::{ContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, Image, ImageExt, TestcontainersError};

/// The emulator's image as `make kind-up` (`fakecloud-kind images`) tags it.
pub const IMAGE: &str = "fakecloud/emulator";
pub const TAG: &str = "dev";
/// The port the image's emulator listens on.
pub const PORT: ContainerPort = ContainerPort::Tcp(8787);
/// What `fakecloud serve` writes to stderr once it is listening.
const READY: &str = "fakecloud: serving ";
/// The host address [`PORT`] is published on unless [`FakeCloud::with_published_address`] says otherwise.
pub const PUBLISHED_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the fakecloud container: {0}")]
    Container(#[from] TestcontainersError),
    #[error("a client of the fakecloud container: {0}")]
    Client(#[from] ClientError),
}

/// The emulator's image, its tokens and `fakecloud serve` flags. The default is the image `make kind-up`
/// builds, with tokens of its own (random, so two tests never share one by accident).
#[derive(Debug, Clone)]
pub struct FakeCloud {
    name: String,
    tag: String,
    user_token: String,
    admin_token: String,
    serve_args: Vec<String>,
    published_address: IpAddr,
}

impl Default for FakeCloud {
    fn default() -> Self {
        let token = |role: &str| format!("{role}-{}", uuid::Uuid::new_v4().simple());
        Self {
            name: IMAGE.into(),
            tag: TAG.into(),
            user_token: token("user"),
            admin_token: token("admin"),
            serve_args: Vec::new(),
            published_address: PUBLISHED_ADDRESS,
        }
    }
}

impl FakeCloud {
    /// Another image or tag of the emulator (one whose entrypoint is `fakecloud serve` on port 8787).
    pub fn with_image(mut self, name: impl Into<String>, tag: impl Into<String>) -> Self {
        (self.name, self.tag) = (name.into(), tag.into());
        self
    }

    /// The customer's and the admin's tokens (at least 16 characters, as `fakecloud serve` asks).
    pub fn with_tokens(mut self, user: impl Into<String>, admin: impl Into<String>) -> Self {
        (self.user_token, self.admin_token) = (user.into(), admin.into());
        self
    }

    /// More `fakecloud serve` flags, e.g. `["--boot-delay", "0s"]` (see `fakecloud serve --help`).
    pub fn with_serve_args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.serve_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Publish the emulator's port on `address` of the engine's host instead of loopback ([`PUBLISHED_ADDRESS`]):
    /// `0.0.0.0` for every interface, when the test is not on the engine's host (`DOCKER_HOST=tcp://...`) or
    /// other machines must reach the emulator. Its `/console` and `/metrics` then answer anyone who can reach that
    /// address, without a token.
    pub fn with_published_address(mut self, address: IpAddr) -> Self {
        self.published_address = address;
        self
    }

    /// Start the container and wait until it answers; clients for both tokens come with it.
    pub async fn run(self) -> Result<Running, Error> {
        let (user_token, admin_token) = (self.user_token.clone(), self.admin_token.clone());
        let address = self.published_address;
        // testcontainers publishes every exposed port on every interface (its own mappings have no host address):
        // the port's binding is set here instead, on `address` and a free port of the engine's choosing.
        let binding = PortBinding { host_ip: Some(address.to_string()), host_port: Some(String::new()) };
        let container = self
            .with_host_config_modifier(move |host| {
                host.publish_all_ports = Some(false);
                host.port_bindings = Some(HashMap::from([(PORT.to_string(), Some(vec![binding.clone()]))]));
            })
            .start()
            .await?;
        let port = match address {
            IpAddr::V4(_) => container.get_host_port_ipv4(PORT).await?,
            IpAddr::V6(_) => container.get_host_port_ipv6(PORT).await?,
        };
        // Published on one address, it is reached there; on every interface, wherever testcontainers reaches the
        // engine's host.
        let host = match address {
            _ if address.is_unspecified() => container.get_host().await?.to_string(),
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        let endpoint = format!("http://{host}:{port}");
        let user = Client::new(&endpoint, &user_token)?;
        let admin = Client::new(&endpoint, &admin_token)?;
        Ok(Running { container, endpoint, user_token, user, admin })
    }
}

impl Image for FakeCloud {
    fn name(&self) -> &str {
        &self.name
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    fn ready_conditions(&self) -> Vec<WaitFor> {
        // Its log, not an HTTP probe: testcontainers probes the host it reaches the engine at, where a test in a
        // container reaches the engine's host at its bridge gateway, and a port published on loopback is not.
        // `fakecloud serve` says this once it is listening.
        vec![WaitFor::message_on_stderr(READY)]
    }

    fn env_vars(&self) -> impl IntoIterator<Item = (impl Into<Cow<'_, str>>, impl Into<Cow<'_, str>>)> {
        [
            (fakecloud_api::ENV_USER_TOKEN, self.user_token.as_str()),
            (fakecloud_api::ENV_ADMIN_TOKEN, self.admin_token.as_str()),
        ]
    }

    fn cmd(&self) -> impl IntoIterator<Item = impl Into<Cow<'_, str>>> {
        self.serve_args.iter().map(String::as_str)
    }

    fn expose_ports(&self) -> &[ContainerPort] {
        std::slice::from_ref(&PORT)
    }
}

/// A running fakecloud container: its endpoint, and clients as the customer (`user`, what a CCM uses) and as
/// the admin (faults, quotas, the audit log). Dropping it removes the container.
pub struct Running {
    container: ContainerAsync<FakeCloud>,
    endpoint: String,
    user_token: String,
    user: Client,
    admin: Client,
}

impl Running {
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The customer's token: what the code under test (a CCM's cloud config) is given.
    pub fn user_token(&self) -> &str {
        &self.user_token
    }

    pub fn user(&self) -> &Client {
        &self.user
    }

    pub fn admin(&self) -> &Client {
        &self.admin
    }

    /// The container itself (its logs, stop and start, exec).
    pub fn container(&self) -> &ContainerAsync<FakeCloud> {
        &self.container
    }
}

//! The library's errors. Each one says what failed, for the log line of the period that hit it.

use std::net::IpAddr;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the cloud API: {0}")]
    Cloud(#[from] fakecloud_api::ClientError),
    #[error("cannot open a netlink socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("netlink: {0}")]
    Netlink(#[from] rtnetlink::Error),
    #[error("route {destination} via {gateway}: the gateway is of the other IP family")]
    FamilyMismatch { destination: ipnet::IpNet, gateway: IpAddr },
    #[error(
        "no cloud instance is this node ({node}: providerID {provider_id:?}, InternalIPs {internal_ips:?}); \
         adopt it (`fakecloud adopt`) or let the CCM set its providerID"
    )]
    UnknownSelf { node: String, provider_id: Option<String>, internal_ips: Vec<IpAddr> },
    #[error("{failed} of {total} route changes failed (see the warnings above)")]
    Apply { failed: usize, total: usize },
}

impl Error {
    /// The delay the cloud asked for (`Retry-After` on a 429 or 503), if it asked.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Cloud(e) => e.retry_after(),
            _ => None,
        }
    }
}

//! The cloud's names, asked as a client on this host asks a resolver: the emulator answers them over DNS
//! (`fakecloud serve --dns-listen`; `make up` serves them on `--dns-port`, `make kind-up` on the emulator's address),
//! and the stack's and the suite's checks resolve a load balancer's DNS name here.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

/// The addresses `name` has at the DNS server `dns` (`ip:port`), asked over UDP with nothing cached, within
/// `within`; or why not.
pub async fn resolve(dns: &str, name: &str, within: Duration) -> Result<Vec<IpAddr>, String> {
    let at: SocketAddr = dns.parse().map_err(|e| format!("the DNS address {dns:?}: {e}"))?;
    let mut server = NameServerConfig::udp(at.ip());
    for c in &mut server.connections {
        c.port = at.port();
    }
    let config = ResolverConfig::from_parts(None, vec![], vec![server]);
    let mut builder = hickory_resolver::Resolver::builder_with_config(config, TokioRuntimeProvider::default());
    builder.options_mut().cache_size = 0;
    let resolver = builder.build().map_err(|e| e.to_string())?;
    let found = tokio::time::timeout(within, resolver.lookup_ip(name))
        .await
        .map_err(|_| format!("no answer for {name} from {dns} within {within:?}"))?;
    found.map(|f| f.iter().collect()).map_err(|e| format!("{name} at {dns}: {e}"))
}

//! The cloud's names over DNS (`fakecloud serve --dns-listen`): a load balancer's `dns_name`
//! (`<name>-<hash>.<region>.lb.fakecloud.test`, or a classic ELB's `<name>-<hash>.<region>.elb.amazonaws.com` as AWS
//! names it) answers its address once it is active, and an instance's private
//! DNS name (`ip-10-0-1-5.<region>.compute.internal`, as EC2 names it) its private address while it is not
//! terminated — so that pods, nodes and tests reach a load balancer by the hostname a CCM writes to a Service's
//! status, as on AWS. Authoritative for those zones only: any other name is refused (this is not a resolver;
//! CoreDNS or the test's own resolver forwards just these zones here). Each query reads the store, so a name
//! answers as soon as the native API shows the address; the records' short TTL keeps caches from holding a deleted
//! load balancer's address for long, and negative answers carry no SOA, so that no resolver caches a name that is
//! not there yet (RFC 2308, section 5).

use std::net::IpAddr;
use std::time::Duration;

use hickory_server::proto::op::{Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode};
use hickory_server::proto::rr::rdata::{A, AAAA};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::net::{TcpListener, UdpSocket};

use crate::db::Db;
use crate::error::Result;
use crate::store;

/// The zones of load balancers' names in `region`, each answered from the store's names: the native API's, and
/// classic ELB's and NLB's as AWS names them.
pub fn lb_zones(region: &str) -> [String; 3] {
    [
        store::load_balancers::LB_ZONE.to_string(),
        store::classic_elb::ELB_ZONE.to_string(),
        store::elbv2::nlb_zone(region),
    ]
}

/// Seconds a resolver may keep an answer.
const TTL: u32 = 5;
/// How long a TCP client may take to send its query before the connection is closed.
const TCP_TIMEOUT: Duration = Duration::from_secs(5);
/// Room for a TCP connection's pending answers.
const TCP_BUFFER: usize = 64;

/// What a name is.
#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    /// A name of the cloud's, with its addresses (none: the name exists, not with an address of the type asked).
    Found(Vec<IpAddr>),
    /// A name in the cloud's zones that is not there (`NXDOMAIN`).
    NoSuchName,
    /// A name outside the cloud's zones (`REFUSED`).
    NotOurs,
}

/// The cloud's names, answered from its store.
pub struct Names {
    db: Db,
    /// `<region>.compute.internal.`, the zone of instances' names.
    instance_zone: String,
    /// [`lb_zones`].
    lb_zones: [String; 3],
}

impl Names {
    pub fn new(db: Db, region: &str) -> Self {
        Self {
            db,
            instance_zone: format!("{}.compute.internal.", region.to_ascii_lowercase()),
            lb_zones: lb_zones(region),
        }
    }

    async fn lookup(&self, name: &str) -> Result<Lookup> {
        let name = name.to_ascii_lowercase();
        // The store keeps the name without the root's dot.
        let stored = name.trim_end_matches('.');
        if self.lb_zones.iter().any(|zone| stored.strip_suffix(zone.as_str()).is_some_and(|host| host.ends_with('.'))) {
            return Ok(match store::load_balancers::address_of_name(&self.db, stored).await? {
                Some(address) => Lookup::Found(vec![address]),
                None => Lookup::NoSuchName,
            });
        }
        if let Some(host) = name.strip_suffix(&self.instance_zone).and_then(|h| h.strip_suffix('.')) {
            return Ok(match instance_address(host) {
                Some(ip) if store::instances::holds_private_address(&self.db, ip).await? => Lookup::Found(vec![ip]),
                _ => Lookup::NoSuchName,
            });
        }
        Ok(Lookup::NotOurs)
    }
}

/// The address an IP-based private DNS name (`ip-10-0-1-5.<region>.compute.internal`) names, if `name` is one.
pub fn instance_name_address(name: &str, region: &str) -> Option<IpAddr> {
    let host = name.strip_suffix(".compute.internal")?.strip_suffix(region)?.strip_suffix('.')?;
    instance_address(host)
}

/// The address an instance's host label names: `ip-10-0-1-5` is 10.0.1.5 (an instance whose private address is
/// IPv6 has no such name).
fn instance_address(label: &str) -> Option<IpAddr> {
    label.strip_prefix("ip-").filter(|l| !l.contains('.')).and_then(|l| l.replace('-', ".").parse().ok())
}

/// The records of `addresses` that answer a query for `kind` at `name`.
fn records(name: &Name, kind: RecordType, addresses: &[IpAddr]) -> Vec<Record> {
    addresses
        .iter()
        .filter_map(|ip| match (ip, kind) {
            (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => Some(RData::A(A(*v4))),
            (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => Some(RData::AAAA(AAAA(*v6))),
            _ => None,
        })
        .map(|data| Record::from_rdata(name.clone(), TTL, data))
        .collect()
}

#[async_trait::async_trait]
impl RequestHandler for Names {
    async fn handle_request<R: ResponseHandler, T: hickory_server::net::runtime::Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let (code, answers) = match answer(self, request).await {
            Ok((code, answers)) => (code, answers),
            Err(e) => {
                tracing::warn!(error = %e.message, "DNS: cannot read the store; answering SERVFAIL");
                (ResponseCode::ServFail, Vec::new())
            }
        };
        metadata.authoritative = code != ResponseCode::Refused;
        metadata.response_code = code;
        let builder = MessageResponseBuilder::new(&request.queries, None);
        let message = builder.build(metadata, answers.iter(), [], [], []);
        match response.send_response(message).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, "DNS: cannot send an answer");
                metadata.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header { metadata, counts: HeaderCounts::default() })
            }
        }
    }
}

/// A request's answer: its code and records.
async fn answer(names: &Names, request: &Request) -> Result<(ResponseCode, Vec<Record>)> {
    if request.metadata.message_type != MessageType::Query || request.metadata.op_code != OpCode::Query {
        return Ok((ResponseCode::NotImp, Vec::new()));
    }
    // One question per message, as every resolver sends.
    let Ok(info) = request.request_info() else {
        return Ok((ResponseCode::FormErr, Vec::new()));
    };
    let query = info.query;
    let name: Name = LowerName::clone(query.name()).into();
    Ok(match names.lookup(&name.to_ascii()).await? {
        Lookup::Found(addresses) => (ResponseCode::NoError, records(&name, query.query_type(), &addresses)),
        Lookup::NoSuchName => (ResponseCode::NXDomain, Vec::new()),
        Lookup::NotOurs => (ResponseCode::Refused, Vec::new()),
    })
}

/// Answer the cloud's names on `udp` and `tcp` until the task is dropped.
pub async fn serve(names: Names, udp: UdpSocket, tcp: TcpListener) {
    let mut server = hickory_server::Server::new(names);
    server.register_socket(udp);
    server.register_listener(tcp, TCP_TIMEOUT, TCP_BUFFER);
    if let Err(e) = server.block_until_done().await {
        tracing::error!(error = %e, "DNS server stopped");
    }
}

#[cfg(test)]
mod tests {
    use fakecloud_api::net::private_dns_name;

    use super::*;

    #[test]
    fn an_instance_label_names_its_ipv4_address() {
        assert_eq!(instance_address("ip-10-0-1-5"), Some("10.0.1.5".parse().unwrap()));
        assert_eq!(instance_address("ip-10-0-1"), None);
        assert_eq!(instance_address("ip-10-0-1-5.x"), None);
        assert_eq!(instance_address("10-0-1-5"), None);
        assert_eq!(instance_address("ip-300-0-1-5"), None);
    }

    #[test]
    fn an_instances_name_reads_back_as_its_address() {
        let ip: IpAddr = "10.0.1.5".parse().unwrap();
        let name = private_dns_name("i-1", ip, "local-1");
        assert_eq!(name, "ip-10-0-1-5.local-1.compute.internal");
        assert_eq!(instance_name_address(&name, "local-1"), Some(ip));
        assert_eq!(instance_name_address(&name, "local-2"), None);
        let v6 = private_dns_name("i-1", "fd00::5".parse().unwrap(), "local-1");
        assert_eq!((v6.as_str(), instance_name_address(&v6, "local-1")), ("i-1.local-1.compute.internal", None));
    }

    #[test]
    fn only_records_of_the_type_asked_answer() {
        let name = Name::from_ascii("x.lb.fakecloud.test.").unwrap();
        let both: Vec<IpAddr> = vec!["127.90.0.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        assert_eq!(records(&name, RecordType::A, &both).len(), 1);
        assert_eq!(records(&name, RecordType::AAAA, &both).len(), 1);
        assert_eq!(records(&name, RecordType::ANY, &both).len(), 2);
        assert!(records(&name, RecordType::TXT, &both).is_empty());
        assert!(records(&name, RecordType::A, &both).iter().all(|r| r.ttl == TTL));
    }
}

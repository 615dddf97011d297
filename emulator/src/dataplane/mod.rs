//! The load balancer data plane (`fakecloud serve --serve-load-balancers`): every listener of every active
//! load balancer accepts on the load balancer's address and forwards to its healthy backends.
//!
//! It follows the database. The supervisor reads the active load balancers and the instances' addresses
//! after every successful change through the API (the gatekeeper pokes it) and every [`RESYNC`] besides (timed
//! transitions, such as provisioning to active, happen without a call), and makes the running listeners match:
//! new listeners are bound, gone ones closed, and the ones that stay get their route (backend port, who may
//! connect: the source ranges, or the load balancer's security groups' rules) and their load balancer's healthy
//! backends swapped in place through watch channels — their sockets and established connections are untouched.
//! Health checks run per load balancer (see [`health`]).
//!
//! On a PostgreSQL database other emulators share, what it shows is published there for them (see
//! [`published`]).
//!
//! UDP listeners are served too, by sessions per client address (see [`udp`]). A passthrough load balancer
//! has no sockets: the kernel routes its packets to a healthy backend unchanged (see [`passthrough`]).
//!
//! Nothing a client does to a load balancer takes more than the data plane's budget of open files, apart from
//! the API's, or more than its load balancer's and listener's share of it (see [`budget`]); a backend is only
//! an address a machine may have (see `crate::addresses`): never a load balancer's own, never this host's.

mod budget;
mod context;
mod faults;
mod health;
mod listener;
pub mod passthrough;
pub mod pool;
pub mod published;
mod status;
mod tcp;
mod udp;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fakecloud_api::{Forwarding, InstanceState, ListenerState, LoadBalancer, Protocol};
use ipnet::IpNet;
use tokio::sync::{Notify, watch};

use self::budget::{Budget, Caps};
use self::context::{AbortOnDrop, Route, Shared, Sources};
pub use self::faults::Faults;
use self::health::Healthy;
use self::published::Publisher;
pub use self::status::Status;
use crate::addresses::{self, HostAddresses};
use crate::config::Config;
use crate::db::Db;
use crate::db::backend::Backend;
use crate::error::Result;
use crate::faults::LbSubject;
use crate::metrics::{BackendLabels, DataPlaneMetrics};
use crate::store;
use crate::store::security_groups::Rule;

/// How often the supervisor reads the database when nothing pokes it.
pub const RESYNC: Duration = Duration::from_millis(500);

/// The handle the API holds: poke after a change, read the status.
#[derive(Debug, Clone)]
pub struct DataPlane {
    wake: Arc<Notify>,
    status: Status,
}

impl DataPlane {
    /// Start the supervisor; it runs until the returned task is aborted, which closes every listener.
    pub fn spawn(
        db: Db,
        cfg: Config,
        metrics: DataPlaneMetrics,
        faults: Faults,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let wake = Arc::new(Notify::new());
        let status = Status::default();
        let budget = Budget::new(cfg.data_plane.clone());
        let shared = db.backend() == Backend::Postgres;
        let supervisor = Supervisor {
            db,
            cfg,
            metrics,
            faults,
            budget,
            status: status.clone(),
            served: HashMap::new(),
            kernel: None,
            kernel_error: None,
            publisher: shared.then(Publisher::default),
        };
        let task = tokio::spawn(supervisor.run(wake.clone()));
        (Self { wake, status }, task)
    }

    /// The database changed: follow it now rather than at the next resync.
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// Add the listeners' states and the backends' health to `lb`.
    pub fn annotate(&self, lb: &mut LoadBalancer) {
        self.status.annotate(lb);
    }
}

struct Supervisor {
    db: Db,
    /// Which addresses a backend may have.
    cfg: Config,
    metrics: DataPlaneMetrics,
    faults: Faults,
    budget: Budget,
    status: Status,
    /// By load balancer ID.
    served: HashMap<String, Served>,
    /// The kernel's routing, started with the first passthrough load balancer.
    kernel: Option<passthrough::Kernel>,
    /// Why it could not start, the last time it was tried (logged once per reason).
    kernel_error: Option<String>,
    /// With other emulators on the database: what it shows, written for them (see [`published`]).
    publisher: Option<Publisher>,
}

/// One active load balancer in the data plane.
struct Served {
    address: IpAddr,
    spec: watch::Sender<health::Spec>,
    healthy: watch::Receiver<Healthy>,
    caps: Caps,
    _checker: AbortOnDrop,
    listeners: HashMap<(Protocol, u16), Slot>,
}

enum Slot {
    Listening(listener::Listener),
    /// Not bound, for this reason; binding is tried again at every resync.
    Failed(String),
    /// A passthrough listener, routed by the kernel; or not, for this reason (tried again at every resync).
    Routed(Option<String>),
}

impl Supervisor {
    async fn run(mut self, wake: Arc<Notify>) {
        loop {
            if let Err(e) = self.reconcile().await {
                tracing::warn!(error = %e, "data plane: cannot read the load balancers; serving what it served");
            }
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(RESYNC) => {}
            }
        }
    }

    /// Make the running listeners and checkers match the database.
    async fn reconcile(&mut self) -> Result<()> {
        let lbs = store::load_balancers::active(&self.db).await?;
        // Only the instances behind a load balancer: the table may hold thousands more.
        let backends: Vec<&str> = lbs.iter().flat_map(|lb| lb.backends.iter().map(String::as_str)).collect();
        let instances = store::instances::addresses(&self.db, &backends).await?;
        // Who reaches a load balancer with security groups is its groups' rules' business.
        let guarded = store::security_groups::load_balancer_rules(&self.db).await?;
        // Every resync: a backend's address is checked against this host's as they are now.
        let host = if lbs.is_empty() { HostAddresses::default() } else { HostAddresses::read() };
        let mut seen = HashSet::new();
        let mut routed = HashSet::new();
        for lb in &lbs {
            let Some(address) = lb.address else { continue };
            seen.insert(lb.id.clone());
            let spec = health::Spec {
                subject: LbSubject { id: lb.id.clone(), name: lb.name.clone() },
                backends: lb
                    .backends
                    .iter()
                    .map(|id| health::Backend {
                        instance: id.clone(),
                        addr: match instances.get(id) {
                            Some((ip, InstanceState::Running)) => match addresses::refusal(*ip, &self.cfg, &host) {
                                None => Ok(*ip),
                                Some(why) => Err(format!("not forwarded to: {why}")),
                            },
                            Some((_, state)) => Err(format!("instance {id} is {state}")),
                            None => Err(format!("instance {id} does not exist")),
                        },
                    })
                    .collect(),
                check: lb.health_check.clone(),
            };
            let served = match self.served.remove(&lb.id) {
                // An address is the load balancer's for its life; a different one is a different load balancer.
                Some(s) if s.address == address => s,
                old => {
                    if let Some(old) = old {
                        self.stop(&lb.id, old);
                    }
                    self.start(&lb.id, address, spec.clone())
                }
            };
            served.spec.send_if_modified(|current| {
                let changed = *current != spec;
                if changed {
                    *current = spec;
                }
                changed
            });
            let sources = sources(lb, guarded.get(&lb.id).map(Vec::as_slice));
            let route = match lb.forwarding {
                Forwarding::Proxy => None,
                Forwarding::Passthrough => {
                    let want = {
                        // Not held across the kernel's calls below.
                        let healthy = served.healthy.borrow();
                        passthrough::Want::new(&sources, healthy.iter().map(|(_, ip)| *ip))
                    };
                    let result = match address {
                        IpAddr::V4(vip) => {
                            routed.insert(vip);
                            self.route(vip, &want).await
                        }
                        IpAddr::V6(_) => Err(passthrough::Error::NotIpv4(address).to_string()),
                    };
                    Some(result.err())
                }
            };
            let served = self.served.entry(lb.id.clone()).or_insert(served);
            let shared = Shared {
                healthy: served.healthy.clone(),
                metrics: self.metrics.clone(),
                faults: self.faults.clone(),
                budget: self.budget.clone(),
                caps: served.caps.clone(),
                status: self.status.clone(),
            };
            sync_listeners(lb, served, shared, &sources, route).await;
        }
        if let Some(kernel) = &mut self.kernel {
            kernel.retain(&routed).await;
        }
        let gone: Vec<String> = self.served.keys().filter(|id| !seen.contains(*id)).cloned().collect();
        for id in gone {
            if let Some(old) = self.served.remove(&id) {
                self.stop(&id, old);
            }
        }
        if let Some(publisher) = &mut self.publisher {
            publisher.publish(&self.db, &lbs, &self.status).await;
        }
        Ok(())
    }

    /// Route `vip` as `want` says, starting the kernel's routing when this is the first passthrough load balancer;
    /// or why it cannot be.
    async fn route(&mut self, vip: Ipv4Addr, want: &passthrough::Want) -> std::result::Result<(), String> {
        if !self.cfg.holds_public_pool {
            return Err(passthrough::Error::NotHolding.to_string());
        }
        let kernel = match &mut self.kernel {
            Some(kernel) => kernel,
            None => match passthrough::Kernel::start().await {
                Ok(kernel) => {
                    tracing::info!("data plane: routing passthrough load balancers");
                    self.kernel_error = None;
                    self.kernel.insert(kernel)
                }
                Err(e) => {
                    let e = e.to_string();
                    if self.kernel_error.as_ref() != Some(&e) {
                        tracing::warn!(error = %e, "data plane: cannot route passthrough load balancers; retrying at each resync");
                        self.kernel_error = Some(e.clone());
                    }
                    return Err(e);
                }
            },
        };
        kernel.set(vip, want).await.map_err(|e| e.to_string())
    }

    fn start(&self, lb: &str, address: IpAddr, spec: health::Spec) -> Served {
        tracing::info!(%lb, %address, "data plane: serving load balancer");
        let (spec_tx, spec_rx) = watch::channel(spec);
        let (healthy_tx, healthy_rx) = watch::channel(Healthy::default());
        let checker = tokio::spawn(health::run(
            lb.to_string(),
            spec_rx,
            healthy_tx,
            self.status.clone(),
            self.metrics.clone(),
            self.faults.clone(),
            self.budget.clone(),
        ));
        Served {
            address,
            spec: spec_tx,
            healthy: healthy_rx,
            caps: self.budget.caps(),
            _checker: AbortOnDrop(checker),
            listeners: HashMap::new(),
        }
    }

    /// Close `served`'s listeners (and their connections) and forget its status and gauges.
    fn stop(&self, lb: &str, served: Served) {
        tracing::info!(%lb, address = %served.address, "data plane: no longer serving load balancer");
        let backends: Vec<String> = served.spec.borrow().backends.iter().map(|b| b.instance.clone()).collect();
        // Stopped first, so its checker cannot set a gauge again after it is removed.
        drop(served);
        for backend in backends {
            self.metrics.backend_healthy.remove(&BackendLabels { load_balancer: lb.to_string(), backend });
        }
        self.status.remove(lb);
    }
}

/// Who may reach each of `lb`'s listeners: with security groups (`groups`: their rules, together), the
/// networks whose rules cover the listener's protocol and port, no one if none does (as AWS admits); without,
/// its source ranges (none: every client).
fn sources(lb: &LoadBalancer, groups: Option<&[Rule]>) -> Vec<(Protocol, u16, Sources)> {
    let ranges = match groups {
        Some(_) => Vec::new(),
        None => source_ranges(lb),
    };
    lb.listeners
        .iter()
        .map(|l| {
            let sources = match groups {
                Some(rules) => Sources::Only(
                    rules
                        .iter()
                        .filter_map(|r| r.admits(l.protocol, l.port))
                        .map(fakecloud_api::net::canonical_net)
                        .collect(),
                ),
                None if ranges.is_empty() => Sources::Any,
                None => Sources::Only(ranges.clone()),
            };
            (l.protocol, l.port, sources)
        })
        .collect()
}

/// `lb`'s source ranges as networks.
fn source_ranges(lb: &LoadBalancer) -> Vec<IpNet> {
    lb.source_ranges
        .iter()
        .filter_map(|r| {
            // Canonical, as the API stores them now: a range stored by an older emulator may be IPv4-mapped.
            let net = r.parse().ok().map(fakecloud_api::net::canonical_net);
            if net.is_none() {
                tracing::warn!(lb = %lb.id, range = %r, "stored source range does not parse; ignored");
            }
            net
        })
        .collect()
}

/// Bind `lb`'s new listeners (and retry failed ones), close the ones it no longer has, and swap the route of
/// the ones that stay. A passthrough load balancer (`routed` is `Some`: why the kernel does not route it, if it
/// does not) has no sockets: its listeners' states say whether the kernel routes them.
async fn sync_listeners(
    lb: &LoadBalancer,
    served: &mut Served,
    shared: Shared,
    sources: &[(Protocol, u16, Sources)],
    routed: Option<Option<String>>,
) {
    let status = &shared.status;
    let wanted: HashMap<(Protocol, u16), u16> =
        lb.listeners.iter().map(|l| ((l.protocol, l.port), l.backend_port)).collect();
    served.listeners.retain(|(protocol, port), _| {
        let kept = wanted.contains_key(&(*protocol, *port));
        if !kept {
            tracing::info!(lb = %lb.id, ?protocol, port, "data plane: listener removed");
            status.remove_listener(&lb.id, *protocol, *port);
        }
        kept
    });
    for (&(protocol, port), &backend_port) in &wanted {
        if let Some(why_not) = &routed {
            // Shown when it changes; a proxy listener that was here closes as its slot is replaced.
            let shown = matches!(served.listeners.get(&(protocol, port)), Some(Slot::Routed(r)) if r == why_not);
            if !shown {
                let state = if why_not.is_none() { ListenerState::Listening } else { ListenerState::Failed };
                status.set_listener(&lb.id, protocol, port, state, why_not.clone());
                served.listeners.insert((protocol, port), Slot::Routed(why_not.clone()));
            }
            continue;
        }
        let subject = LbSubject { id: lb.id.clone(), name: lb.name.clone() };
        let sources =
            sources.iter().find(|(p, n, _)| (*p, *n) == (protocol, port)).map_or(Sources::Any, |(_, _, s)| s.clone());
        let route = Route { subject, backend_port, sources, affinity: lb.session_affinity };
        if let Some(Slot::Listening(l)) = served.listeners.get(&(protocol, port)) {
            l.update(route);
            continue;
        }
        let addr = SocketAddr::new(served.address, port);
        match listener::Listener::start(&lb.id, protocol, addr, route, shared.clone()).await {
            Ok(l) => {
                tracing::info!(lb = %lb.id, %addr, "data plane: listening");
                status.set_listener(&lb.id, protocol, port, ListenerState::Listening, None);
                served.listeners.insert((protocol, port), Slot::Listening(l));
            }
            Err(e) => {
                let reason = format!("cannot listen on {addr}: {e}");
                let again = matches!(served.listeners.get(&(protocol, port)), Some(Slot::Failed(r)) if *r == reason);
                if !again {
                    tracing::warn!(lb = %lb.id, %addr, error = %e, "data plane: listener failed; retrying at each resync");
                    status.set_listener(&lb.id, protocol, port, ListenerState::Failed, Some(reason.clone()));
                }
                served.listeners.insert((protocol, port), Slot::Failed(reason));
            }
        }
    }
}

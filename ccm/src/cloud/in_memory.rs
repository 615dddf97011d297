//! A [`Cloud`] in memory for the controllers' unit tests, as upstream's `k8s.io/cloud-provider/fake`: it holds
//! instances, routes and load balancers, records every call in order (so a test can assert "no cloud call" or
//! "exactly one ensure"), and can be told to fail an operation with a given [`CloudError`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Node, NodeAddress, Service};
use kube::ResourceExt;

use super::fakecloud::parse_provider_id;
use super::{Cloud, CloudError, CloudRoute, InstanceMetadata, LoadBalancerStatus};

/// One machine. A node finds it by the ID in its providerID, or by its name before it has one (as the
/// emulator's client does).
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub name: String,
    pub zone: String,
    pub region: String,
    pub instance_type: String,
    pub addresses: Vec<NodeAddress>,
    pub shutdown: bool,
    /// `false`: terminated (still listed, but it does not exist for `instance_exists`).
    pub exists: bool,
}

impl Instance {
    /// A running instance `id` named `name` in zone `local-1a`, with one InternalIP.
    pub fn running(id: &str, name: &str, ip: &str) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            zone: "local-1a".into(),
            region: "local-1".into(),
            instance_type: "fc.small".into(),
            addresses: vec![NodeAddress { type_: "InternalIP".into(), address: ip.into() }],
            shutdown: false,
            exists: true,
        }
    }

    pub fn provider_id(&self) -> String {
        format!("fakecloud://{}/{}", self.zone, self.id)
    }
}

/// The operations, to name the one that should fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    InstanceExists,
    InstanceShutdown,
    InstanceMetadata,
    ListRoutes,
    CreateRoute,
    DeleteRoute,
    GetLoadBalancer,
    EnsureLoadBalancer,
    UpdateLoadBalancer,
    EnsureLoadBalancerDeleted,
}

/// A call as recorded: nodes by name, Services as `namespace/name`, routes by destination. Ordered, so that calls
/// made concurrently can be compared as a sorted list.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Call {
    InstanceExists(String),
    InstanceShutdown(String),
    InstanceMetadata(String),
    ListRoutes,
    CreateRoute {
        node: String,
        destination: String,
    },
    DeleteRoute(String),
    GetLoadBalancer(String),
    /// With the backend node names, in the order given.
    EnsureLoadBalancer(String, Vec<String>),
    UpdateLoadBalancer(String, Vec<String>),
    EnsureLoadBalancerDeleted(String),
}

#[derive(Default)]
struct State {
    instances: Vec<Instance>,
    routes: Vec<CloudRoute>,
    /// By Service key: the ingress IP and the backend node names.
    load_balancers: BTreeMap<String, (String, Vec<String>)>,
    failures: HashMap<Op, CloudError>,
    calls: Vec<Call>,
    next_id: u32,
}

#[derive(Default, Clone)]
pub struct InMemoryCloud {
    state: Arc<Mutex<State>>,
}

fn svc_key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

fn names(nodes: &[Arc<Node>]) -> Vec<String> {
    nodes.iter().map(|n| n.name_any()).collect()
}

fn ingress(ip: &str) -> LoadBalancerStatus {
    LoadBalancerStatus { ingress: Some(vec![LoadBalancerIngress { ip: Some(ip.into()), ..Default::default() }]) }
}

impl InMemoryCloud {
    pub fn with_instance(self, i: Instance) -> Self {
        self.lock().instances.push(i);
        self
    }

    /// A route of cluster `cluster` (its name says so, as the emulator's routes do).
    pub fn with_route(self, cluster: &str, id: &str, target_instance: &str, destination: &str) -> Self {
        let route = CloudRoute {
            id: id.into(),
            name: format!("{cluster}-{id}"),
            target_instance: target_instance.into(),
            destination: destination.into(),
        };
        self.lock().routes.push(route);
        self
    }

    /// A load balancer serving `ip` for the Service `namespace/name`.
    pub fn with_load_balancer(self, service: &str, ip: &str, backends: &[&str]) -> Self {
        let backends = backends.iter().map(|b| b.to_string()).collect();
        self.lock().load_balancers.insert(service.into(), (ip.into(), backends));
        self
    }

    /// Every call of `op` fails with `err` from now on.
    pub fn failing(self, op: Op, err: CloudError) -> Self {
        self.lock().failures.insert(op, err);
        self
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// (destination, target instance) of every route, sorted.
    pub fn routes(&self) -> Vec<(String, String)> {
        let mut r: Vec<_> =
            self.lock().routes.iter().map(|r| (r.destination.clone(), r.target_instance.clone())).collect();
        r.sort();
        r
    }

    /// Service key → backend node names.
    pub fn load_balancers(&self) -> BTreeMap<String, Vec<String>> {
        self.lock().load_balancers.iter().map(|(k, (_, b))| (k.clone(), b.clone())).collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record the call, then fail it if told to.
    fn call(&self, op: Op, call: Call) -> Result<MutexGuard<'_, State>, CloudError> {
        let mut s = self.lock();
        s.calls.push(call);
        match s.failures.get(&op) {
            Some(e) => Err(e.clone()),
            None => Ok(s),
        }
    }

    fn lookup(s: &State, node: &Node) -> Result<Instance, CloudError> {
        let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|p| !p.is_empty());
        let found = match pid {
            Some(pid) => {
                let id = parse_provider_id(pid).ok_or_else(|| CloudError::Invalid(format!("providerID {pid:?}")))?;
                s.instances.iter().find(|i| i.id == id)
            }
            None => s.instances.iter().find(|i| i.name == node.name_any()),
        };
        found.cloned().ok_or_else(|| CloudError::NotFound(format!("instance not found for node {}", node.name_any())))
    }
}

impl Cloud for InMemoryCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool, CloudError> {
        let s = self.call(Op::InstanceExists, Call::InstanceExists(node.name_any()))?;
        match Self::lookup(&s, node) {
            Ok(i) => Ok(i.exists),
            Err(CloudError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool, CloudError> {
        let s = self.call(Op::InstanceShutdown, Call::InstanceShutdown(node.name_any()))?;
        Ok(Self::lookup(&s, node)?.shutdown)
    }

    async fn instance_metadata(&self, node: &Node) -> Result<InstanceMetadata, CloudError> {
        let s = self.call(Op::InstanceMetadata, Call::InstanceMetadata(node.name_any()))?;
        let i = Self::lookup(&s, node)?;
        Ok(InstanceMetadata {
            provider_id: i.provider_id(),
            instance_type: i.instance_type,
            zone: i.zone,
            region: i.region,
            addresses: i.addresses,
        })
    }

    fn instance_id<'p>(&self, provider_id: &'p str) -> Option<&'p str> {
        parse_provider_id(provider_id)
    }

    async fn list_routes(&self, cluster: &str) -> Result<Vec<CloudRoute>, CloudError> {
        let s = self.call(Op::ListRoutes, Call::ListRoutes)?;
        let prefix = format!("{cluster}-");
        Ok(s.routes.iter().filter(|r| r.name.starts_with(&prefix)).cloned().collect())
    }

    async fn create_route(
        &self,
        cluster: &str,
        name_hint: &str,
        node: &Node,
        destination: &str,
    ) -> Result<(), CloudError> {
        let call = Call::CreateRoute { node: node.name_any(), destination: destination.into() };
        let mut s = self.call(Op::CreateRoute, call)?;
        let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default();
        let target = parse_provider_id(pid).ok_or_else(|| CloudError::Invalid(format!("providerID {pid:?}")))?;
        s.next_id += 1;
        let route = CloudRoute {
            id: format!("r-{}", s.next_id),
            name: format!("{cluster}-{name_hint}"),
            target_instance: target.into(),
            destination: destination.into(),
        };
        s.routes.push(route);
        Ok(())
    }

    async fn delete_route(&self, route: &CloudRoute) -> Result<(), CloudError> {
        let mut s = self.call(Op::DeleteRoute, Call::DeleteRoute(route.destination.clone()))?;
        s.routes.retain(|r| r.id != route.id);
        Ok(())
    }

    async fn get_load_balancer(&self, _cluster: &str, svc: &Service) -> Result<Option<LoadBalancerStatus>, CloudError> {
        let key = svc_key(svc);
        let s = self.call(Op::GetLoadBalancer, Call::GetLoadBalancer(key.clone()))?;
        Ok(s.load_balancers.get(&key).map(|(ip, _)| ingress(ip)))
    }

    async fn ensure_load_balancer(
        &self,
        _cluster: &str,
        svc: &Service,
        nodes: &[Arc<Node>],
    ) -> Result<LoadBalancerStatus, CloudError> {
        let key = svc_key(svc);
        let mut s = self.call(Op::EnsureLoadBalancer, Call::EnsureLoadBalancer(key.clone(), names(nodes)))?;
        s.next_id += 1;
        let fresh = format!("203.0.113.{}", s.next_id);
        let lb = s.load_balancers.entry(key).or_insert((fresh, Vec::new()));
        lb.1 = names(nodes);
        Ok(ingress(&lb.0))
    }

    async fn update_load_balancer(&self, _cluster: &str, svc: &Service, nodes: &[Arc<Node>]) -> Result<(), CloudError> {
        let key = svc_key(svc);
        let mut s = self.call(Op::UpdateLoadBalancer, Call::UpdateLoadBalancer(key.clone(), names(nodes)))?;
        let lb = s.load_balancers.get_mut(&key).ok_or_else(|| CloudError::NotFound(format!("load balancer {key}")))?;
        lb.1 = names(nodes);
        Ok(())
    }

    async fn ensure_load_balancer_deleted(&self, _cluster: &str, svc: &Service) -> Result<(), CloudError> {
        let key = svc_key(svc);
        let mut s = self.call(Op::EnsureLoadBalancerDeleted, Call::EnsureLoadBalancerDeleted(key.clone()))?;
        s.load_balancers.remove(&key);
        Ok(())
    }
}

package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
)

// The annotations for what a Service spec has no field for (the same as fakecloud-ccm's,
// ccm/src/cloud/load_balancer.rs).
const (
	// AnnotationInternal "true": a VIP from the internal pool instead of an internet-facing one.
	AnnotationInternal = "service.beta.kubernetes.io/fakecloud-load-balancer-internal"
	// AnnotationHealthCheckPath: an HTTP check on this path (must start with "/") of the first NodePort, or of
	// the healthCheckNodePort.
	AnnotationHealthCheckPath = "service.beta.kubernetes.io/fakecloud-load-balancer-health-check-path"
	// AnnotationHealthCheckInterval: seconds between checks, 1–300 (default 10); alone, a TCP check on the
	// first NodePort.
	AnnotationHealthCheckInterval = "service.beta.kubernetes.io/fakecloud-load-balancer-health-check-interval"

	defaultHealthCheckInterval = 10
	// KubeProxyHealthzPort is kube-proxy's --healthz-bind-address port, which clouds check for
	// externalTrafficPolicy: Cluster.
	KubeProxyHealthzPort = 10256
)

// Desired is the load balancer a Service asks for, backends apart (they come from the nodes).
type Desired struct {
	Scheme       fakecloudapi.Scheme
	Listeners    []fakecloudapi.Listener
	SourceRanges []string
	RequestedIP  string // "" when the Service asks for none
	HealthCheck  *fakecloudapi.HealthCheck
	Affinity     fakecloudapi.SessionAffinity
	Forwarding   fakecloudapi.Forwarding
}

// DesiredLoadBalancer is the Service's load balancer, or what is wrong with the Service, worded as the field or
// annotation to fix. The rules are fakecloud-ccm's (ccm/src/cloud/load_balancer.rs `desired`).
func DesiredLoadBalancer(svc *v1.Service) (*Desired, error) {
	d := &Desired{Scheme: fakecloudapi.InternetFacing, Listeners: []fakecloudapi.Listener{}, SourceRanges: []string{}, Affinity: fakecloudapi.None, Forwarding: fakecloudapi.ForwardingProxy}
	if v, ok := annotation(svc, AnnotationInternal); ok {
		internal, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %q is not a boolean (use \"true\" or \"false\")", AnnotationInternal, v)
		}
		if internal {
			d.Scheme = fakecloudapi.Internal
		}
	}
	for _, p := range svc.Spec.Ports {
		var proto fakecloudapi.Protocol
		switch p.Protocol {
		case v1.ProtocolTCP, "":
			proto = fakecloudapi.ProtocolTCP
		case v1.ProtocolUDP:
			proto = fakecloudapi.ProtocolUDP
		default:
			return nil, fmt.Errorf("port %d: protocol %s is not supported by fakecloud load balancers (TCP, UDP)", p.Port, p.Protocol)
		}
		// A port without a NodePort (allocateLoadBalancerNodePorts: false) is reached only by packets that come
		// to a node still addressed to the load balancer, which kube-proxy serves there: a passthrough load
		// balancer (its listener's backend port, the service port, is then unused).
		backend := p.NodePort
		if backend == 0 {
			backend = p.Port
			d.Forwarding = fakecloudapi.ForwardingPassthrough
		}
		d.Listeners = append(d.Listeners, fakecloudapi.Listener{Protocol: proto, Port: p.Port, BackendPort: backend})
	}
	for _, r := range svc.Spec.LoadBalancerSourceRanges {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(r))
		if err != nil {
			return nil, fmt.Errorf("loadBalancerSourceRanges: %q is not a CIDR (e.g. 203.0.113.0/24)", r)
		}
		d.SourceRanges = append(d.SourceRanges, prefix.String())
	}
	if ip := strings.TrimSpace(svc.Spec.LoadBalancerIP); ip != "" {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("loadBalancerIP: %q is not an IP address", ip)
		}
		d.RequestedIP = addr.String()
	}
	path, hasPath := annotation(svc, AnnotationHealthCheckPath)
	if hasPath && !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("annotation %s: %q must start with \"/\"", AnnotationHealthCheckPath, path)
	}
	interval := int32(0)
	if v, ok := annotation(svc, AnnotationHealthCheckInterval); ok {
		s, err := strconv.ParseUint(v, 10, 32)
		if err != nil || s < 1 || s > 300 {
			return nil, fmt.Errorf("annotation %s: %q is not a number of seconds from 1 to 300", AnnotationHealthCheckInterval, v)
		}
		interval = int32(s)
	}
	d.HealthCheck = healthCheck(svc.Spec.HealthCheckNodePort, d.Listeners, path, hasPath, interval)
	// ClientIP asks that one client stay on one pod. kube-proxy keeps that per node, so the load balancer must
	// keep one client on one node too.
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		d.Affinity = fakecloudapi.ClientIp
	}
	return d, nil
}

// healthCheck is the check the cloud runs against every node, so that only nodes that can serve get traffic:
// externalTrafficPolicy Local (a healthCheckNodePort): HTTP on that port, where kube-proxy answers 200 only
// on nodes with a ready endpoint; otherwise, with an annotation, on the first listener's backend port (HTTP
// on the annotated path, or TCP); otherwise kube-proxy's own /healthz. Always one when there is a listener,
// so that dropping an annotation replaces the old check.
func healthCheck(nodePort int32, listeners []fakecloudapi.Listener, path string, hasPath bool, interval int32) *fakecloudapi.HealthCheck {
	every := interval
	if every == 0 {
		every = defaultHealthCheckInterval
	}
	http := func(port int32, path string) *fakecloudapi.HealthCheck {
		if path == "" {
			path = "/healthz"
		}
		proto := fakecloudapi.HealthCheckProtocolHTTP
		return &fakecloudapi.HealthCheck{Protocol: &proto, Port: port, Path: &path, IntervalSeconds: &every}
	}
	if nodePort > 0 && nodePort <= 65535 {
		return http(nodePort, path)
	}
	if len(listeners) == 0 {
		return nil
	}
	first := listeners[0].BackendPort
	switch {
	case hasPath:
		return http(first, path)
	case interval != 0:
		proto := fakecloudapi.HealthCheckProtocolTCP
		return &fakecloudapi.HealthCheck{Protocol: &proto, Port: first, IntervalSeconds: &every}
	default:
		return http(KubeProxyHealthzPort, "")
	}
}

func annotation(svc *v1.Service, key string) (string, bool) {
	v, ok := svc.Annotations[key]
	return strings.TrimSpace(v), ok
}

// Backends are the instance IDs behind these nodes, sorted; a node without a fakecloud providerID cannot be one.
func Backends(nodes []*v1.Node) []string {
	ids := []string{}
	for _, n := range nodes {
		if id := InstanceID(n.Spec.ProviderID); id != "" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func ptr[T any](v T) *T { return &v }

// KeepRunning is those of candidates that are running, in their order.
func KeepRunning(candidates []string, running []string) []string {
	kept := []string{}
	for _, id := range candidates {
		if slices.Contains(running, id) {
			kept = append(kept, id)
		}
	}
	return kept
}

// RemovalsOnly is current without the backends no longer wanted, sorted — removals alone, which no quota
// refuses — and whether there are any to make.
func RemovalsOnly(current, wanted []string) ([]string, bool) {
	kept := []string{}
	for _, b := range sorted(current) {
		if slices.Contains(wanted, b) {
			kept = append(kept, b)
		}
	}
	return kept, len(kept) < len(current)
}

// runningBackends are the backends for nodes, sorted. When the set adds an instance registered lacks, only
// running instances: one ListInstances call, since a stopped or pending instance cannot be registered and one
// registered that stopped serves nothing (kubernetes#94966). When it only keeps or removes backends (nothing
// refuses that), no call: an ensure under throttling costs what it did before, the lookup and at most one write
// (a third call back to back would never fit a small burst). As fakecloud-ccm does.
func (c *Cloud) runningBackends(ctx context.Context, nodes []*v1.Node, registered []string) ([]string, error) {
	candidates := Backends(nodes)
	if allIn(candidates, registered) {
		return candidates, nil
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	running := []string{}
	params := &fakecloudapi.ListInstancesParams{State: ptr(fakecloudapi.ListInstancesParamsStateRunning), PageSize: ptr(int32(1000))}
	for {
		raw, err := c.api.ListInstances(ctx, params)
		resp, err := call(raw, err, fakecloudapi.ParseListInstancesResponse)
		if err != nil {
			return nil, fmt.Errorf("backends: ListInstances: %w", err)
		}
		for _, i := range resp.JSON200.Items {
			running = append(running, i.Id)
		}
		if resp.JSON200.NextPageToken == nil {
			return KeepRunning(candidates, running), nil
		}
		params.PageToken = resp.JSON200.NextPageToken
	}
}

// allIn says whether every one of ids is in set.
func allIn(ids, set []string) bool {
	for _, id := range ids {
		if !slices.Contains(set, id) {
			return false
		}
	}
	return true
}

// Changes are the updates that bring lb to want with backends; nil when it already matches. A scheme or a
// requested IP cannot change in place: an error says so.
func Changes(lb *fakecloudapi.LoadBalancer, want *Desired, backends []string) (*fakecloudapi.UpdateLoadBalancerRequest, error) {
	if lb.Scheme != want.Scheme {
		return nil, fmt.Errorf("load balancer %s is %s and its scheme cannot change; delete and recreate the Service", lb.Name, lb.Scheme)
	}
	if want.RequestedIP != "" && (lb.RequestedIp == nil || !sameIP(*lb.RequestedIp, want.RequestedIP)) {
		return nil, fmt.Errorf("load balancer %s was created with another loadBalancerIP; delete and recreate the Service", lb.Name)
	}
	var req fakecloudapi.UpdateLoadBalancerRequest
	changed := false
	if !slices.Equal(lb.Listeners, want.Listeners) {
		req.Listeners, changed = &want.Listeners, true
	}
	if !slices.Equal(sorted(lb.Backends), backends) {
		req.Backends, changed = &backends, true
	}
	if !slices.Equal(lb.SourceRanges, want.SourceRanges) {
		req.SourceRanges, changed = &want.SourceRanges, true
	}
	if want.HealthCheck != nil && !sameHealthCheck(lb.HealthCheck, want.HealthCheck) {
		req.HealthCheck, changed = want.HealthCheck, true
	}
	if affinity(lb) != want.Affinity {
		req.SessionAffinity, changed = &want.Affinity, true
	}
	// In place, keeping the address: a Service that gains NodePorts goes from passthrough to a proxy.
	if forwarding(lb) != want.Forwarding {
		req.Forwarding, changed = &want.Forwarding, true
	}
	if !changed {
		return nil, nil
	}
	return &req, nil
}

// affinity is lb's session affinity; an emulator older than the field answers none.
func affinity(lb *fakecloudapi.LoadBalancer) fakecloudapi.SessionAffinity {
	if lb.SessionAffinity == nil {
		return fakecloudapi.None
	}
	return *lb.SessionAffinity
}

// forwarding is how lb carries connections; an emulator older than the field answers none, and proxies.
func forwarding(lb *fakecloudapi.LoadBalancer) fakecloudapi.Forwarding {
	if lb.Forwarding == nil {
		return fakecloudapi.ForwardingProxy
	}
	return *lb.Forwarding
}

func sorted(v []string) []string {
	v = slices.Clone(v)
	slices.Sort(v)
	return v
}

func sameIP(a, b string) bool {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	return errX == nil && errY == nil && x == y
}

// sameHealthCheck compares with the API's defaults filled in (TCP, every 10 s), as the emulator stores them.
func sameHealthCheck(have, want *fakecloudapi.HealthCheck) bool {
	if have == nil || want == nil {
		return have == want
	}
	norm := func(h *fakecloudapi.HealthCheck) [4]string {
		proto, path, every := fakecloudapi.HealthCheckProtocolTCP, "", int32(defaultHealthCheckInterval)
		if h.Protocol != nil {
			proto = *h.Protocol
		}
		if h.Path != nil {
			path = *h.Path
		}
		if h.IntervalSeconds != nil {
			every = *h.IntervalSeconds
		}
		return [4]string{string(proto), strconv.Itoa(int(h.Port)), path, strconv.Itoa(int(every))}
	}
	return norm(have) == norm(want)
}

// status is the ingress exactly as the cloud serves it: the VIP, and ipMode Proxy when the cloud says its load
// balancer is a proxy (the emulator's data plane); VIP is left to the apiserver's default, as fakecloud-ccm does.
func status(lb *fakecloudapi.LoadBalancer) *v1.LoadBalancerStatus {
	st := &v1.LoadBalancerStatus{}
	if lb.Address != nil && *lb.Address != "" {
		ingress := v1.LoadBalancerIngress{IP: *lb.Address}
		if lb.IpMode != nil && *lb.IpMode == fakecloudapi.IpModeProxy {
			proxy := v1.LoadBalancerIPModeProxy
			ingress.IPMode = &proxy
		}
		st.Ingress = []v1.LoadBalancerIngress{ingress}
	}
	return st
}

// How soon to look again, as fakecloud-ccm does: at a load balancer being provisioned or deleted, and after a
// create that raced with another. Upstream's service controller requeues an api.RetryError after exactly its
// delay (controllers/service/controller.go, processNextServiceItem), and any other error with its exponential
// backoff from 5 s (docs/upstream-ccm.md, trap 15).
const (
	provisioningRecheck = 2 * time.Second
	createRecheck       = 1 * time.Second
)

// How long an ensure waits for its load balancer to leave provisioning, looking every provisioningPoll, as
// fakecloud-ccm does: the EXTERNAL-IP comes from the ensure that created it, not a later one
// (cloud-provider-openstack#2066: the create's answer was taken for the result, so every load balancer needed
// two syncs and a warning). A cloud slower than this hands the Service back, as a retry after
// provisioningRecheck.
const (
	provisioningWait = 30 * time.Second
	provisioningPoll = 1 * time.Second
)

// retryAfter makes a throttled or unavailable cloud's answer (429/503 with Retry-After) an api.RetryError, so
// the service controller comes back exactly when the cloud asked, as fakecloud-ccm does, not sooner or later.
func retryAfter(err error) error {
	var e *APIError
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return api.NewRetryError(err.Error(), e.RetryAfter)
	}
	return err
}

// find is the Service's load balancer by its name (one call), nil when there is none.
func (c *Cloud) find(ctx context.Context, name string) (*fakecloudapi.LoadBalancer, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := c.api.ListLoadBalancers(ctx, &fakecloudapi.ListLoadBalancersParams{Name: &name})
	resp, err := call(raw, err, fakecloudapi.ParseListLoadBalancersResponse)
	if err != nil {
		return nil, fmt.Errorf("load balancer %s: ListLoadBalancers: %w", name, err)
	}
	if len(resp.JSON200.Items) == 0 {
		return nil, nil
	}
	return &resp.JSON200.Items[0], nil
}

// GetLoadBalancerName is upstream's convention: "a" and the Service's UID without dashes, cut to 32 bytes.
func (c *Cloud) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// GetLoadBalancer: a load balancer being deleted counts as none.
func (c *Cloud) GetLoadBalancer(ctx context.Context, cluster string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	lb, err := c.find(ctx, c.GetLoadBalancerName(ctx, cluster, svc))
	if err != nil || lb == nil || lb.State == fakecloudapi.LoadBalancerStateDeleting {
		return nil, false, retryAfter(err)
	}
	return status(lb), true, nil
}

// EnsureLoadBalancer creates or updates the Service's load balancer and returns its status once it is
// active; until then an error, which the service controller retries.
func (c *Cloud) EnsureLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	st, err := c.ensure(ctx, cluster, svc, nodes)
	return st, retryAfter(err)
}

func (c *Cloud) ensure(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	want, err := DesiredLoadBalancer(svc)
	if err != nil {
		return nil, err
	}
	name := c.GetLoadBalancerName(ctx, cluster, svc)
	lb, err := c.find(ctx, name)
	if err != nil {
		return nil, err
	}
	var registered []string
	if lb != nil {
		registered = lb.Backends
	}
	backends, err := c.runningBackends(ctx, nodes, registered)
	if err != nil {
		return nil, err
	}
	switch {
	case lb == nil:
		if lb, err = c.create(ctx, svc, name, want, backends); err != nil {
			return nil, err
		}
	case lb.State == fakecloudapi.LoadBalancerStateDeleting:
		return nil, api.NewRetryError(fmt.Sprintf("load balancer %s is still being deleted", name), provisioningRecheck)
	default:
		req, err := Changes(lb, want, backends)
		if err != nil {
			return nil, err
		}
		if req != nil {
			if lb, err = c.update(ctx, lb, *req); err != nil {
				return nil, err
			}
		}
	}
	if lb, err = c.untilProvisioned(ctx, lb); err != nil {
		return nil, err
	}
	return status(lb), nil
}

// untilProvisioned is lb once it has left provisioning, looked at every provisioningPoll for at most
// provisioningWait.
func (c *Cloud) untilProvisioned(ctx context.Context, lb *fakecloudapi.LoadBalancer) (*fakecloudapi.LoadBalancer, error) {
	deadline := time.Now().Add(provisioningWait)
	for lb.State == fakecloudapi.LoadBalancerStateProvisioning {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("load balancer %s is still provisioning after %s", lb.Name, provisioningWait)
			return nil, api.NewRetryError(msg, provisioningRecheck)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(provisioningPoll):
		}
		got, err := c.get(ctx, lb)
		if err != nil {
			return nil, err
		}
		lb = got
	}
	return lb, nil
}

// get is the load balancer as the cloud has it now (one call).
func (c *Cloud) get(ctx context.Context, lb *fakecloudapi.LoadBalancer) (*fakecloudapi.LoadBalancer, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := c.api.GetLoadBalancer(ctx, lb.Id)
	resp, err := call(raw, err, fakecloudapi.ParseGetLoadBalancerResponse)
	if err != nil {
		return nil, fmt.Errorf("load balancer %s: GetLoadBalancer: %w", lb.Name, err)
	}
	return resp.JSON200, nil
}

// create makes the load balancer. The Idempotency-Key is its name and the Service's generation, so a retry
// after a lost answer gets the same load balancer back, never a second one.
func (c *Cloud) create(ctx context.Context, svc *v1.Service, name string, want *Desired, backends []string) (*fakecloudapi.LoadBalancer, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	key := fmt.Sprintf("%s-%d", name, svc.Generation)
	body := fakecloudapi.CreateLoadBalancerRequest{
		Name:            name,
		Scheme:          &want.Scheme,
		Listeners:       want.Listeners,
		Backends:        &backends,
		HealthCheck:     want.HealthCheck,
		SourceRanges:    &want.SourceRanges,
		SessionAffinity: &want.Affinity,
		Forwarding:      &want.Forwarding,
	}
	if want.RequestedIP != "" {
		body.RequestedIp = &want.RequestedIP
	}
	raw, err := c.api.CreateLoadBalancer(ctx, &fakecloudapi.CreateLoadBalancerParams{IdempotencyKey: &key}, body)
	resp, err := call(raw, err, fakecloudapi.ParseCreateLoadBalancerResponse)
	if isCode(err, "LoadBalancerAlreadyExists", "IdempotencyKeyReused") {
		// Created meanwhile (by an earlier try whose answer was lost): the retry finds it.
		return nil, api.NewRetryError(fmt.Sprintf("load balancer %s: %v", name, err), createRecheck)
	}
	if err != nil {
		return nil, fmt.Errorf("load balancer %s: CreateLoadBalancer: %w", name, err)
	}
	lb := resp.JSON201
	if lb == nil {
		lb = resp.JSON200 // an idempotent replay
	}
	klog.InfoS("created load balancer", "loadBalancer", lb.Name, "id", lb.Id)
	return lb, nil
}

// update changes lb. Refused for too many backends, the removals alone are applied first, then the refusal is
// returned (the service controller retries with its backoff): replacing a node at the quota then converges
// instead of deadlocking on a set that holds both the old node and the new (cloud-provider-aws#1328).
func (c *Cloud) update(ctx context.Context, lb *fakecloudapi.LoadBalancer, req fakecloudapi.UpdateLoadBalancerRequest) (*fakecloudapi.LoadBalancer, error) {
	updated, err := c.patch(ctx, lb, req)
	if isCode(err, "TooManyTargets") && req.Backends != nil {
		if kept, some := RemovalsOnly(lb.Backends, *req.Backends); some {
			if _, rerr := c.patch(ctx, lb, fakecloudapi.UpdateLoadBalancerRequest{Backends: &kept}); rerr != nil {
				return nil, rerr
			}
			klog.InfoS("too many backends: applied the removals first", "loadBalancer", lb.Name)
		}
	}
	return updated, err
}

func (c *Cloud) patch(ctx context.Context, lb *fakecloudapi.LoadBalancer, req fakecloudapi.UpdateLoadBalancerRequest) (*fakecloudapi.LoadBalancer, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := c.api.UpdateLoadBalancer(ctx, lb.Id, req)
	resp, err := call(raw, err, fakecloudapi.ParseUpdateLoadBalancerResponse)
	if err != nil {
		return nil, fmt.Errorf("load balancer %s: UpdateLoadBalancer: %w", lb.Name, err)
	}
	return resp.JSON200, nil
}

// UpdateLoadBalancer sets the backends of the Service's existing load balancer to these nodes.
func (c *Cloud) UpdateLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) error {
	return retryAfter(c.updateBackends(ctx, cluster, svc, nodes))
}

func (c *Cloud) updateBackends(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) error {
	name := c.GetLoadBalancerName(ctx, cluster, svc)
	lb, err := c.find(ctx, name)
	if err != nil {
		return err
	}
	if lb == nil {
		return fmt.Errorf("load balancer %s not found", name)
	}
	backends, err := c.runningBackends(ctx, nodes, lb.Backends)
	if err != nil {
		return err
	}
	if slices.Equal(sorted(lb.Backends), backends) {
		return nil
	}
	_, err = c.update(ctx, lb, fakecloudapi.UpdateLoadBalancerRequest{Backends: &backends})
	return err
}

// EnsureLoadBalancerDeleted is done when there is no load balancer, or the cloud has accepted its deletion.
func (c *Cloud) EnsureLoadBalancerDeleted(ctx context.Context, cluster string, svc *v1.Service) error {
	return retryAfter(c.ensureDeleted(ctx, cluster, svc))
}

func (c *Cloud) ensureDeleted(ctx context.Context, cluster string, svc *v1.Service) error {
	name := c.GetLoadBalancerName(ctx, cluster, svc)
	lb, err := c.find(ctx, name)
	if err != nil || lb == nil || lb.State == fakecloudapi.LoadBalancerStateDeleting {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := c.api.DeleteLoadBalancer(ctx, lb.Id)
	_, err = call(raw, err, fakecloudapi.ParseDeleteLoadBalancerResponse)
	if isStatus(err, 404) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load balancer %s: DeleteLoadBalancer: %w", name, err)
	}
	klog.InfoS("deleted load balancer", "loadBalancer", lb.Name, "id", lb.Id)
	return nil
}

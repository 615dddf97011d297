package provider

import (
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
)

func httpCheck(port int32, path string, every int32) *fakecloudapi.HealthCheck {
	return &fakecloudapi.HealthCheck{Protocol: ptr(fakecloudapi.HealthCheckProtocolHTTP), Port: port, Path: &path, IntervalSeconds: &every}
}

func TestPortsBecomeListenersToTheirNodePorts(t *testing.T) {
	svc := &v1.Service{Spec: v1.ServiceSpec{
		Type: v1.ServiceTypeLoadBalancer,
		Ports: []v1.ServicePort{
			{Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP},
			{Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP},
			{Port: 8080}, // no NodePort (allocateLoadBalancerNodePorts: false): the service port
		},
		LoadBalancerSourceRanges: []string{"10.0.0.0/8", " 192.168.1.7/32"},
		LoadBalancerIP:           "203.0.113.10",
	}}
	d, err := DesiredLoadBalancer(svc)
	if err != nil {
		t.Fatal(err)
	}
	want := []fakecloudapi.Listener{
		{Protocol: fakecloudapi.ProtocolTCP, Port: 80, BackendPort: 30080},
		{Protocol: fakecloudapi.ProtocolUDP, Port: 53, BackendPort: 30053},
		{Protocol: fakecloudapi.ProtocolTCP, Port: 8080, BackendPort: 8080},
	}
	if !reflect.DeepEqual(d.Listeners, want) {
		t.Errorf("listeners = %+v, want %+v", d.Listeners, want)
	}
	if !reflect.DeepEqual(d.SourceRanges, []string{"10.0.0.0/8", "192.168.1.7/32"}) {
		t.Errorf("source ranges = %v", d.SourceRanges)
	}
	if d.RequestedIP != "203.0.113.10" || d.Scheme != fakecloudapi.InternetFacing {
		t.Errorf("requested IP %q, scheme %q", d.RequestedIP, d.Scheme)
	}
	// ETP Cluster, no annotation: kube-proxy's /healthz.
	if !reflect.DeepEqual(d.HealthCheck, httpCheck(KubeProxyHealthzPort, "/healthz", 10)) {
		t.Errorf("health check = %+v", d.HealthCheck)
	}
}

func TestHealthChecks(t *testing.T) {
	ports := []v1.ServicePort{{Port: 80, NodePort: 30080}}
	tcp := fakecloudapi.HealthCheckProtocolTCP
	every := int32(7)
	cases := []struct {
		name        string
		annotations map[string]string
		hcNodePort  int32
		want        *fakecloudapi.HealthCheck
	}{
		{"ETP Local: the healthCheckNodePort", nil, 32000, httpCheck(32000, "/healthz", 10)},
		{"ETP Local with a path", map[string]string{AnnotationHealthCheckPath: "/ready"}, 32000, httpCheck(32000, "/ready", 10)},
		{"a path: HTTP on the first NodePort", map[string]string{AnnotationHealthCheckPath: "/ready"}, 0, httpCheck(30080, "/ready", 10)},
		{"an interval alone: TCP on the first NodePort", map[string]string{AnnotationHealthCheckInterval: "7"}, 0,
			&fakecloudapi.HealthCheck{Protocol: &tcp, Port: 30080, IntervalSeconds: &every}},
	}
	for _, c := range cases {
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: c.annotations},
			Spec: v1.ServiceSpec{Ports: ports, HealthCheckNodePort: c.hcNodePort}}
		d, err := DesiredLoadBalancer(svc)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(d.HealthCheck, c.want) {
			t.Errorf("%s: health check = %+v, want %+v", c.name, d.HealthCheck, c.want)
		}
	}
}

func TestBadServicesSayWhatToFix(t *testing.T) {
	cases := map[string]*v1.Service{
		AnnotationInternal:            {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationInternal: "yes"}}},
		AnnotationHealthCheckPath:     {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationHealthCheckPath: "healthz"}}},
		AnnotationHealthCheckInterval: {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationHealthCheckInterval: "301"}}},
		"loadBalancerSourceRanges":    {Spec: v1.ServiceSpec{LoadBalancerSourceRanges: []string{"10.0.0.0"}}},
		"loadBalancerIP":              {Spec: v1.ServiceSpec{LoadBalancerIP: "not-an-ip"}},
		"protocol SCTP":               {Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 9, Protocol: v1.ProtocolSCTP}}}},
	}
	for field, svc := range cases {
		_, err := DesiredLoadBalancer(svc)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want one naming it", field, err)
		}
	}
	internal := &v1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationInternal: "True"}}}
	if d, err := DesiredLoadBalancer(internal); err != nil || d.Scheme != fakecloudapi.Internal {
		t.Errorf("internal: %+v, %v (strconv.ParseBool's spellings are upstream's)", d, err)
	}
}

func TestTheNameIsUpstreamsConvention(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{UID: "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}}
	if got := (&Cloud{}).GetLoadBalancerName(t.Context(), "kubernetes", svc); got != "a6f1c2d3e4a5b4c6d8e7f9a0b1c2d3e4" {
		t.Errorf("name = %q", got)
	}
	var _ cloudprovider.LoadBalancer = &Cloud{}
}

func TestBackendsAreTheNodesInstancesSorted(t *testing.T) {
	node := func(pid string) *v1.Node { return &v1.Node{Spec: v1.NodeSpec{ProviderID: pid}} }
	got := Backends([]*v1.Node{node("fakecloud://local-1b/i-2"), node(""), node("aws:///x/i-9"), node("fakecloud://local-1a/i-1"), node("fakecloud://local-1a/i-1")})
	if !reflect.DeepEqual(got, []string{"i-1", "i-2"}) {
		t.Errorf("backends = %v", got)
	}
}

func TestChanges(t *testing.T) {
	svc := &v1.Service{Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80, NodePort: 30080}}}}
	want, err := DesiredLoadBalancer(svc)
	if err != nil {
		t.Fatal(err)
	}
	// As the emulator answers: defaults filled in, backends in its own order.
	lb := &fakecloudapi.LoadBalancer{Name: "a1", Scheme: fakecloudapi.InternetFacing, Listeners: want.Listeners,
		Backends: []string{"i-2", "i-1"}, SourceRanges: []string{}, HealthCheck: httpCheck(KubeProxyHealthzPort, "/healthz", 10)}
	if req, err := Changes(lb, want, []string{"i-1", "i-2"}); err != nil || req != nil {
		t.Errorf("an up-to-date load balancer: %+v, %v", req, err)
	}
	req, err := Changes(lb, want, []string{"i-1"})
	if err != nil || req == nil || !reflect.DeepEqual(*req.Backends, []string{"i-1"}) || req.Listeners != nil || req.HealthCheck != nil {
		t.Errorf("a node gone: %+v, %v", req, err)
	}
	internal := *lb
	internal.Scheme = fakecloudapi.Internal
	if _, err := Changes(&internal, want, nil); err == nil || !strings.Contains(err.Error(), "scheme cannot change") {
		t.Errorf("scheme change: %v", err)
	}
	// sessionAffinity: ClientIP keeps one client on one node (kube-proxy's affinity is per node); back to None
	// spreads again. An emulator older than the field answers none.
	sticky := svc.DeepCopy()
	sticky.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	wantSticky, err := DesiredLoadBalancer(sticky)
	if err != nil {
		t.Fatal(err)
	}
	req, err = Changes(lb, wantSticky, []string{"i-1", "i-2"})
	if err != nil || req == nil || req.SessionAffinity == nil || *req.SessionAffinity != fakecloudapi.ClientIp || req.Backends != nil {
		t.Errorf("affinity to ClientIP: %+v, %v", req, err)
	}
	clientIP := fakecloudapi.ClientIp
	stuck := *lb
	stuck.SessionAffinity = &clientIP
	req, err = Changes(&stuck, want, []string{"i-1", "i-2"})
	if err != nil || req == nil || req.SessionAffinity == nil || *req.SessionAffinity != fakecloudapi.None {
		t.Errorf("affinity back to None: %+v, %v", req, err)
	}
	// A port without a NodePort asks for passthrough; gaining NodePorts turns it into a proxy, in place.
	bare := &v1.Service{Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80}}}}
	wantBare, err := DesiredLoadBalancer(bare)
	if err != nil || wantBare.Forwarding != fakecloudapi.ForwardingPassthrough || want.Forwarding != fakecloudapi.ForwardingProxy {
		t.Fatalf("forwarding: without a NodePort %+v, with one %+v, %v", wantBare, want, err)
	}
	passthrough := fakecloudapi.ForwardingPassthrough
	routed := *lb
	routed.Forwarding = &passthrough
	req, err = Changes(&routed, want, []string{"i-1", "i-2"})
	if err != nil || req == nil || req.Forwarding == nil || *req.Forwarding != fakecloudapi.ForwardingProxy || req.Backends != nil {
		t.Errorf("passthrough to proxy: %+v, %v", req, err)
	}
	want.RequestedIP = "203.0.113.10"
	if _, err := Changes(lb, want, nil); err == nil || !strings.Contains(err.Error(), "loadBalancerIP") {
		t.Errorf("loadBalancerIP change: %v", err)
	}
}

func TestTheIngressSaysProxyOnlyWhenTheCloudDoes(t *testing.T) {
	addr := "203.0.113.9"
	vip := fakecloudapi.IpModeVip
	got := status(&fakecloudapi.LoadBalancer{Address: &addr, IpMode: &vip})
	if len(got.Ingress) != 1 || got.Ingress[0].IP != addr || got.Ingress[0].IPMode != nil {
		t.Fatalf("VIP: the address, ipMode left to the apiserver; got %+v", got.Ingress)
	}
	proxy := fakecloudapi.IpModeProxy
	got = status(&fakecloudapi.LoadBalancer{Address: &addr, IpMode: &proxy})
	if got.Ingress[0].IPMode == nil || *got.Ingress[0].IPMode != "Proxy" {
		t.Fatalf("a proxy says so; got %+v", got.Ingress)
	}
}

// kubernetes#94966: only nodes whose instance runs are sent as backends.
func TestOnlyRunningInstancesBecomeBackends(t *testing.T) {
	if got := KeepRunning([]string{"i-a", "i-c", "i-s"}, []string{"i-c", "i-a", "i-other"}); !reflect.DeepEqual(got, []string{"i-a", "i-c"}) {
		t.Errorf("kept %v", got)
	}
	if got := KeepRunning([]string{"i-a"}, nil); len(got) != 0 || got == nil {
		t.Errorf("kept %#v, want an empty list (the API wants [], not null)", got)
	}
}

// cloud-provider-aws#1328: refused for too many backends, the removals alone are due.
func TestRemovalsComeFirstWhenTheQuotaRefuses(t *testing.T) {
	current := []string{"i-old", "i-b", "i-a"}
	if kept, some := RemovalsOnly(current, []string{"i-a", "i-b", "i-new"}); !some || !reflect.DeepEqual(kept, []string{"i-a", "i-b"}) {
		t.Errorf("kept %v, %v", kept, some)
	}
	if _, some := RemovalsOnly(current, []string{"i-a", "i-b", "i-old", "i-new"}); some {
		t.Error("only additions: nothing to remove first")
	}
}

// Over HTTP: one ListInstances (running only) per update; refused with TooManyTargets, one more update with
// the removals, and the refusal returned.
func TestAnUpdateAtTheQuotaAppliesTheRemovalsThenFails(t *testing.T) {
	var calls []string
	c := emulator(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body, _ := io.ReadAll(r.Body)
		calls = append(calls, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+string(body))
		switch {
		case r.URL.Path == "/v1/instances":
			_, _ = w.Write([]byte(`{"items":[` + instanceJSON("i-a") + `,` + instanceJSON("i-new") + `]}`))
		case r.Method == http.MethodGet:
			_, _ = w.Write([]byte(`{"items":[{"id":"lb-1","name":"a","scheme":"internet-facing","state":"active","listeners":[],
				"backends":["i-old","i-a"],"source_ranges":[],"created_at":"","updated_at":""}]}`))
		case strings.Contains(string(body), "i-new"):
			w.WriteHeader(422)
			_, _ = w.Write([]byte(`{"error":{"code":"TooManyTargets","message":"quota","request_id":"r"}}`))
		default:
			_, _ = w.Write([]byte(`{"id":"lb-1","name":"a","scheme":"internet-facing","state":"active","listeners":[],
				"backends":["i-a"],"source_ranges":[],"created_at":"","updated_at":""}`))
		}
	})
	node := func(id string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: id}, Spec: v1.NodeSpec{ProviderID: "fakecloud://local-1a/" + id}}
	}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u-1"}}
	err := c.UpdateLoadBalancer(t.Context(), "kubernetes", svc, []*v1.Node{node("i-a"), node("i-new"), node("i-stopped")})
	if !isCode(err, "TooManyTargets") {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		"GET /v1/load-balancers?name=" + cloudprovider.DefaultLoadBalancerName(svc) + " ",
		"GET /v1/instances?state=running&page_size=1000 ",
		`PATCH /v1/load-balancers/lb-1? {"backends":["i-a","i-new"]}`,
		`PATCH /v1/load-balancers/lb-1? {"backends":["i-a"]}`,
	}
	if len(calls) != len(want) {
		t.Fatalf("calls = %q", calls)
	}
	for i := range want {
		if strings.TrimSpace(calls[i]) != strings.TrimSpace(want[i]) {
			t.Errorf("call %d = %q, want %q", i, calls[i], want[i])
		}
	}
}

func instanceJSON(id string) string {
	return `{"id":"` + id + `","name":"` + id + `","zone":"local-1a","region":"local-1","instance_type":"m.small",
		"market":"on-demand","state":"running","private_ip":"10.0.1.5","provider_id":"fakecloud://local-1a/` + id + `",
		"tags":{},"created_at":"","state_changed_at":""}`
}

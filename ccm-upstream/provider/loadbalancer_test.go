package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
)

// The cases both CCMs' tests read (ccm/testdata/load-balancers.json; fakecloud-ccm's in
// ccm/src/cloud/load_balancer.rs): what a Service asks for, as the API writes it, or the fragments of the refusal.
func TestTheSharedCasesHold(t *testing.T) {
	raw, err := os.ReadFile("../../ccm/testdata/load-balancers.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Case    string
			Service v1.Service
			Nodes   []*v1.Node
			Want    map[string]json.RawMessage
			Error   []string
		}
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 20 {
		t.Fatalf("%d cases", len(file.Cases))
	}
	for _, c := range file.Cases {
		d, err := DesiredLoadBalancer(&c.Service)
		if err != nil {
			if len(c.Error) == 0 {
				t.Errorf("%s: refused: %v", c.Case, err)
			}
			for _, fragment := range c.Error {
				if !strings.Contains(err.Error(), fragment) {
					t.Errorf("%s: %q does not say %q", c.Case, err, fragment)
				}
			}
			continue
		}
		if len(c.Error) > 0 {
			t.Errorf("%s: not refused", c.Case)
			continue
		}
		var requested any
		if d.RequestedIP != "" {
			requested = d.RequestedIP
		}
		made := map[string]any{
			"scheme": d.Scheme, "listeners": d.Listeners, "source_ranges": d.SourceRanges, "requested_ip": requested,
			"health_check": d.HealthCheck, "session_affinity": d.Affinity, "forwarding": d.Forwarding,
			"backends": Backends(c.Nodes),
		}
		for part, want := range c.Want {
			sameJSON(t, c.Case+": "+part, made[part], want)
		}
	}
}

// sameJSON says whether got, written as JSON, is the value want is (as the Rust tests compare serde values).
func sameJSON(t *testing.T, what string, got any, want json.RawMessage) {
	t.Helper()
	text, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var gotValue, wantValue any
	if json.Unmarshal(text, &gotValue) != nil || json.Unmarshal(want, &wantValue) != nil {
		t.Fatalf("%s: %s or %s is not JSON", what, text, want)
	}
	if !reflect.DeepEqual(gotValue, wantValue) {
		t.Errorf("%s: got %s, want %s", what, text, want)
	}
}

func TestTheNameIsUpstreamsConvention(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{UID: "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}}
	if got := (&Cloud{}).GetLoadBalancerName(t.Context(), "kubernetes", svc); got != "a6f1c2d3e4a5b4c6d8e7f9a0b1c2d3e4" {
		t.Errorf("name = %q", got)
	}
	var _ cloudprovider.LoadBalancer = &Cloud{}
}

// The updates and statuses of the shared cases (ccm/testdata/load-balancers.json; fakecloud-ccm's in
// ccm/src/cloud/fakecloud.rs): the update Changes sends, or its refusal, and the status a load balancer gives.
func TestTheSharedUpdatesAndStatusesHold(t *testing.T) {
	raw, err := os.ReadFile("../../ccm/testdata/load-balancers.json")
	if err != nil {
		t.Fatal(err)
	}
	type lbCase struct {
		Case         string
		Service      v1.Service
		Backends     []string
		LoadBalancer map[string]any `json:"load_balancer"`
		Update       json.RawMessage
		Error        []string
		Status       json.RawMessage
	}
	var file struct {
		Updates  []lbCase
		Statuses []lbCase
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Updates) < 10 || len(file.Statuses) < 4 {
		t.Fatalf("%d updates, %d statuses", len(file.Updates), len(file.Statuses))
	}
	// The case's load_balancer, written over an active internet-facing one with nothing in it.
	lb := func(c lbCase) *fakecloudapi.LoadBalancer {
		whole := map[string]any{"id": "lb-1", "name": "a", "scheme": "internet-facing", "state": "active",
			"listeners": []any{}, "backends": []any{}, "source_ranges": []any{}, "created_at": "", "updated_at": ""}
		for k, v := range c.LoadBalancer {
			whole[k] = v
		}
		text, err := json.Marshal(whole)
		if err != nil {
			t.Fatal(err)
		}
		var out fakecloudapi.LoadBalancer
		if err := json.Unmarshal(text, &out); err != nil {
			t.Fatalf("%s: %v", c.Case, err)
		}
		return &out
	}
	for _, c := range file.Updates {
		want, err := DesiredLoadBalancer(&c.Service)
		if err != nil {
			t.Fatalf("%s: %v", c.Case, err)
		}
		req, err := Changes(lb(c), want, c.Backends)
		switch {
		case err != nil && len(c.Error) == 0:
			t.Errorf("%s: refused: %v", c.Case, err)
		case err != nil:
			for _, fragment := range c.Error {
				if !strings.Contains(err.Error(), fragment) {
					t.Errorf("%s: %q does not say %q", c.Case, err, fragment)
				}
			}
		case len(c.Error) > 0:
			t.Errorf("%s: not refused", c.Case)
		default:
			sameJSON(t, c.Case, req, c.Update)
		}
	}
	for _, c := range file.Statuses {
		sameJSON(t, c.Case, status(lb(c)), c.Status)
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

package provider

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// answer is what the test server says: a status, a Retry-After ("" for none), an error code.
type answer struct {
	status     int
	retryAfter string
	code       string
}

func TestCallsAreRetriedInPlaceWithinThePolicy(t *testing.T) {
	ok := answer{200, "", ""}
	unavailable := answer{503, "", "ServiceUnavailable"}
	quick := RetryPolicy{MaxAttempts: 3, MaxWait: time.Second, BaseBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	for _, c := range []struct {
		name    string
		answers []answer
		method  string
		key     string
		tries   int
		status  int
		atLeast time.Duration
	}{
		{"a 5xx on an idempotent call: tried again", []answer{unavailable, ok}, "GET", "", 2, 200, 0},
		{"three tries in all, then the error", []answer{unavailable}, "GET", "", 3, 503, 0},
		{"a 5xx on a POST without a key may have run: not tried again", []answer{unavailable, ok}, "POST", "", 1, 503, 0},
		{"a create with an Idempotency-Key runs once per key: tried again", []answer{unavailable, ok}, "POST", "k", 2, 200, 0},
		{"a 429 without Retry-After was refused before it ran: any call", []answer{{429, "", "TooManyRequests"}, ok}, "POST", "", 2, 200, 0},
		{"ELB's 400 Throttling is a throttle", []answer{{400, "", "Throttling"}, ok}, "PATCH", "", 2, 200, 0},
		{"a short Retry-After is waited out", []answer{{429, "0.2", "TooManyRequests"}, ok}, "GET", "", 2, 200, 200 * time.Millisecond},
		{"a Retry-After past MaxWait goes back to the caller", []answer{{429, "30", "TooManyRequests"}, ok}, "GET", "", 1, 429, 0},
		{"a bad request is not retried", []answer{{400, "", "InvalidParameter"}, ok}, "GET", "", 1, 400, 0},
	} {
		var mu sync.Mutex
		tries := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			tries++
			a := c.answers[min(tries, len(c.answers))-1]
			mu.Unlock()
			if body, _ := io.ReadAll(r.Body); r.Method == "POST" && string(body) != `{"x":1}` {
				t.Errorf("%s: body %q on try %d", c.name, body, tries)
			}
			if a.retryAfter != "" {
				w.Header().Set("Retry-After", a.retryAfter)
			}
			w.WriteHeader(a.status)
			_, _ = fmt.Fprintf(w, `{"error":{"code":%q,"message":"m","request_id":"r"}}`, a.code)
		}))
		doer := &retrying{next: srv.Client(), policy: quick}
		var body io.Reader
		if c.method == "POST" || c.method == "PATCH" {
			body = strings.NewReader(`{"x":1}`)
		}
		req, _ := http.NewRequest(c.method, srv.URL, body)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		start := time.Now()
		resp, err := doer.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != c.status || tries != c.tries || time.Since(start) < c.atLeast {
			t.Errorf("%s: status %d after %d tries in %s, want %d after %d", c.name, resp.StatusCode, tries, time.Since(start), c.status, c.tries)
		}
		// The caller still reads the error envelope the last try got.
		if c.status != 200 && !strings.Contains(string(got), `"code"`) {
			t.Errorf("%s: body %q", c.name, got)
		}
		srv.Close()
	}
}

// An ensure's calls do not grow with the nodes: the lookup, one listing of the running instances when the
// backends gain one (a page holds 1,000), and the write; never a call per node. Under a cloud that fails every
// first try, each call is retried in place and the ensure succeeds.
func TestAnEnsureCostsTheSameCallsWhateverTheNodeCount(t *testing.T) {
	create := []string{"GET /v1/load-balancers", "GET /v1/instances", "POST /v1/load-balancers"}
	for _, c := range []struct {
		name  string
		nodes int
		flaky bool
		want  []string
	}{
		{"1 node", 1, false, create},
		{"50 nodes", 50, false, create},
		{"500 nodes", 500, false, create},
		{"500 nodes, every first try failed", 500, true, []string{create[0], create[0], create[1], create[1], create[2], create[2]}},
	} {
		var calls []string
		c0 := c
		cloud := emulator(t, func(w http.ResponseWriter, r *http.Request) {
			calls = append(calls, r.Method+" "+r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			if c0.flaky && len(calls)%2 == 1 {
				w.WriteHeader(503)
				_, _ = w.Write([]byte(`{"error":{"code":"ServiceUnavailable","message":"blip","request_id":"r"}}`))
				return
			}
			switch {
			case r.URL.Path == "/v1/instances":
				items := make([]string, 500)
				for i := range items {
					items[i] = instanceJSON(fmt.Sprintf("i-%d", i))
				}
				_, _ = w.Write([]byte(`{"items":[` + strings.Join(items, ",") + `]}`))
			case r.Method == http.MethodGet:
				_, _ = w.Write([]byte(`{"items":[]}`))
			default:
				w.WriteHeader(201)
				_, _ = w.Write([]byte(`{"id":"lb-1","name":"a","scheme":"internet-facing","state":"active","listeners":[],
					"backends":[],"source_ranges":[],"address":"203.0.113.9","created_at":"","updated_at":""}`))
			}
		})
		cloud.api.Client.(*retrying).policy.BaseBackoff = time.Millisecond
		nodes := make([]*v1.Node, c.nodes)
		for i := range nodes {
			id := fmt.Sprintf("i-%d", i)
			nodes[i] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: id}, Spec: v1.NodeSpec{ProviderID: "fakecloud://local-1a/" + id}}
		}
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u-1"}, Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80, NodePort: 30080}}}}
		if _, err := cloud.EnsureLoadBalancer(t.Context(), "kubernetes", svc, nodes); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if strings.Join(calls, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: calls = %q, want %q", c.name, calls, c.want)
		}
	}
}

package provider

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
)

// An emulator that answers GET /v1/region, and then what the test gives for everything else.
func emulator(t *testing.T, rest http.HandlerFunc) *Cloud {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(401)
			return
		}
		if r.URL.Path == "/v1/region" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"name":"local-1","vpc_cidr":"10.0.0.0/16","zones":[]}`))
			return
		}
		rest(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(&Config{Endpoint: srv.URL, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestThrottlingIsAnErrorWithItsRetryAfter(t *testing.T) {
	c := emulator(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(429)
		_, _ = w.Write([]byte(`{"error":{"code":"Throttled","message":"slow down","request_id":"r"}}`))
	})
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: v1.NodeSpec{ProviderID: "fakecloud://local-1a/i-1"}}
	_, err := c.InstanceExists(t.Context(), node)
	var apiErr *APIError
	if err == nil || !strings.Contains(err.Error(), "Throttled") {
		t.Fatalf("err = %v", err)
	}
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || apiErr.RetryAfter != 3*time.Second {
		t.Errorf("err = %#v", err)
	}
}

func TestInstancesByProviderIDOrName(t *testing.T) {
	instance := `{"id":"i-1","name":"n","zone":"local-1a","region":"local-1","instance_type":"m.small","market":"on-demand",
		"state":"%s","private_ip":"10.0.1.5","ipv6_address":"fd00::5","provider_id":"fakecloud://local-1a/i-1","tags":{},
		"created_at":"t","state_changed_at":"t"}`
	state := "running"
	c := emulator(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/instances/i-1":
			_, _ = w.Write([]byte(strings.Replace(instance, "%s", state, 1)))
		case r.URL.Path == "/v1/instances" && r.URL.Query().Get("name") == "n":
			// Oldest first: a terminated namesake before the live one.
			old := strings.Replace(strings.Replace(instance, "%s", "terminated", 1), `"i-1"`, `"i-0"`, 1)
			_, _ = w.Write([]byte(`{"items":[` + old + "," + strings.Replace(instance, "%s", state, 1) + `]}`))
		case r.URL.Path == "/v1/instances":
			_, _ = w.Write([]byte(`{"items":[]}`))
		default:
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"code":"InstanceNotFound","message":"no","request_id":"r"}}`))
		}
	})
	byName := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	md, err := c.InstanceMetadata(t.Context(), byName)
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "fakecloud://local-1a/i-1" || md.Zone != "local-1a" || md.Region != "local-1" || md.InstanceType != "m.small" {
		t.Errorf("metadata = %+v", md)
	}
	want := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.1.5"}, {Type: v1.NodeInternalIP, Address: "fd00::5"}, {Type: v1.NodeHostName, Address: "n"}}
	if len(md.NodeAddresses) != 3 || md.NodeAddresses[0] != want[0] || md.NodeAddresses[1] != want[1] || md.NodeAddresses[2] != want[2] {
		t.Errorf("addresses = %+v", md.NodeAddresses)
	}
	byID := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: v1.NodeSpec{ProviderID: "fakecloud://local-1a/i-1"}}
	state = "stopping"
	if down, err := c.InstanceShutdown(t.Context(), byID); err != nil || !down {
		t.Errorf("stopping: shutdown %v, %v", down, err)
	}
	state = "terminated"
	if ok, err := c.InstanceExists(t.Context(), byID); err != nil || ok {
		t.Errorf("terminated: exists %v, %v", ok, err)
	}
	gone := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}, Spec: v1.NodeSpec{ProviderID: "fakecloud://local-1a/i-9"}}
	if ok, err := c.InstanceExists(t.Context(), gone); err != nil || ok {
		t.Errorf("404: exists %v, %v", ok, err)
	}
	if _, err := c.InstanceMetadata(t.Context(), gone); err != cloudprovider.InstanceNotFound {
		t.Errorf("404: metadata err %v", err)
	}
	if _, err := c.InstanceMetadata(t.Context(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}); err != cloudprovider.InstanceNotFound {
		t.Errorf("no instance of that name: %v", err)
	}
}

func TestProviderIDsAreParsedStrictly(t *testing.T) {
	for pid, want := range map[string]string{
		"fakecloud://local-1a/i-0123": "i-0123",
		"aws:///us-east-1a/i-0123":    "",
		"fakecloud://local-1a/":       "",
		"fakecloud://local-1a/a/b":    "",
	} {
		if got := InstanceID(pid); got != want {
			t.Errorf("InstanceID(%q) = %q, want %q", pid, got, want)
		}
	}
}

// The service controller requeues an api.RetryError after exactly its delay: a throttled create must be one,
// with the cloud's Retry-After and its error code in the message (the SyncLoadBalancerFailed event shows it),
// whichever status the cloud throttles with (EC2's 503, Azure's 429, GCP's 403 rateLimitExceeded).
func TestAThrottledCreateIsARetryErrorWithTheCloudsDelay(t *testing.T) {
	for _, throttle := range []struct {
		status int
		code   string
	}{{503, "RequestLimitExceeded"}, {429, "SubscriptionRequestsThrottled"}, {403, "rateLimitExceeded"}} {
		c := emulator(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodGet {
				_, _ = w.Write([]byte(`{"items":[]}`))
				return
			}
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(throttle.status)
			_, _ = w.Write([]byte(`{"error":{"code":"` + throttle.code + `","message":"slow down","request_id":"r"}}`))
		})
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u-1"}, Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80, NodePort: 30080}}}}
		_, err := c.EnsureLoadBalancer(t.Context(), "kubernetes", svc, nil)
		var re *api.RetryError
		if !errors.As(err, &re) || re.RetryAfter() != 3*time.Second || !strings.Contains(err.Error(), throttle.code) {
			t.Errorf("%d %s: err = %#v", throttle.status, throttle.code, err)
		}
	}
}

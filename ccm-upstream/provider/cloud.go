// Package provider is fakecloud's cloudprovider.Interface for upstream's cloud-controller-manager: InstancesV2,
// LoadBalancer and Routes against the emulator's REST API, through the client generated from its OpenAPI
// document (package fakecloudapi). It mirrors fakecloud-ccm's cloud (ccm/src/cloud/) call for call, so that
// the e2e suite's differences between the two CCMs are the controllers', not the clouds'.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
)

// Name is the provider's name, as --cloud-provider gives it and providerIDs start with.
const Name = "fakecloud"

// requestTimeout bounds one API call, so a hung emulator fails the call and the controller requeues.
const requestTimeout = 30 * time.Second

func init() {
	cloudprovider.RegisterCloudProvider(Name, func(r io.Reader) (cloudprovider.Interface, error) {
		cfg, err := ReadConfig(r)
		if err != nil {
			return nil, err
		}
		return New(cfg)
	})
}

// Cloud is the fakecloud provider.
type Cloud struct {
	api   *fakecloudapi.Client
	cfg   *Config
	nodes corelisters.NodeLister // set by SetInformers; routes name nodes, the cloud names instances
}

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InformerUser = (*Cloud)(nil)
	_ cloudprovider.InstancesV2  = (*Cloud)(nil)
	_ cloudprovider.LoadBalancer = (*Cloud)(nil)
	_ cloudprovider.Routes       = (*Cloud)(nil)
)

// New makes the provider's client and checks the cloud-config's region against the emulator's.
func New(cfg *Config) (*Cloud, error) {
	c := &Cloud{cfg: cfg}
	// Failed calls retried in place, as cloud SDKs retry them and fakecloud-ccm does: a sync of a few calls then
	// fails only when one call fails three times.
	doer := &retrying{next: &http.Client{Timeout: requestTimeout}, policy: DefaultRetryPolicy}
	api, err := fakecloudapi.NewClient(cfg.Endpoint,
		fakecloudapi.WithHTTPClient(doer),
		fakecloudapi.WithBearerToken(cfg.Token))
	if err != nil {
		return nil, fmt.Errorf("cloud-config: endpoint %q: %w", cfg.Endpoint, err)
	}
	c.api = api
	if err := c.checkRegion(); err != nil {
		return nil, err
	}
	return c, nil
}

// checkRegion asks the emulator for its region, as fakecloud-ccm does first: a throttled or unavailable cloud
// (429/503 with Retry-After) is waited out, anything else stops the start.
func (c *Cloud) checkRegion() error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		raw, err := c.api.GetRegion(ctx)
		resp, err := call(raw, err, fakecloudapi.ParseGetRegionResponse)
		cancel()
		if err == nil {
			got := resp.JSON200.Name
			if c.cfg.Region != "" && c.cfg.Region != got {
				return fmt.Errorf("cloud-config says region %q, but the emulator at %s serves %q", c.cfg.Region, c.cfg.Endpoint, got)
			}
			klog.InfoS("fakecloud provider ready", "endpoint", c.cfg.Endpoint, "region", got)
			return nil
		}
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.RetryAfter == 0 {
			return fmt.Errorf("the emulator at %s: %w", c.cfg.Endpoint, err)
		}
		klog.InfoS("the cloud says to wait before starting", "after", apiErr.RetryAfter, "err", err)
		time.Sleep(apiErr.RetryAfter)
	}
}

// Initialize is called by the command before the controllers start; the provider needs nothing from it.
func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// SetInformers gives the provider the nodes it maps route targets with (instance ID ↔ node name).
func (c *Cloud) SetInformers(f informers.SharedInformerFactory) {
	c.nodes = f.Core().V1().Nodes().Lister()
}

func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }

// Instances is the pre-InstancesV2 interface; InstancesV2 replaces it (and Zones) in the node controllers.
func (c *Cloud) Instances() (cloudprovider.Instances, bool)     { return nil, false }
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c, true }
func (c *Cloud) Zones() (cloudprovider.Zones, bool)             { return nil, false }
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool)       { return nil, false }
func (c *Cloud) Routes() (cloudprovider.Routes, bool)           { return c, true }
func (c *Cloud) ProviderName() string                           { return Name }

// HasClusterID: routes carry the cluster's name (--cluster-name), which is the ID this cloud needs.
func (c *Cloud) HasClusterID() bool { return true }

// APIError is a non-2xx answer of the emulator: its status, its error code (fakecloud_api::codes) and, on
// 429/503/403, the Retry-After it asked for. Upstream's controllers requeue on any error (with backoff), so the
// delay is only reported, not waited out here.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("fakecloud API: %d %s: %s", e.Status, e.Code, e.Message)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}

// parsed is what every generated *Response has: the body it read.
type parsed interface{ GetBody() []byte }

// call finishes one generated call: the parsed 2xx answer, or an error — the transport's, or an *APIError
// with the error body's code and the Retry-After header (which the parsed responses keep only for the
// statuses the document declares, and 429 is declared for none).
func call[R parsed](raw *http.Response, err error, parse func(*http.Response) (R, error)) (R, error) {
	var zero R
	if err != nil {
		return zero, err
	}
	r, err := parse(raw)
	if err != nil {
		return zero, err
	}
	if raw.StatusCode >= 200 && raw.StatusCode < 300 {
		return r, nil
	}
	return zero, apiError(raw.StatusCode, raw.Header, r.GetBody())
}

func apiError(status int, header http.Header, body []byte) *APIError {
	e := &APIError{Status: status}
	var eb fakecloudapi.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	// GCP's 403 rateLimitExceeded says when its window ends, as a 429 or 503 does.
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == http.StatusForbidden {
		if secs, err := strconv.Atoi(strings.TrimSpace(header.Get("Retry-After"))); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return e
}

// isStatus tells whether err is the API answering status.
func isStatus(err error, status int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == status
}

// isCode tells whether err is the API answering one of these error codes.
func isCode(err error, codes ...string) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}

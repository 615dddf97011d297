package provider

import (
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RetryPolicy is how the provider's HTTP client retries a call in place, as cloud SDKs do and as fakecloud-ccm's
// client does (api/src/client.rs, RetryPolicy): the AWS SDK's standard retryer makes 3 attempts with jittered
// exponential backoff on throttling and 5xx. A throttle (429, a throttle code, a 503 with Retry-After) was
// refused before it ran, so any call is tried again; a 5xx or a refused connection only an idempotent one (GET,
// PUT, PATCH, DELETE, or a create sent with an Idempotency-Key). The wait is the cloud's Retry-After, or else a
// random one up to BaseBackoff·2ⁿ capped at MaxBackoff (full jitter); a Retry-After longer than MaxWait goes back
// to the caller at once, for the controller's queue to wait out.
type RetryPolicy struct {
	MaxAttempts int
	MaxWait     time.Duration
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
}

// DefaultRetryPolicy is fakecloud-ccm's default.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 3, MaxWait: time.Second, BaseBackoff: 250 * time.Millisecond, MaxBackoff: 2 * time.Second}

// throttleCodes are the clouds' throttles under a status that otherwise means a bad request (fakecloud_api's
// codes::THROTTLES).
var throttleCodes = []string{"Throttling", "ThrottlingException", "rateLimitExceeded", "userRateLimitExceeded"}

// retrying is the generated client's HttpRequestDoer with the policy around another: the one place the provider
// retries.
type retrying struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	policy RetryPolicy
}

func (r *retrying) Do(req *http.Request) (*http.Response, error) {
	idempotent := req.Header.Get("Idempotency-Key") != "" ||
		slices.Contains([]string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete}, req.Method)
	for attempt := 1; ; attempt++ {
		try := req
		if attempt > 1 && req.Body != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			try = req.Clone(req.Context())
			try.Body = body
		}
		resp, err := r.next.Do(try)
		wait, again := r.policy.wait(attempt, idempotent, resp, err)
		// A body that cannot be sent again ends the retries.
		if !again || (req.Body != nil && req.GetBody == nil) {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		t := time.NewTimer(wait)
		select {
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		case <-t.C:
		}
	}
}

// wait is how long to wait before trying again a call that got resp or err on its attempt-th try, and whether
// to. Reading the error code leaves resp's body readable for the caller.
func (p RetryPolicy) wait(attempt int, idempotent bool, resp *http.Response, err error) (time.Duration, bool) {
	if attempt >= p.MaxAttempts {
		return 0, false
	}
	var retryAfter time.Duration
	hasRetryAfter := false
	switch {
	case err != nil:
		if !idempotent || !refused(err) {
			return 0, false
		}
	case resp.StatusCode < 400:
		return 0, false
	default:
		if secs, perr := strconv.ParseFloat(strings.TrimSpace(resp.Header.Get("Retry-After")), 64); perr == nil && secs >= 0 {
			retryAfter, hasRetryAfter = time.Duration(secs*float64(time.Second)), true
		}
		throttled := resp.StatusCode == http.StatusTooManyRequests ||
			(resp.StatusCode == http.StatusServiceUnavailable && hasRetryAfter) || slices.Contains(throttleCodes, errorCode(resp))
		if !throttled && (!idempotent || resp.StatusCode < 500) {
			return 0, false
		}
	}
	if hasRetryAfter {
		return retryAfter, retryAfter <= p.MaxWait
	}
	ceiling := min(p.BaseBackoff<<min(attempt-1, 16), p.MaxBackoff)
	return time.Duration(rand.Int64N(int64(ceiling) + 1)), true
}

// refused says whether err is a connection the cloud never accepted, so the call did not run.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// errorCode is the code of the API's error envelope in resp, which stays readable afterwards.
func errorCode(resp *http.Response) string {
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusForbidden {
		return ""
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	if err != nil {
		return ""
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

package fakecloudapi

import (
	"context"
	"net/http"
)

// WithBearerToken sends token on every request the way the emulator authenticates a caller (Authorization:
// Bearer). Written by hand beside the generated client, which has no option for it, so the provider and the
// testcontainers module authenticate the same way.
func WithBearerToken(token string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}

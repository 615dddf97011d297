// Package fakecloud starts the fakecloud emulator from a Go test the way a test starts Postgres or LocalStack:
// a testcontainers-go module for the emulator's image (fakecloud/emulator, which `make kind-up` builds), ready
// once GET /healthz answers 200, with tokens of its own and API clients ready for both of them. It is the Go
// twin of the Rust crate fakecloud-testcontainers.
//
//	cloud, err := fakecloud.Run(ctx, fakecloud.WithServeArgs("--boot-delay", "0s"))
//	if err != nil { ... }
//	defer cloud.Terminate(ctx)
//	resp, err := cloud.User().CreateInstanceWithResponse(ctx, nil, fakecloudapi.CreateInstanceRequest{Name: "node-a"})
//	// Point the code under test at cloud.Endpoint() with cloud.UserToken().
//
// The engine is the one of DOCKER_HOST (or the default socket). The image is used as the engine has it and
// only pulled when it is missing. testcontainers-go starts a reaper container (Ryuk) by default, whose image
// comes from a registry: with no registry, set TESTCONTAINERS_RYUK_DISABLED=true — Terminate (or
// testcontainers.CleanupContainer on Testcontainer()) then is what removes the container.
package fakecloud

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
)

const (
	// DefaultImage is the emulator's image as `make kind-up` (`fakecloud-kind images`) tags it.
	DefaultImage = "fakecloud/emulator:dev"
	// Port is the port the image's emulator listens on.
	Port = "8787/tcp"
	// EnvUserToken and EnvAdminToken are how `fakecloud serve` is given its tokens.
	EnvUserToken  = "FAKECLOUD_USER_TOKEN"
	EnvAdminToken = "FAKECLOUD_ADMIN_TOKEN"
	// minTokenLen is what `fakecloud serve` asks of a token; checked here so a short one fails at once
	// rather than as a container that never becomes ready.
	minTokenLen = 16
)

type options struct {
	image       string
	userToken   string
	adminToken  string
	serveArgs   []string
	customizers []testcontainers.ContainerCustomizer
}

// Option changes how Run starts the emulator.
type Option func(*options)

// WithImage names another image of the emulator (one whose entrypoint is `fakecloud serve` on port 8787).
func WithImage(image string) Option {
	return func(o *options) { o.image = image }
}

// WithTokens sets the customer's and the admin's tokens (at least 16 characters each, as `fakecloud serve`
// asks). Without it each container gets random ones, so two tests never share a token by accident.
func WithTokens(user, admin string) Option {
	return func(o *options) { o.userToken, o.adminToken = user, admin }
}

// WithServeArgs adds `fakecloud serve` flags, e.g. "--boot-delay", "0s" (see `fakecloud serve --help`): the
// image's entrypoint is `fakecloud serve`, so the container's arguments are more of its flags.
func WithServeArgs(args ...string) Option {
	return func(o *options) { o.serveArgs = append(o.serveArgs, args...) }
}

// WithCustomizers passes testcontainers-go customizers through (a network, log consumers, a name, ...),
// applied after this package's own.
func WithCustomizers(customizers ...testcontainers.ContainerCustomizer) Option {
	return func(o *options) { o.customizers = append(o.customizers, customizers...) }
}

// Container is a running emulator: its endpoint, its tokens and clients as the customer (User, what a CCM
// uses) and as the admin (faults, quotas, the audit log).
type Container struct {
	container  *testcontainers.DockerContainer
	endpoint   string
	userToken  string
	adminToken string
	user       *fakecloudapi.ClientWithResponses
	admin      *fakecloudapi.ClientWithResponses
}

// Run starts the emulator and waits until GET /healthz answers 200. On error nothing is left running.
func Run(ctx context.Context, opts ...Option) (*Container, error) {
	o := options{image: DefaultImage}
	for _, opt := range opts {
		opt(&o)
	}
	var err error
	if o.userToken == "" && o.adminToken == "" {
		if o.userToken, err = randomToken("user"); err != nil {
			return nil, err
		}
		if o.adminToken, err = randomToken("admin"); err != nil {
			return nil, err
		}
	}
	if len(o.userToken) < minTokenLen || len(o.adminToken) < minTokenLen {
		return nil, fmt.Errorf("fakecloud: both tokens must be at least %d characters, as fakecloud serve asks", minTokenLen)
	}

	customizers := []testcontainers.ContainerCustomizer{
		testcontainers.WithExposedPorts(Port),
		testcontainers.WithEnv(map[string]string{EnvUserToken: o.userToken, EnvAdminToken: o.adminToken}),
		testcontainers.WithCmd(o.serveArgs...),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/healthz").WithPort(Port).
			WithStatusCodeMatcher(func(status int) bool { return status == 200 })),
	}
	ctr, err := testcontainers.Run(ctx, o.image, append(customizers, o.customizers...)...)
	c := &Container{container: ctr, userToken: o.userToken, adminToken: o.adminToken}
	if err == nil {
		err = c.connect(ctx)
	}
	if err != nil {
		// Without the reaper nothing else would remove a container that started but never got ready.
		if ctr != nil {
			err = errors.Join(err, testcontainers.TerminateContainer(ctr))
		}
		return nil, fmt.Errorf("fakecloud: %s: %w", o.image, err)
	}
	return c, nil
}

func (c *Container) connect(ctx context.Context) error {
	endpoint, err := c.container.PortEndpoint(ctx, Port, "http")
	if err != nil {
		return err
	}
	c.endpoint = endpoint
	if c.user, err = fakecloudapi.NewClientWithResponses(endpoint, fakecloudapi.WithBearerToken(c.userToken)); err != nil {
		return err
	}
	c.admin, err = fakecloudapi.NewClientWithResponses(endpoint, fakecloudapi.WithBearerToken(c.adminToken))
	return err
}

func randomToken(role string) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("fakecloud: a random %s token: %w", role, err)
	}
	return role + "-" + hex.EncodeToString(b), nil
}

// Endpoint is the emulator's base URL as the host sees it, e.g. http://localhost:32768.
func (c *Container) Endpoint() string { return c.endpoint }

// UserToken is the customer's token: what the code under test (a CCM's cloud config) is given.
func (c *Container) UserToken() string { return c.userToken }

// AdminToken is the admin's token (quotas, faults, the audit log, reset).
func (c *Container) AdminToken() string { return c.adminToken }

// User is a client of the emulator's API with the customer's token.
func (c *Container) User() *fakecloudapi.ClientWithResponses { return c.user }

// Admin is a client of the emulator's API with the admin's token.
func (c *Container) Admin() *fakecloudapi.ClientWithResponses { return c.admin }

// Testcontainer is the container itself (its ID, logs, stop and start, exec).
func (c *Container) Testcontainer() *testcontainers.DockerContainer { return c.container }

// Terminate stops and removes the container; it is safe on a nil *Container.
func (c *Container) Terminate(ctx context.Context, opts ...testcontainers.TerminateOption) error {
	if c == nil || c.container == nil {
		return nil
	}
	return c.container.Terminate(ctx, opts...)
}

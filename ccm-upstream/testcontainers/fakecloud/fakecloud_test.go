package fakecloud_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
	"fakecloud.dev/ccm-upstream/testcontainers/fakecloud"
)

// The module against a real engine (DOCKER_HOST, or the default socket) holding the emulator's image that
// `make kind-up` builds: started, ready, both clients working, removed by Terminate. Without an engine it is
// skipped, unless FAKECLOUD_TESTCONTAINERS=1 (`make test-kind` sets it), where that is a failure.
func TestTheEmulatorStartsAnswersBothTokensAndIsRemovedOnTerminate(t *testing.T) {
	// The reaper's image comes from a registry, which the machines this runs on may not reach; Terminate
	// removes the container instead. Set before testcontainers-go first reads its configuration (once).
	t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	docker, err := engine(ctx)
	if err != nil {
		if os.Getenv("FAKECLOUD_TESTCONTAINERS") == "1" {
			t.Fatalf("no container engine answers (DOCKER_HOST=%q: %v), and FAKECLOUD_TESTCONTAINERS=1 asks for this test",
				os.Getenv("DOCKER_HOST"), err)
		}
		// testcontainers-go's error names only the last place it looked: say which engine was asked for.
		t.Skipf("skipping: no container engine answers (DOCKER_HOST=%q: %v); make test-kind runs this test",
			os.Getenv("DOCKER_HOST"), err)
	}
	defer func() { _ = docker.Close() }()

	cloud, err := fakecloud.Run(ctx, fakecloud.WithServeArgs("--boot-delay", "0s"))
	if err != nil {
		t.Fatal(err)
	}
	terminated := false
	defer func() {
		if !terminated {
			_ = cloud.Terminate(context.Background())
		}
	}()

	created, err := cloud.User().CreateInstanceWithResponse(ctx, nil, fakecloudapi.CreateInstanceRequest{Name: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if created.JSON201 == nil {
		t.Fatalf("create an instance with the user token: %d %s", created.StatusCode(), created.Body)
	}
	got, err := cloud.Admin().GetInstanceWithResponse(ctx, created.JSON201.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.JSON200 == nil || got.JSON200.Name != "node-a" {
		t.Fatalf("read it back with the admin token: %d %s", got.StatusCode(), got.Body)
	}

	// The tokens are the two roles: the customer's cannot change a quota, the admin's can.
	quota := fakecloudapi.SetQuotaRequest{Limit: 5}
	denied, err := cloud.User().SetQuotaWithResponse(ctx, string(fakecloudapi.Instances), quota)
	if err != nil {
		t.Fatal(err)
	}
	if denied.StatusCode() != http.StatusForbidden {
		t.Fatalf("set a quota with the user token: want 403, got %d %s", denied.StatusCode(), denied.Body)
	}
	set, err := cloud.Admin().SetQuotaWithResponse(ctx, string(fakecloudapi.Instances), quota)
	if err != nil {
		t.Fatal(err)
	}
	if set.JSON200 == nil || set.JSON200.Limit != 5 {
		t.Fatalf("set a quota with the admin token: %d %s", set.StatusCode(), set.Body)
	}

	id := cloud.Testcontainer().GetContainerID()
	if _, err := docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("inspect the running container %s: %v", id, err)
	}
	terminated = true
	if err := cloud.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	// Terminate returns once the engine has removed the container.
	if _, err := docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !errdefs.IsNotFound(err) {
		t.Fatalf("container %s after Terminate: want not found, got %v", id, err)
	}
}

// engine is a client of the engine testcontainers-go picks (DOCKER_HOST first), once it answers.
func engine(ctx context.Context) (docker *testcontainers.DockerClient, err error) {
	// testcontainers-go panics on some ways of finding no engine at all; that is "no engine" here too.
	defer func() {
		if r := recover(); r != nil {
			docker, err = nil, fmt.Errorf("%v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return testcontainers.NewDockerClientWithOpts(ctx)
}

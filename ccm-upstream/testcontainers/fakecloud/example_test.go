package fakecloud_test

import (
	"context"
	"fmt"
	"log"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
	"fakecloud.dev/ccm-upstream/testcontainers/fakecloud"
)

// Compiled, not run (no Output comment): it keeps the package documentation's and the book's example true.
func ExampleRun() {
	ctx := context.Background()
	cloud, err := fakecloud.Run(ctx, fakecloud.WithServeArgs("--boot-delay", "0s"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cloud.Terminate(ctx) }()
	resp, err := cloud.User().CreateInstanceWithResponse(ctx, nil, fakecloudapi.CreateInstanceRequest{Name: "node-a"})
	if err != nil {
		log.Fatal(err)
	}
	// The code under test is pointed at cloud.Endpoint() with cloud.UserToken().
	fmt.Println(resp.StatusCode(), cloud.Endpoint())
}

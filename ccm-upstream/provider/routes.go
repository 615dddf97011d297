package provider

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
)

// routeTable is where routes live: the emulator's main route table, as for fakecloud-ccm.
const routeTable = "main"

// RouteName is a route's name in the cloud: the cluster's name and the node's UID (upstream's nameHint), so a
// cluster finds its own routes among others' (fakecloud-ccm's naming).
func RouteName(cluster, nameHint string) string {
	return cluster + "-" + nameHint
}

// ListRoutes lists this cluster's routes in one call. Route.Name carries the cloud's route ID, which
// DeleteRoute needs; TargetNode is the Node whose providerID names the target instance ("" when none does,
// which makes the route controller delete the route if it lies in the cluster CIDR).
func (c *Cloud) ListRoutes(ctx context.Context, cluster string) ([]*cloudprovider.Route, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := c.api.ListRoutes(ctx, routeTable)
	resp, err := call(raw, err, fakecloudapi.ParseListRoutesResponse)
	if err != nil {
		return nil, fmt.Errorf("ListRoutes %s: %w", routeTable, err)
	}
	nodeOf, err := c.nodesByInstance()
	if err != nil {
		return nil, err
	}
	prefix := cluster + "-"
	var routes []*cloudprovider.Route
	for _, r := range resp.JSON200.Items {
		if !strings.HasPrefix(r.Name, prefix) {
			continue
		}
		routes = append(routes, &cloudprovider.Route{
			Name:            r.Id,
			TargetNode:      nodeOf[r.TargetInstance],
			DestinationCIDR: r.Destination, // as stored: compared as text (docs/upstream-ccm.md, trap 16)
			Blackhole:       r.State == fakecloudapi.RouteStateBlackhole,
		})
	}
	return routes, nil
}

// nodesByInstance maps instance IDs to the names of the Nodes whose providerID names them.
func (c *Cloud) nodesByInstance() (map[string]types.NodeName, error) {
	if c.nodes == nil {
		return nil, fmt.Errorf("the provider has no node informer yet")
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	byID := make(map[string]types.NodeName, len(nodes))
	for _, n := range nodes {
		if id := InstanceID(n.Spec.ProviderID); id != "" {
			byID[id] = types.NodeName(n.Name)
		}
	}
	return byID, nil
}

// CreateRoute routes the CIDR to the target node's instance. An existing route of that name (a retry after a
// lost answer) is success: the next listing shows it.
func (c *Cloud) CreateRoute(ctx context.Context, cluster string, nameHint string, route *cloudprovider.Route) error {
	target, err := c.instanceOfNode(route.TargetNode)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	body := fakecloudapi.CreateRouteRequest{
		Name:           RouteName(cluster, nameHint),
		Destination:    route.DestinationCIDR,
		TargetInstance: target,
	}
	raw, err := c.api.CreateRoute(ctx, routeTable, &fakecloudapi.CreateRouteParams{}, body)
	_, err = call(raw, err, fakecloudapi.ParseCreateRouteResponse)
	if err != nil && !isCode(err, "RouteAlreadyExists") {
		return fmt.Errorf("CreateRoute %s %s → %s: %w", body.Name, body.Destination, target, err)
	}
	return nil
}

func (c *Cloud) instanceOfNode(name types.NodeName) (string, error) {
	if c.nodes == nil {
		return "", fmt.Errorf("the provider has no node informer yet")
	}
	node, err := c.nodes.Get(string(name))
	if err != nil {
		return "", fmt.Errorf("node %s: %w", name, err)
	}
	id := InstanceID(node.Spec.ProviderID)
	if id == "" {
		return "", fmt.Errorf("node %s has no fakecloud providerID yet", name)
	}
	return id, nil
}

// DeleteRoute deletes the route by the ID ListRoutes put in its Name; one already gone is success.
func (c *Cloud) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := c.api.DeleteRoute(ctx, routeTable, route.Name)
	_, err = call(raw, err, fakecloudapi.ParseDeleteRouteResponse)
	if err != nil && !isStatus(err, 404) {
		return fmt.Errorf("DeleteRoute %s (%s): %w", route.Name, route.DestinationCIDR, err)
	}
	return nil
}

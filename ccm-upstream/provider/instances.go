package provider

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"fakecloud.dev/ccm-upstream/fakecloudapi"
)

const providerIDPrefix = Name + "://"

// InstanceID is the instance ID in a providerID fakecloud://<zone>/<id>, or "" when it is not one of
// fakecloud's (the same strict parse as fakecloud_api::parse_provider_id).
func InstanceID(providerID string) string {
	rest, ok := strings.CutPrefix(providerID, providerIDPrefix)
	if !ok {
		return ""
	}
	_, id, ok := strings.Cut(rest, "/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return ""
	}
	return id
}

// lookup finds the node's instance: by the ID in its providerID, or, before it has one, by its name (the
// newest instance of that name that is not terminated). One API call either way; a missing instance is
// cloudprovider.InstanceNotFound.
func (c *Cloud) lookup(ctx context.Context, node *v1.Node) (*fakecloudapi.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if pid := node.Spec.ProviderID; pid != "" {
		id := InstanceID(pid)
		if id == "" {
			return nil, fmt.Errorf("node %s: providerID %q is not fakecloud://<zone>/<id>", node.Name, pid)
		}
		raw, err := c.api.GetInstance(ctx, id)
		resp, err := call(raw, err, fakecloudapi.ParseGetInstanceResponse)
		if isStatus(err, 404) {
			return nil, cloudprovider.InstanceNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("node %s: GetInstance %s: %w", node.Name, id, err)
		}
		return resp.JSON200, nil
	}
	name := node.Name
	raw, err := c.api.ListInstances(ctx, &fakecloudapi.ListInstancesParams{Name: &name})
	resp, err := call(raw, err, fakecloudapi.ParseListInstancesResponse)
	if err != nil {
		return nil, fmt.Errorf("node %s: ListInstances: %w", name, err)
	}
	items := resp.JSON200.Items
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].State != fakecloudapi.InstanceStateTerminated {
			return &items[i], nil
		}
	}
	return nil, cloudprovider.InstanceNotFound
}

// InstanceExists: a terminated instance does not exist (its Node is deleted).
func (c *Cloud) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	i, err := c.lookup(ctx, node)
	if err == cloudprovider.InstanceNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return i.State != fakecloudapi.InstanceStateTerminated, nil
}

// InstanceShutdown: stopped or stopping (the Node gets the shutdown taint).
func (c *Cloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	i, err := c.lookup(ctx, node)
	if err != nil {
		return false, err
	}
	return i.State == fakecloudapi.InstanceStateStopped || i.State == fakecloudapi.InstanceStateStopping, nil
}

// InstanceMetadata is the node's providerID, type, zone, region and addresses: an InternalIP of each family
// the instance has (a dual-stack machine has two), then its name as Hostname.
func (c *Cloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	i, err := c.lookup(ctx, node)
	if err != nil {
		return nil, err
	}
	return metadata(i), nil
}

func metadata(i *fakecloudapi.Instance) *cloudprovider.InstanceMetadata {
	addrs := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: i.PrivateIp}}
	if i.Ipv6Address != nil && *i.Ipv6Address != "" {
		addrs = append(addrs, v1.NodeAddress{Type: v1.NodeInternalIP, Address: *i.Ipv6Address})
	}
	addrs = append(addrs, v1.NodeAddress{Type: v1.NodeHostName, Address: i.Name})
	return &cloudprovider.InstanceMetadata{
		ProviderID:    i.ProviderId,
		InstanceType:  i.InstanceType,
		NodeAddresses: addrs,
		Zone:          i.Zone,
		Region:        i.Region,
	}
}

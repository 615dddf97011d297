// Command fakecloud-upstream-ccm is upstream's cloud-controller-manager (k8s.io/cloud-provider/app) with the
// fakecloud provider registered: the cloud-node, cloud-node-lifecycle, service and route controllers are
// upstream's own, so the e2e suite can compare them with fakecloud-ccm's. Wired as upstream's
// sample/basic_main.go, except that the controllers keep their default client names: their RBAC is the
// one fakecloud-ccm's manifests grant to a single service account.
package main

import (
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json, as upstream's sample
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	"k8s.io/klog/v2"

	"fakecloud.dev/ccm-upstream/provider"
)

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("unable to initialize command options: %v", err)
	}
	command := app.NewCloudControllerManagerCommand(opts, cloudInitializer, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(command))
}

func cloudInitializer(cfg *config.CompletedConfig) cloudprovider.Interface {
	shared := cfg.ComponentConfig.KubeCloudShared.CloudProvider
	if shared.Name != provider.Name {
		klog.Fatalf("--cloud-provider=%q: this binary serves only %q", shared.Name, provider.Name)
	}
	cloud, err := cloudprovider.InitCloudProvider(shared.Name, shared.CloudConfigFile)
	if err != nil {
		klog.Fatalf("cloud provider could not be initialized: %v", err)
	}
	if cloud == nil {
		klog.Fatalf("cloud provider %q is not registered", shared.Name)
	}
	return cloud
}

// Command kubectl is upstream's kubectl at the control plane's version, so `make up` users and tests that
// shell out to kubectl need nothing from outside the package registries, and there is no version skew.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}

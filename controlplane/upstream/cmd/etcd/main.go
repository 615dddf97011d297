// Command etcd is upstream etcd's server main, built at the version Kubernetes itself
// pins (go.etcd.io/etcd/server/v3 in k8s.io/kubernetes' go.mod), because Debian's
// etcd-server (3.4.x) is older than the minimum etcd that Kubernetes 1.37 supports (3.5.24).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

// Command etcd builds etcd's server from its module, for the local control
// plane. It is the version of etcd whose client kube-apiserver is built
// with, so that it shares gRPC, OpenTelemetry and the rest with the other
// tools of this module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

// Command kubectl-ome is the kubectl plugin `kubectl ome`: put it on PATH
// and run `kubectl ome quota tree|status|validate`. See package quotactl.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"ome.io/quota-manager/quotactl"
)

func main() {
	os.Exit(quotactl.Run(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}

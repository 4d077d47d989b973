package kueue

import (
	"context"
	"fmt"
	"os"
	"testing"

	"ome.io/quota-manager/test/localcluster"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, err := localcluster.Start(context.Background(), localcluster.Options{Kueue: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local control plane with Kueue:", err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
		}
	}()
	cluster = c
	return m.Run()
}

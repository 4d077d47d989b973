package integration

import (
	"context"
	"fmt"
	"os"
	"testing"

	"ome.io/quota-manager/api/v1beta1/aqclient"
	"ome.io/quota-manager/test/localcluster"
)

var (
	cluster *localcluster.Cluster
	aqs     *aqclient.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local control plane:", err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
		}
	}()
	cluster = c
	if aqs, err = aqclient.New(c.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

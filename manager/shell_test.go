package manager

import (
	"context"
	"testing"
	"time"

	"ome.io/quota-manager/metrics"
)

// A node another worker holds is put back for later, not worked on twice
// at once; a node done with leaves no trace in the shell, so a tree that
// keeps changing does not grow it.
func TestShellWorksOneNodeAtATime(t *testing.T) {
	m := &Manager{metrics: metrics.New()} // not leading: materialize does nothing
	sh := newShell(m)
	defer sh.urgent.ShutDown()
	defer sh.bulk.ShutDown()
	ctx := context.Background()

	sh.working["held"] = true // the bulk queue's worker has it
	sh.urgent.Add("held")
	name, _ := sh.urgent.Get()
	sh.work(ctx, sh.urgent, name)
	deadline := time.Now().Add(10 * time.Second)
	for sh.urgent.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a busy node was not put back on its queue")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !sh.working["held"] {
		t.Error("the worker that found the node busy released the other worker's hold")
	}

	sh.bulk.Add("team-a")
	name, _ = sh.bulk.Get()
	sh.work(ctx, sh.bulk, name)
	if sh.bulk.Len() != 0 {
		t.Error("a free node was put back")
	}
	if _, ok := sh.working["team-a"]; ok || len(sh.working) != 1 {
		t.Errorf("nodes held after the work: %v, want only the other worker's", sh.working)
	}
}

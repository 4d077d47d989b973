package manager

import (
	"context"
	"slices"
	"testing"

	"ome.io/quota-manager/metrics"
)

// A node another worker holds is not worked on twice at once: an urgent
// change asks a bulk pass holding it to yield, and the node goes back on
// the urgent queue when the hold ends, not before; a node done with leaves
// no trace in the shell, so a tree that keeps changing does not grow it.
func TestShellWorksOneNodeAtATime(t *testing.T) {
	m := &Manager{metrics: metrics.New()} // not leading: materialize does nothing
	sh := newShell(m)
	defer sh.urgent.ShutDown()
	defer sh.bulk.ShutDown()
	ctx := context.Background()

	h := &hold{q: sh.bulk} // the bulk queue's worker has it
	sh.working["held"] = h
	sh.urgent.Add("held")
	name, _ := sh.urgent.Get()
	sh.work(ctx, sh.urgent, name)
	if !h.yield.Load() {
		t.Error("an urgent change did not ask the bulk pass holding its node to yield")
	}
	if sh.urgent.Len() != 0 || !slices.Contains(h.then, sh.urgent) {
		t.Errorf("a held node: %d on the urgent queue, to come back on %v; want 0, and back on urgent when the hold ends", sh.urgent.Len(), h.then)
	}
	if sh.working["held"] != h {
		t.Error("the worker that found the node busy released the other worker's hold")
	}
	sh.release("held")
	if sh.urgent.Len() != 1 {
		t.Errorf("the node released: %d on the urgent queue, want 1", sh.urgent.Len())
	}

	// A bulk worker finding a node an urgent pass holds does not ask it
	// to yield.
	hu := &hold{q: sh.urgent}
	sh.working["urgent"] = hu
	sh.bulk.Add("urgent")
	name, _ = sh.bulk.Get()
	sh.work(ctx, sh.bulk, name)
	if hu.yield.Load() || !slices.Contains(hu.then, sh.bulk) {
		t.Errorf("bulk finding an urgent pass: yield %v, back on %v; want no yield, back on bulk", hu.yield.Load(), hu.then)
	}
	delete(sh.working, "urgent")

	sh.bulk.Add("team-a")
	name, _ = sh.bulk.Get()
	sh.work(ctx, sh.bulk, name)
	if sh.bulk.Len() != 0 {
		t.Error("a free node was put back")
	}
	if len(sh.working) != 0 {
		t.Errorf("nodes held after the work: %v, want none", sh.working)
	}
}

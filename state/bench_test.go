package state

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

const benchFlavors = 4

// benchCluster is a synced state with nodes Nodes spread over four flavors,
// eight GPUs each, and the guide's tree on the first flavor.
func benchCluster(b *testing.B, nodes int) *State {
	b.Helper()
	s := New()
	var evs []events.Event
	for f := range benchFlavors {
		evs = append(evs, events.FlavorUpserted(t0, &events.Flavor{Name: fmt.Sprintf("p%d", f), NodeLabels: map[string]string{"pool": fmt.Sprintf("p%d", f)}}))
	}
	for i := range nodes {
		evs = append(evs, events.NodeUpserted(t0, benchNode(i, false)))
	}
	evs = append(evs, events.Synced(t0))
	evs = append(evs,
		quota("root", spec(v1beta1.RoleCohort)),
		quota("ml-research", spec(v1beta1.RoleCohort, under("root"), budget("nvidia.com/gpu", "p0", "24"))),
		quota("team-alpha", spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "p0", "16"))),
		quota("team-beta", spec(v1beta1.RoleClusterQueue, under("ml-research"), budget("nvidia.com/gpu", "p0", "8"))),
	)
	applyAll(s, evs...)
	return s
}

// Payload maps are shared per flavor, as an event just received is hot in
// the cache whatever the size of the cluster; the state's own data is not.
var (
	benchAmounts = map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8"), "cpu": resource.MustParse("96"), "memory": resource.MustParse("1Ti")}
	benchLabels  = func() []map[string]string {
		out := make([]map[string]string, benchFlavors)
		for f := range out {
			out[f] = map[string]string{"pool": fmt.Sprintf("p%d", f), "topology.kubernetes.io/zone": "zone-a", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
		}
		return out
	}()
)

func benchNode(i int, cordoned bool) *events.Node {
	return &events.Node{
		Name: fmt.Sprintf("node-%05d", i), Labels: benchLabels[i%benchFlavors],
		Capacity: benchAmounts, Allocatable: benchAmounts, Ready: true, Unschedulable: cordoned,
	}
}

// BenchmarkNodeEvent is the cost of one Node event (a node cordoned or
// uncordoned, in turn across the cluster): it must not grow with the number
// of nodes.
func BenchmarkNodeEvent(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s := benchCluster(b, n)
			flip := make([][2]events.Event, n)
			for i := range flip {
				flip[i] = [2]events.Event{events.NodeUpserted(t0, benchNode(i, true)), events.NodeUpserted(t0, benchNode(i, false))}
			}
			seq := s.LastSeq()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ev := flip[i%n][(i/n)%2]
				seq++
				ev.Seq, ev.Time = seq, t0.Add(time.Duration(i)*time.Second)
				s.Apply(ev)
			}
		})
	}
}

// BenchmarkBudgetChange is the cost of one team's budget change in a tree of
// Cohorts with ten teams each, all Ready: it must not grow with the size of
// the tree.
func BenchmarkBudgetChange(b *testing.B) {
	for _, n := range []int{50, 500, 5000} {
		b.Run(fmt.Sprintf("aqs=%d", n), func(b *testing.B) {
			s, teams := benchTree(b, n)
			change := make([][2]events.Event, len(teams))
			for i, team := range teams {
				parent := team[:len("cohort-0000")]
				change[i] = [2]events.Event{
					quota(team, spec(v1beta1.RoleClusterQueue, under(parent), budget("nvidia.com/gpu", "p0", "6"))),
					quota(team, spec(v1beta1.RoleClusterQueue, under(parent), budget("nvidia.com/gpu", "p0", "5"))),
				}
			}
			seq := s.LastSeq()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ev := change[i%len(change)][(i/len(change))%2]
				seq++
				ev.Seq, ev.Time = seq, t0.Add(time.Duration(i)*time.Second)
				s.Apply(ev)
			}
		})
	}
}

// benchTree is benchCluster with Cohorts of ten teams each under root, n
// nodes in all, every one Ready. It returns the teams' names.
func benchTree(b *testing.B, n int) (*State, []string) {
	b.Helper()
	s := benchCluster(b, 32) // 64 GPUs on p0; the guide's four nodes of the tree
	var teams []string
	var evs []events.Event
	for c := 0; len(s.Nodes())+len(evs) < n; c++ {
		cohort := fmt.Sprintf("cohort-%04d", c)
		evs = append(evs, quota(cohort, spec(v1beta1.RoleCohort, under("root"), budget("nvidia.com/gpu", "p0", "60"))))
		for t := 0; t < 10 && len(s.Nodes())+len(evs) < n; t++ {
			team := fmt.Sprintf("%s-team-%d", cohort, t)
			teams = append(teams, team)
			evs = append(evs, quota(team, spec(v1beta1.RoleClusterQueue, under(cohort), budget("nvidia.com/gpu", "p0", "5"))))
		}
	}
	applyAll(s, evs...)
	if got := len(s.Nodes()); got != n {
		b.Fatalf("%d nodes in the tree, want %d", got, n)
	}
	if v := s.Violations(); len(v) != 0 {
		b.Fatalf("the tree breaks rules: %v", v[0])
	}
	return s, teams
}

// BenchmarkAdmit is the cost of judging one team's budget raise and one
// team's move to another Cohort, incrementally (State.Admit) and from
// scratch (Admit): the first must not grow with the size of the tree.
func BenchmarkAdmit(b *testing.B) {
	for _, n := range []int{500, 5000} {
		s, teams := benchTree(b, n)
		raise := func(i int) (string, *v1beta1.AcceleratorQuotaSpec) {
			team := teams[i%len(teams)]
			return team, spec(v1beta1.RoleClusterQueue, under(team[:len("cohort-0000")]), budget("nvidia.com/gpu", "p0", "6"))
		}
		move := func(i int) (string, *v1beta1.AcceleratorQuotaSpec) {
			team := teams[i%len(teams)]
			return team, spec(v1beta1.RoleClusterQueue, under("cohort-0000"), budget("nvidia.com/gpu", "p0", "5"))
		}
		for _, c := range []struct {
			name  string
			write func(int) (string, *v1beta1.AcceleratorQuotaSpec)
		}{{"raise", raise}, {"move", move}} {
			b.Run(fmt.Sprintf("incremental/%s/aqs=%d", c.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if a := s.Admit(c.write(i)); !a.Allowed && c.name == "raise" {
						b.Fatalf("denied: %s", a.Message)
					}
				}
			})
			b.Run(fmt.Sprintf("full/%s/aqs=%d", c.name, n), func(b *testing.B) {
				tree, marks, flavors, cfg := s.Tree(), s.Marks(), s.FlavorNames(), s.Config()
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					name, sp := c.write(i)
					Admit(tree, marks, flavors, cfg, name, sp)
				}
			})
		}
	}
}

// BenchmarkTreeHeap reports the heap a tree of T21k's shape holds in the
// state (51 Cohorts, 1,000 teams: 1,051 nodes), per node: the state
// machines' share of it was 13.7 MiB of 73 MiB when each node had its own.
func BenchmarkTreeHeap(b *testing.B) {
	tree := []events.Event{quota("root", spec(v1beta1.RoleCohort))}
	for c := range 50 {
		cohort := fmt.Sprintf("cohort-%02d", c)
		tree = append(tree, quota(cohort, spec(v1beta1.RoleCohort, under("root"))))
		for t := range 20 {
			tree = append(tree, quota(fmt.Sprintf("team-%02d-%02d", c, t), spec(v1beta1.RoleClusterQueue, under(cohort))))
		}
	}
	var keep *State
	for b.Loop() {
		keep = nil
		before := heapInUse()
		s := New()
		applyAll(s, tree...)
		keep = s
		b.ReportMetric(float64(heapInUse()-before)/float64(len(tree)), "heapB/node")
	}
	if len(keep.Nodes()) != len(tree) {
		b.Fatalf("%d nodes, want %d", len(keep.Nodes()), len(tree))
	}
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"ome.io/quota-manager/api/client/clientset/versioned"
	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// sumWatch samples, every 20 ms until stopped, what the members' copies of
// a team hold of gpu@a100 (their spec's nominal), reading each member's
// API server directly, never through the plane's links. A member that does
// not answer a read counts what it last answered: nothing can change there
// while it does not answer, and a write that lands later is read then.
type sumWatch struct {
	team    string
	members map[string]typed.AcceleratorQuotaInterface
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	last    map[string]resource.Quantity
	most    resource.Quantity
	mostAt  string
	samples int
}

func watchSum(t *testing.T, team string, members map[string]typed.AcceleratorQuotaInterface) *sumWatch {
	w := &sumWatch{team: team, members: members, stop: make(chan struct{}), done: make(chan struct{}), last: map[string]resource.Quantity{}}
	go func() {
		defer close(w.done)
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *sumWatch) sample() {
	for name, c := range w.members {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		aq, err := c.Get(ctx, w.team, metav1.GetOptions{})
		cancel()
		switch {
		case err == nil:
			var q resource.Quantity
			for _, b := range aq.Spec.Budgets {
				if b.ResourceName == gpu && b.ResourceFlavor == "a100" {
					q = b.Nominal
				}
			}
			w.mu.Lock()
			w.last[name] = q
			w.mu.Unlock()
		case strings.Contains(err.Error(), "not found"):
			w.mu.Lock()
			w.last[name] = resource.Quantity{}
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum resource.Quantity
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(w.last)) {
		q := w.last[name]
		sum.Add(q)
		parts = append(parts, name+"="+q.String())
	}
	w.samples++
	if sum.Cmp(w.most) > 0 {
		w.most, w.mostAt = sum, strings.Join(parts, " ")
	}
}

func (w *sumWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// atMost stops the sampling and fails the test if the members' copies ever
// held more than budget together.
func (w *sumWatch) atMost(t *testing.T, budget string) {
	t.Helper()
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples < 10 {
		t.Fatalf("only %d samples of %s's copies were taken: the watch did not run", w.samples, w.team)
	}
	if w.most.Cmp(resource.MustParse(budget)) > 0 {
		t.Fatalf("the members' copies of %s held %s together (%s), above its budget of %s", w.team, w.most.String(), w.mostAt, budget)
	}
	t.Logf("%d samples of %s's copies: at most %s together, its budget %s", w.samples, w.team, w.most.String(), budget)
}

// fleetRig is a plane (two replicas, with leader election) on a hub of its
// own, and two members, east and west, each its own control plane with a
// workload manager and GPU Nodes; the plane reaches west through a link
// the test cuts and restores, and a third member, ghost, through an
// address where nothing answers.
type fleetRig struct {
	hub, east, west  *localcluster.Cluster
	hubAQs           typed.AcceleratorQuotaInterface
	eastAQs, westAQs typed.AcceleratorQuotaInterface
	westLink         *link
	planes           map[string]*localcluster.Manager
	planeArgs        []string
	planeLog         string
}

func newFleetRig(t *testing.T, grace string) *fleetRig {
	ctx := context.Background()
	r := &fleetRig{planes: map[string]*localcluster.Manager{}}
	cluster := func(nodes ...int) (*localcluster.Cluster, typed.AcceleratorQuotaInterface) {
		c := startCluster(t)
		for i, n := range nodes {
			if _, err := localcluster.ApplyNode(ctx, c.Kube, localcluster.GPUNode(fmt.Sprintf("gpu-%d", i), n)); err != nil {
				t.Fatal(err)
			}
		}
		testutil.A100Flavor(t, c)
		testutil.StartManager(t, c, member.ManagerBin, "workload", "--webhook=false", "--leader-elect=false")
		return c, versioned.NewForConfigOrDie(c.Config).OmeV1beta1().AcceleratorQuotas()
	}
	r.east, r.eastAQs = cluster(8, 8)
	r.west, r.westAQs = cluster(8)
	kubeconfig := func(c *localcluster.Cluster) string {
		remoteAccess(t, c)
		path := filepath.Join(t.TempDir(), "plane.kubeconfig")
		if err := c.WriteServiceAccountKubeconfig(ctx, "ome-system", remoteAccessName, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	u, err := url.Parse(r.west.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	r.westLink = newLink(t, u.Host)
	// ghost: a member whose API server never answers (a port nothing
	// listens on), as a ClusterProfile whose access does not work yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	eastKubeconfig := kubeconfig(r.east)
	ghost := (&link{addr: dead}).kubeconfig(t, eastKubeconfig)
	r.hub = startCluster(t)
	r.hubAQs = versioned.NewForConfigOrDie(r.hub.Config).OmeV1beta1().AcceleratorQuotas()
	r.planeLog = filepath.Join(t.TempDir(), "events")
	inventory := memberSecrets(t, r.hub, "fleet-plane", map[string]string{"east": eastKubeconfig,
		"west": r.westLink.kubeconfig(t, kubeconfig(r.west)), "ghost": ghost})
	r.planeArgs = append(inventory, "--mode=management", "--webhook=false", "--origin=fleet", "--member-grace="+grace,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms")
	for _, name := range []string{"plane-a", "plane-b"} {
		r.planes[name] = testutil.StartManager(t, r.hub, member.ManagerBin, name, append(r.planeArgs, "--event-log="+filepath.Join(r.planeLog, name))...)
	}
	return r
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

// leader is the plane replica that leads, once one does.
func (r *fleetRig) leader(t *testing.T) string {
	t.Helper()
	var who string
	testutil.Eventually(t, 60*time.Second, func() string {
		for name, pm := range r.planes {
			if v, err := pm.Metric(context.Background(), "ome_quota_leader"); err == nil && v == 1 {
				who = name
				return ""
			}
		}
		return "no plane replica leads"
	})
	return who
}

// copyOf is what member c's copy of team holds of gpu@a100, "-" when it
// holds none.
func copyOf(t *testing.T, c typed.AcceleratorQuotaInterface, team string) string {
	t.Helper()
	aq, err := c.Get(context.Background(), team, metav1.GetOptions{})
	if err != nil {
		return "-"
	}
	for _, b := range aq.Spec.Budgets {
		if b.ResourceName == gpu {
			return b.Nominal.String()
		}
	}
	return "0"
}

// holds waits until east's and west's copies of team hold want (as
// "east/west").
func (r *fleetRig) holds(t *testing.T, team, want string) {
	t.Helper()
	testutil.Eventually(t, 90*time.Second, func() string {
		if got := copyOf(t, r.eastAQs, team) + "/" + copyOf(t, r.westAQs, team); got != want {
			return fmt.Sprintf("east/west hold %s of %s, want %s", got, team, want)
		}
		return ""
	})
}

// waiting waits until the plane's team says that member's raise waits,
// with a message holding want.
func (r *fleetRig) waiting(t *testing.T, team, member, want string) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, func() string {
		aq, err := r.hubAQs.Get(context.Background(), team, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, c := range aq.Status.Clusters {
			if c.Cluster == member && strings.Contains(c.Waiting, want) && c.WaitingSince != nil {
				return ""
			}
		}
		return fmt.Sprintf("the plane's %s does not say %s's raise waits for %q: %+v", team, member, want, aq.Status.Clusters)
	})
}

func (r *fleetRig) explicit(t *testing.T, team, total, east, west string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":%q,"resourceFlavor":"a100","nominal":%q,"borrowingLimit":"0","policy":"Explicit","perCluster":[{"cluster":"east","nominal":%q},{"cluster":"west","nominal":%q}]}]}}`,
		gpu, total, east, west)
	if _, err := r.hubAQs.Patch(context.Background(), team, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestFleetKeepsItsBudget runs the fleet's promise on real control planes:
// a move of an Explicit budget while west is cut off, and again with the
// plane's leader killed (SIGKILL) in the middle of it; a Proportional
// re-split while west is cut off; and a member that never reports,
// holding the Proportional splits only until its grace ends. Throughout,
// the members' copies are sampled: together they never hold more than the
// budget.
func TestFleetKeepsItsBudget(t *testing.T) {
	r := newFleetRig(t, "20s")
	members := map[string]typed.AcceleratorQuotaInterface{"east": r.eastAQs, "west": r.westAQs}
	for _, aq := range []*v1beta1.AcceleratorQuota{
		aqtest.Cohort("fleet-c", "root").Obj(),
		aqtest.Team("fleet-a", "fleet-c").Budget(gpu, "a100", "9").Share("east", "5").Share("west", "4").Obj(),
		aqtest.Team("fleet-p", "fleet-c").Budget(gpu, "a100", "6").Obj(),
	} {
		createWhenRootIs(t, r.hubAQs, aq)
	}
	r.holds(t, "fleet-a", "5/4")
	leader := r.leader(t)

	t.Run("a member that never reports holds the Proportional splits for its grace only", func(t *testing.T) {
		// fleet-p is split by the members' marks, and ghost has none yet:
		// held, saying why, until the grace (20 s from the plane's start)
		// ends; then split over east and west (16 and 8).
		aq, err := r.hubAQs.Get(context.Background(), "fleet-p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := findCondition(aq.Status.Conditions, v1beta1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
			t.Logf("fleet-p was Ready before this check: the grace had ended already (%s)", c.Message)
		} else {
			testutil.Eventually(t, 30*time.Second, func() string {
				aq, err := r.hubAQs.Get(context.Background(), "fleet-p", metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				c := findCondition(aq.Status.Conditions, v1beta1.ConditionReady)
				if c == nil || c.Reason != "SplitInvalid" || !strings.Contains(c.Message, "member cluster ghost has not reported") {
					return fmt.Sprintf("fleet-p within ghost's grace: Ready %+v, want SplitInvalid naming ghost", c)
				}
				return ""
			})
		}
		r.holds(t, "fleet-p", "4/2")
		if got := copyOf(t, r.eastAQs, "fleet-p") + "/" + copyOf(t, r.westAQs, "fleet-p"); got != "4/2" {
			t.Fatalf("fleet-p after ghost's grace: %s", got)
		}
	})

	t.Run("move while west is cut off", func(t *testing.T) {
		w := watchSum(t, "fleet-a", members)
		r.westLink.cut()
		r.explicit(t, "fleet-a", "9", "6", "3")
		r.waiting(t, "fleet-a", "east", "west to release 1")
		if got := copyOf(t, r.eastAQs, "fleet-a"); got != "5" {
			t.Fatalf("with west cut off, east holds %s of fleet-a, want 5", got)
		}
		r.westLink.restore(t)
		r.holds(t, "fleet-a", "6/3")
		w.atMost(t, "9")
	})

	t.Run("move with the leader killed in its middle", func(t *testing.T) {
		r.explicit(t, "fleet-a", "9", "5", "4")
		r.holds(t, "fleet-a", "5/4")
		w := watchSum(t, "fleet-a", members)
		r.westLink.cut()
		r.explicit(t, "fleet-a", "9", "6", "3")
		r.waiting(t, "fleet-a", "east", "west to release 1")
		r.planes[leader].Kill()
		delete(r.planes, leader)
		next := r.leader(t)
		t.Logf("%s was killed; %s leads", leader, next)
		// The new leader's own statuses say what waits, on its record.
		r.waiting(t, "fleet-a", "east", "west")
		if got := copyOf(t, r.eastAQs, "fleet-a"); got != "5" {
			t.Fatalf("after the leader changed, with west cut off, east holds %s of fleet-a, want 5", got)
		}
		r.westLink.restore(t)
		r.holds(t, "fleet-a", "6/3")
		w.atMost(t, "9")
		leader = next
	})

	t.Run("a Proportional re-split while west is cut off", func(t *testing.T) {
		r.holds(t, "fleet-p", "4/2") // marks 16 and 8
		w := watchSum(t, "fleet-p", members)
		r.westLink.cut()
		// East grows to 24: the split becomes 4.5/1.5, whole GPUs 5/1.
		if _, err := localcluster.ApplyNode(context.Background(), r.east.Kube, localcluster.GPUNode("gpu-2", 8)); err != nil {
			t.Fatal(err)
		}
		r.waiting(t, "fleet-p", "east", "west to release 1")
		if got := copyOf(t, r.eastAQs, "fleet-p"); got != "4" {
			t.Fatalf("re-split with west cut off: east holds %s of fleet-p, want 4", got)
		}
		r.westLink.restore(t)
		r.holds(t, "fleet-p", "5/1")
		w.atMost(t, "6")
	})

	t.Run("plan names what moves on each member as the plane then writes it", func(t *testing.T) {
		change := filepath.Join(t.TempDir(), "fleet-a.yaml")
		body := fmt.Sprintf("apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: fleet-a\nspec:\n  role: ClusterQueue\n  parentRef:\n    name: fleet-c\n"+
			"  budgets:\n  - resourceName: %s\n    resourceFlavor: a100\n    nominal: \"9\"\n    borrowingLimit: \"0\"\n    policy: Explicit\n"+
			"    perCluster:\n    - cluster: east\n      nominal: \"4\"\n    - cluster: west\n      nominal: \"5\"\n", gpu)
		if err := os.WriteFile(change, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := quotactl.Run([]string{"quota", "plan", "-f", change, "-o", "json", "--kubeconfig", r.hub.Kubeconfig},
			genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
		if code != 0 {
			t.Fatalf("kubectl ome quota plan exited %d: %s%s", code, errOut.String(), out.String())
		}
		var rep quotactl.PlanReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("plan's report: %v\n%s", err, out.String())
		}
		planned := map[string]string{}
		for _, m := range rep.Impact.Members {
			for _, sc := range m.Shares {
				if sc.Team == "fleet-a" {
					planned[m.Cluster] = sc.Share.Old + "->" + sc.Share.New
				}
			}
		}
		if want := map[string]string{"east": "6->4", "west": "3->5"}; !maps.Equal(planned, want) {
			t.Fatalf("plan says fleet-a's shares move %v, want %v\n%s", planned, want, out.String())
		}
		r.explicit(t, "fleet-a", "9", "4", "5")
		r.holds(t, "fleet-a", strings.TrimPrefix(planned["east"], "6->")+"/"+strings.TrimPrefix(planned["west"], "3->"))
	})
}

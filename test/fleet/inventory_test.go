package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclient "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// TestFleetFromClusterProfiles runs docs/install.md's walk-through with
// ClusterProfiles and the secret-reader plugin, on four control planes of
// their own: the plane, installed by the chart (its webhook on, two
// replicas), and members east (with Kueue), west and south, each with its
// workload manager installed by the chart with remoteAccess. It shows the
// shares projected and materialized; an Explicit split naming a cluster
// outside the fleet refused at admission; a third profile joining, the
// Proportional split held until it reports and then made over three; a
// member's tokens revoked and rotated, and the plane writing to it again
// within a report interval without a restart; the plane's leader killed
// with SIGKILL in the middle of a projection, the other replica finishing
// it with nothing left stale; a profile deleted, its copies deleted from
// that member and the others' left alone; and the plane's log naming the
// membership change behind a share.
func TestFleetFromClusterProfiles(t *testing.T) {
	ctx := context.Background()
	planeCluster := startCluster(t)
	east := startClusterWith(t, localcluster.Options{Kueue: true})
	west, south := startCluster(t), startCluster(t)
	members := map[string]*localcluster.Cluster{"east": east, "west": west, "south": south}
	for name, c := range members {
		gpus := map[string]int{"east": 2, "west": 1, "south": 1}[name]
		for i := range gpus {
			if _, err := localcluster.ApplyNode(ctx, c.Kube, localcluster.GPUNode(fmt.Sprintf("%s-gpu-%d", name, i), 8)); err != nil {
				t.Fatal(err)
			}
		}
		// The cluster goes with the test: nothing to clean up.
		if _, err := c.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.EnsureNamespace(ctx, "ml-serving"); err != nil {
			t.Fatal(err)
		}
	}
	plugin, err := localcluster.BuildSecretReader(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := newDocRun(t, "clusterprofiles", map[string]*localcluster.Cluster{"plane": planeCluster, "east": east, "west": west, "south": south})

	d.run("setup", "")
	for _, name := range []string{"east", "west"} {
		d.run("member", name)
		runRelease(t, members[name], name, 1, nil)
	}
	d.run("plane", "")
	plane := runRelease(t, planeCluster, "plane", 2, map[string]string{"/secretreader-plugin": plugin})
	testutil.Eventually(t, time.Minute, func() string {
		if out := d.run("check", ""); !strings.Contains(out, "nvidia.com/gpu@a100: east=16 west=8") {
			return "the plane's root: " + out
		}
		return ""
	})

	// The fleet tree, through the plane's webhook: a Cohort of 20, fleet-e
	// split Explicit (east 6, west 2) and fleet-p Proportional (8 by the
	// marks 16 and 8: east 5, west 3).
	apply := func(yaml string) (string, error) {
		stdout, stderr, err := planeCluster.KubectlInput(ctx, yaml, "apply", "-f", "-")
		return stdout + stderr, err
	}
	if out, err := apply(fleetTreeWith("6", "2")); err != nil {
		t.Fatalf("the fleet tree: %v\n%s", err, out)
	}
	eastAQs, westAQs, southAQs := aqsOf(east), aqsOf(west), aqsOf(south)
	holds := func(c typed.AcceleratorQuotaInterface, within time.Duration, want ...string) {
		t.Helper()
		testutil.Eventually(t, within, func() string {
			if got := quotaLines(t, c, "fleet-"); !slices.Equal(got, want) {
				return fmt.Sprintf("the member holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			return ""
		})
	}
	const origin = "ome-quota-manager"
	holds(eastAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=6] origin="+origin, "fleet-p<-fleet-c [a100=5] origin="+origin)
	holds(westAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=2] origin="+origin, "fleet-p<-fleet-c [a100=3] origin="+origin)
	cq := func(c *localcluster.Cluster, team, want string) {
		t.Helper()
		testutil.Eventually(t, time.Minute, func() string {
			if got := cqNominal(c, team); got != want {
				return fmt.Sprintf("ClusterQueue %s holds %s, want %s", team, got, want)
			}
			return ""
		})
	}
	cq(east, "fleet-e", "6")
	cq(east, "fleet-p", "5")
	cq(west, "fleet-e", "2")

	// One budget change on the plane, until every member's ClusterQueue
	// carries its new share.
	planeAQs := aqsOf(planeCluster)
	patch := `{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"9","policy":"Explicit","perCluster":[{"cluster":"east","nominal":"7"},{"cluster":"west","nominal":"2"}]}]}}`
	changed := time.Now()
	if _, err := planeAQs.Patch(ctx, "fleet-e", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("raising fleet-e: %v", err)
	}
	testutil.Eventually(t, time.Minute, func() string {
		if e, w := cqNominal(east, "fleet-e"), cqNominal(west, "fleet-e"); e != "7" || w != "2" {
			return fmt.Sprintf("fleet-e's ClusterQueues hold %s on east and %s on west, want 7 and 2", e, w)
		}
		return ""
	})
	t.Logf("a budget change on the plane reached every member's ClusterQueue in %s", time.Since(changed).Round(time.Millisecond))

	// A split naming a cluster outside the fleet is refused at admission.
	if out, err := apply(explicitTeam("fleet-x", "fleet-c", "north", "1")); err == nil ||
		!strings.Contains(out, `admission webhook "acceleratorquota.ome-quota-manager.validator" denied the request: fleet-x: budget nvidia.com/gpu on a100: perCluster names north, which is not a member cluster of the fleet (2 members): name a member, or add north to the plane's inventory (a ClusterProfile it selects, or an entry of projection.clusters)`) {
		t.Fatalf("a split naming north: %v\n%s", err, out)
	}

	// south joins: its profile first, its manager later. Until south has
	// reported, fleet-p's split is held, its copies as they were.
	d.run("member", "south")
	condition := func(node, want string) {
		t.Helper()
		testutil.Eventually(t, time.Minute, func() string {
			aq, err := planeAQs.Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			c := apimeta.FindStatusCondition(aq.Status.Conditions, v1beta1.ConditionReady)
			if c == nil || !strings.HasPrefix(string(c.Status)+" "+c.Reason+": "+c.Message, want) {
				return fmt.Sprintf("the plane's %s is Ready %+v, want %q", node, c, want)
			}
			return ""
		})
	}
	condition("fleet-p", "False SplitInvalid: budget nvidia.com/gpu on a100: member cluster south has not reported its capacity yet")
	holds(westAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=2] origin="+origin, "fleet-p<-fleet-c [a100=3] origin="+origin)
	runRelease(t, south, "south", 1, nil)
	condition("fleet-p", "True Admitted")
	holds(eastAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=7] origin="+origin, "fleet-p<-fleet-c [a100=4] origin="+origin)
	holds(westAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=2] origin="+origin, "fleet-p<-fleet-c [a100=2] origin="+origin)
	holds(southAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-p<-fleet-c [a100=2] origin="+origin)

	// west's tokens revoked, a new one written: the plane writes to west
	// again within a report interval (a minute), neither replica restarted.
	d.run("revoke", "west")
	d.run("rotate", "west")
	if out, err := apply(fleetTreeWith("7", "4")); err != nil {
		t.Fatalf("raising fleet-e for west: %v\n%s", err, out)
	}
	holds(westAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=4] origin="+origin, "fleet-p<-fleet-c [a100=2] origin="+origin)
	for name, m := range plane.replicas {
		select {
		case <-m.Done():
			t.Fatalf("plane replica %s exited: %s", name, m.Tail(20))
		default:
		}
	}

	// The plane's leader killed in the middle of a projection: 100 teams
	// split Explicit to east and south, created at once. The other
	// replica takes the Lease and finishes; every member ends with
	// exactly the copies of the plane's current generations.
	var burst strings.Builder
	burst.WriteString("apiVersion: ome.io/v1beta1\nkind: AcceleratorQuota\nmetadata:\n  name: burst\nspec:\n  role: Cohort\n  parentRef:\n    name: root\n")
	const teams = 100
	for i := range teams {
		burst.WriteString("---\n" + explicitTeam(fmt.Sprintf("burst-%03d", i), "burst", "east", "1", "south", "1"))
	}
	if out, err := apply(burst.String()); err != nil {
		t.Fatalf("the burst: %v\n%s", err, out)
	}
	leader := plane.leader(t, "")
	var atKill int
	testutil.Eventually(t, time.Minute, func() string {
		atKill = len(quotaLines(t, eastAQs, "burst-"))
		if atKill == 0 {
			return "no burst copy on east yet"
		}
		return ""
	})
	plane.replicas[leader].Kill()
	t.Logf("killed the plane's leader %s with %d of %d burst copies on east", leader, atKill, teams)
	if atKill == teams {
		t.Errorf("the burst was projected before the kill (%d copies on east): nothing was left for the other replica to finish", atKill)
	}
	t.Logf("%s took the lead", plane.leader(t, leader))
	for _, c := range []typed.AcceleratorQuotaInterface{eastAQs, southAQs} {
		testutil.Eventually(t, 2*time.Minute, func() string {
			return stale(t, planeAQs, c, "burst", teams+1)
		})
	}
	if got := quotaLines(t, westAQs, "burst"); len(got) != 0 {
		t.Errorf("west, which has no share, holds burst copies: %v", got)
	}
	testutil.Eventually(t, time.Minute, func() string {
		n := 0
		list, err := east.Kueue.KueueV1beta2().ClusterQueues().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, q := range list.Items {
			if strings.HasPrefix(q.Name, "burst-") {
				n++
			}
		}
		if n != teams {
			return fmt.Sprintf("east holds %d burst ClusterQueues, want %d", n, teams)
		}
		return ""
	})

	// west's profile deleted: its copies go; east's and south's burst
	// copies stay exactly as they were, once the plane has written their
	// new fleet-p shares (east 5, south 3: proof that it passed over them).
	before := versions(t, eastAQs, "burst")
	d.run("remove", "")
	holds(westAQs, time.Second)
	holds(eastAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=7] origin="+origin, "fleet-p<-fleet-c [a100=5] origin="+origin)
	holds(southAQs, time.Minute, "fleet-c<-root [] origin="+origin, "fleet-p<-fleet-c [a100=3] origin="+origin)
	if after := versions(t, eastAQs, "burst"); !slices.Equal(before, after) {
		t.Errorf("east's burst copies were written while west left")
	}
	// fleet-e still names west: the node is held, on every member.
	condition("fleet-e", "False SplitInvalid: budget nvidia.com/gpu on a100: perCluster names west, which is not a member cluster")

	// The plane's log names the change of the fleet behind fleet-p's shares.
	leader = plane.leader(t, leader)
	why, err := exec.Command(member.ManagerBin, "replay", plane.eventLog(t, leader), "--why", "fleet-p").CombinedOutput()
	if err != nil {
		t.Fatalf("replay --why fleet-p: %v\n%s", err, why)
	}
	for _, want := range []string{"fleet-p's budget nvidia.com/gpu@a100 is split Proportional among the member clusters: east=5, south=3",
		"<- the fleet is east, south since #", "member cluster west left the fleet: its ClusterProfile ome/west was deleted"} {
		if !strings.Contains(string(why), want) {
			t.Errorf("replay --why fleet-p on the plane's log does not say %q:\n%s", want, why)
		}
	}
}

// fleetTreeWith is the fleet tree of TestFleetFromClusterProfiles: a
// Cohort of 20 A100 GPUs, fleet-e split Explicit (east and west as given)
// and fleet-p Proportional (8 by the members' marks).
func fleetTreeWith(east, west string) string {
	return `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: fleet-c
spec:
  role: Cohort
  parentRef:
    name: root
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "20"
---
` + explicitTeam("fleet-e", "fleet-c", "east", east, "west", west) + `---
apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: fleet-p
spec:
  role: ClusterQueue
  parentRef:
    name: fleet-c
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "8"
      policy: Proportional
`
}

// explicitTeam is a team under parent whose budget of A100 GPUs is split
// Explicit: cluster, share, cluster, share, ...
func explicitTeam(name, parent string, shares ...string) string {
	total := 0
	var per strings.Builder
	for i := 0; i < len(shares); i += 2 {
		n, err := strconv.Atoi(shares[i+1])
		if err != nil {
			panic(err) // the tests' own literals
		}
		total += n
		fmt.Fprintf(&per, "        - cluster: %s\n          nominal: %q\n", shares[i], shares[i+1])
	}
	return fmt.Sprintf(`apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: %s
spec:
  role: ClusterQueue
  parentRef:
    name: %s
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "%d"
      policy: Explicit
      perCluster:
%s
`, name, parent, total, per.String())
}

func aqsOf(c *localcluster.Cluster) typed.AcceleratorQuotaInterface {
	return versioned.NewForConfigOrDie(c.Config).OmeV1beta1().AcceleratorQuotas()
}

// startClusterWith starts another control plane with opts for one test.
func startClusterWith(t *testing.T, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	c, err := localcluster.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping a control plane: %v", err)
		}
	})
	return c
}

// stale says what of the member's copies named prefix* is missing, extra
// or not at the plane's generation of its node; "" when it holds want
// copies, each made from its node's current generation.
func stale(t *testing.T, plane, c typed.AcceleratorQuotaInterface, prefix string, want int) string {
	t.Helper()
	ctx := context.Background()
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	n := 0
	for _, aq := range list.Items {
		if !strings.HasPrefix(aq.Name, prefix) {
			continue
		}
		n++
		node, err := plane.Get(ctx, aq.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Sprintf("the member holds %s, which the plane does not: %v", aq.Name, err)
		}
		if got := aq.Annotations[v1beta1.SourceGenerationAnnotation]; got != fmt.Sprint(node.Generation) {
			return fmt.Sprintf("the member's %s was made from generation %s of %d", aq.Name, got, node.Generation)
		}
		// A copy is made with zero budgets and raised to its share once
		// read back: it is in place when it holds the share.
		for _, b := range node.Spec.Budgets {
			for _, sh := range b.PerCluster {
				if sh.Cluster != aq.Annotations[v1beta1.ClusterAnnotation] {
					continue
				}
				held := "none"
				for _, cb := range aq.Spec.Budgets {
					if cb.ResourceName == b.ResourceName && cb.ResourceFlavor == b.ResourceFlavor {
						held = cb.Nominal.String()
					}
				}
				if held != sh.Nominal.String() {
					return fmt.Sprintf("the member's %s holds %s of %s, its share is %s", aq.Name, held, b.ResourceName, sh.Nominal.String())
				}
			}
		}
	}
	if n != want {
		return fmt.Sprintf("the member holds %d copies named %s*, want %d", n, prefix, want)
	}
	return ""
}

// versions are, for the cluster's AcceleratorQuotas named prefix*, by
// name, what a write by the plane would change: the spec's generation,
// the labels and the annotations. The status, which the member's own
// manager writes (and may still be writing after an earlier step), is
// left out, so resourceVersions are not compared.
func versions(t *testing.T, c typed.AcceleratorQuotaInterface, prefix string) []string {
	t.Helper()
	list, err := c.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, aq := range list.Items {
		if strings.HasPrefix(aq.Name, prefix) {
			out = append(out, fmt.Sprintf("%s@%d%v%v", aq.Name, aq.Generation, aq.Labels, aq.Annotations))
		}
	}
	slices.Sort(out)
	return out
}

// TestFleetFromKubeconfigSecrets runs docs/install.md's walk-through with
// kubeconfig Secrets on three control planes of their own: the plane,
// installed by the chart, and members east and west, each with its
// workload manager installed by the chart with remoteAccess. The shares
// reach both members; east's tokens revoked and a new kubeconfig written,
// the plane writes to east again at once, without a restart; west dropped
// from the values by a helm upgrade, the plane (its pods as they were)
// deletes west's copies and leaves east's alone.
func TestFleetFromKubeconfigSecrets(t *testing.T) {
	ctx := context.Background()
	planeCluster, east, west := startCluster(t), startCluster(t), startCluster(t)
	for name, c := range map[string]*localcluster.Cluster{"east": east, "west": west} {
		// east alone keeps the Cohort's 20 within the fleet's capacity
		// once west has left.
		for i := range map[string]int{"east": 3, "west": 2}[name] {
			if _, err := localcluster.ApplyNode(ctx, c.Kube, localcluster.GPUNode(fmt.Sprintf("%s-gpu-%d", name, i), 8)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.EnsureNamespace(ctx, "ml-serving"); err != nil {
			t.Fatal(err)
		}
	}
	d := newDocRun(t, "secrets", map[string]*localcluster.Cluster{"plane": planeCluster, "east": east, "west": west})
	d.run("setup", "")
	members := map[string]*release{}
	for name, c := range map[string]*localcluster.Cluster{"east": east, "west": west} {
		d.run("member", name)
		members[name] = runRelease(t, c, name, 1, nil)
	}
	d.run("plane", "")
	plane := runRelease(t, planeCluster, "plane", 2, nil)
	testutil.Eventually(t, time.Minute, func() string {
		if out := d.run("check", ""); !strings.Contains(out, "nvidia.com/gpu@a100: east=24 west=16") {
			return "the plane's root: " + out
		}
		return ""
	})
	apply := func(yaml string) {
		t.Helper()
		if stdout, stderr, err := planeCluster.KubectlInput(ctx, yaml, "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply on the plane: %v\n%s%s", err, stdout, stderr)
		}
	}
	apply(fleetTreeWith("3", "2"))
	eastAQs, westAQs := aqsOf(east), aqsOf(west)
	holds := func(c typed.AcceleratorQuotaInterface, want ...string) {
		t.Helper()
		testutil.Eventually(t, time.Minute, func() string {
			if got := quotaLines(t, c, "fleet-"); !slices.Equal(got, want) {
				return fmt.Sprintf("the member holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			return ""
		})
	}
	const origin = "ome-quota-manager"
	holds(eastAQs, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=3] origin="+origin, "fleet-p<-fleet-c [a100=5] origin="+origin)
	holds(westAQs, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=2] origin="+origin, "fleet-p<-fleet-c [a100=3] origin="+origin)

	d.run("revoke", "east")
	d.run("rotate", "east")
	apply(fleetTreeWith("5", "2"))
	holds(eastAQs, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=5] origin="+origin, "fleet-p<-fleet-c [a100=5] origin="+origin)

	generation := func() int64 {
		dep, err := planeCluster.Kube.AppsV1().Deployments("ome").Get(ctx, "ome-quota-manager", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return dep.Generation
	}
	before, beforeEast := generation(), versions(t, eastAQs, "fleet-")
	plane.upgrade(t, func() { d.run("remove", "") })
	holds(westAQs)
	if after := generation(); after != before {
		t.Errorf("the upgrade that dropped west changed the plane's Deployment (generation %d to %d): its pods would restart", before, after)
	}
	// east's copies stay: fleet-e, which names west, is held, and fleet-p
	// is 8 of east's 8 once the plane has passed over east.
	holds(eastAQs, "fleet-c<-root [] origin="+origin, "fleet-e<-fleet-c [a100=5] origin="+origin, "fleet-p<-fleet-c [a100=8] origin="+origin)
	for _, v := range versions(t, eastAQs, "fleet-") {
		if strings.HasPrefix(v, "fleet-e@") && !slices.Contains(beforeEast, v) {
			t.Errorf("east's fleet-e was written while west left: %s (before: %v)", v, beforeEast)
		}
	}
	for name, m := range plane.replicas {
		select {
		case <-m.Done():
			t.Errorf("plane replica %s exited: %s", name, m.Tail(20))
		default:
		}
	}

	// The plane gone for good (its replicas stopped): east's admin cannot
	// delete a copy, but releases the plane's copies with the plugin, and
	// east's log says who did.
	for _, m := range plane.replicas {
		m.Stop()
	}
	_, stderr, err := east.KubectlOutput(ctx, "delete", "aq", "fleet-p")
	if err == nil || !strings.Contains(stderr, "only the plane changes it") || !strings.Contains(stderr, "kubectl ome quota release --origin "+origin) {
		t.Fatalf("a plain delete of east's copy fleet-p: %v, want refused with the way to release:\n%s", err, stderr)
	}
	out := d.run("release", "east")
	for _, want := range []string{"acceleratorquota.ome.io/fleet-p released (dry run)", "acceleratorquota.ome.io/fleet-c released\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the release block printed no %q:\n%s", want, out)
		}
	}
	holds(eastAQs)
	testutil.Eventually(t, time.Minute, func() string {
		cqs, err := east.Kueue.KueueV1beta2().ClusterQueues().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, cq := range cqs.Items {
			if strings.HasPrefix(cq.Name, "fleet-") {
				return "east's manager keeps ClusterQueue " + cq.Name
			}
		}
		return ""
	})
	eastManager := members["east"]
	for _, m := range eastManager.replicas {
		m.Stop()
	}
	history, err := exec.Command(member.ManagerBin, "replay", eastManager.eventLog(t, "east-0"), "--node", "fleet-p", "--history").CombinedOutput()
	if err != nil {
		t.Fatalf("replay --history on east's log: %v\n%s", err, history)
	}
	if !regexp.MustCompile(`admin\s+DELETE admitted by east-0, landed as #\d+ \[deleted\]`).Match(history) {
		t.Errorf("east's log does not name admin as the author of fleet-p's release:\n%s", history)
	}
}

// TestPlaneAccessReasons runs a plane on a control plane of its own whose
// members are three ClusterProfiles: east publishes only an access
// provider the plane's credential providers file does not name; west's
// provider runs a plugin that fails, saying why on its standard error;
// west-again, created after west, reaches west's server. The plane's fleet
// node lists east and west, each unreachable for its own reason, with the
// plugin's own words for west, as docs/install.md's command prints them;
// west-again is no member, and the plane's log says why. No member cluster is needed: nothing is reached.
func TestPlaneAccessReasons(t *testing.T) {
	ctx := context.Background()
	hub := startCluster(t)
	installProfileCRD(t, hub)
	if err := hub.EnsureNamespace(ctx, "ome"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugin := filepath.Join(dir, "secretreader-plugin")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho 'secrets \"west\" is forbidden: cannot get resource \"secrets\" in the namespace \"ome\"' >&2\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	providers := filepath.Join(dir, "providers.json")
	if err := os.WriteFile(providers, []byte(`{"providers":[{"name":"secretreader","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"`+plugin+`","provideClusterInfo":true}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles := cpclient.NewForConfigOrDie(hub.Config).ApisV1alpha1().ClusterProfiles("ome")
	publish := func(name, provider, server string) {
		t.Helper()
		cp, err := profiles.Create(ctx, &cpv1alpha1.ClusterProfile{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fleet": "gpu"}},
			Spec:       cpv1alpha1.ClusterProfileSpec{DisplayName: name, ClusterManager: cpv1alpha1.ClusterManager{Name: "test"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ap := cpv1alpha1.AccessProvider{Name: provider}
		ap.Cluster.Server = server
		ap.Cluster.Extensions = []clientcmdv1.NamedExtension{{Name: "client.authentication.k8s.io/exec",
			Extension: runtime.RawExtension{Raw: []byte(`{"clusterName":"` + name + `"}`)}}}
		cp.Status.AccessProviders = []cpv1alpha1.AccessProvider{ap}
		if _, err := profiles.UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	publish("east", "open-cluster-management", "https://east.example.com:6443")
	publish("west", "secretreader", "https://west.example.com:6443")
	publish("west-again", "secretreader", "https://WEST.example.com:6443/")

	pm := testutil.StartManager(t, hub, member.ManagerBin, "plane", "--mode=management", "--webhook=false", "--origin=fleet",
		"--members-from=clusterprofiles", "--clusterprofile-namespace=ome", "--clusterprofile-selector=fleet=gpu", "--clusterprofile-provider-file="+providers)
	hubAQs := aqsOf(hub)
	createWhenRootIs(t, hubAQs, aqtest.Cohort("fleet-c", "root").Obj())

	unreachable := "ClusterUnreachable: the plane does not hear from this member, so its copy stays as it was: "
	want := []string{
		"east: " + unreachable + "NoCredentialProvider: ClusterProfile ome/east publishes the access providers open-cluster-management, and the credential providers file " + providers +
			" has secretreader: add a provider named after one of the profile's to the file (the chart's quotaManager.projection.clusterProfiles.providers, with its plugin), or have the profile publish one the file has",
		"west: " + unreachable + "CredentialPluginFailed: ClusterProfile ome/west, access provider secretreader: the plugin " + plugin +
			` exited with status 1 and said "secrets \"west\" is forbidden: cannot get resource \"secrets\" in the namespace \"ome\"": fix what the plugin needs (its credentials, its access to them), or the provider's entry in the credential providers file; the plane runs it again every 30s`,
	}
	testutil.Eventually(t, time.Minute, func() string {
		aq, err := hubAQs.Get(ctx, "fleet-c", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		var got []string
		for _, c := range aq.Status.Clusters {
			got = append(got, c.Cluster+": "+c.Message)
		}
		if !slices.Equal(got, want) {
			return fmt.Sprintf("the plane's fleet-c lists\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return ""
	})
	// docs/install.md's command prints the same lines.
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`kubectl --context plane get aq NODE -o jsonpath='([^']*)'`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/install.md has no kubectl --context plane get aq NODE -o jsonpath='...' command")
	}
	out, stderr, err := hub.KubectlOutput(ctx, "get", "aq", "fleet-c", "-o", "jsonpath="+string(m[1]))
	if err != nil || out != strings.Join(want, "\n")+"\n" {
		t.Errorf("docs/install.md's command printed (%v, %s)\n%s\nwant\n%s", err, stderr, out, strings.Join(want, "\n"))
	}
	dup := "DuplicateCluster: ClusterProfile ome/west-again names the same cluster as ClusterProfile ome/west (the server https://west.example.com:6443): the plane counts a cluster once, as west"
	if data, err := os.ReadFile(pm.Log); err != nil || !strings.Contains(string(data), strings.ReplaceAll(dup, `"`, `\"`)) {
		t.Errorf("the plane's log (%v) does not say %q:\n%s", err, dup, pm.Tail(20))
	}
}

// installProfileCRD installs the ClusterProfile CRD of the cluster
// inventory API's module on c.
func installProfileCRD(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("finding the cluster inventory API's module: %v", err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml")
	if _, stderr, err := c.KubectlOutput(ctx, "apply", "--server-side", "-f", crd); err != nil {
		t.Fatalf("installing the ClusterProfile CRD: %v: %s", err, stderr)
	}
	if _, stderr, err := c.KubectlOutput(ctx, "wait", "--for=condition=Established", "crd/clusterprofiles.multicluster.x-k8s.io", "--timeout=60s"); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
}

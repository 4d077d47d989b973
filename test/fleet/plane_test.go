package fleet

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/api/client/clientset/versioned"
	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
	"ome.io/quota-manager/test/testutil/golden"
)

// TestPlaneProjectsShares runs a management plane on a control plane of
// its own, with two members, each with a workload-mode manager: east (the
// package's cluster, with Kueue and two Nodes of 8 A100 GPUs) and west (a
// third control plane, with one such Node). The plane reaches each as the
// identity the chart's remoteAccess values create there. The
// fleet tree's Explicit and Proportional budgets reach each member as
// copies with that member's share; east's manager turns its copies into
// ClusterQueues of those nominal quotas; Kueue on east admits a team's
// workloads up to its share and no further; a budget change on the plane
// reaches east's ClusterQueue and Kueue's admission; the plane reports
// each member's share, what Kueue admitted there, and its capacity, and a
// Prometheus scraping the plane reads the same usage; a node of east's own under a fleet
// team's name is left as it is and reported on the plane's node; a member
// cut off (and for how long), or whose API server is stopped, is reported ClusterUnreachable
// and keeps its shares while the other is still written, a raise that
// needs its lowering waiting until it is read back, and catches up when it
// returns; a member's growth moves a Proportional split once,
// which the plane's recorded log explains, and a drop within its damping
// band not at all; and fleet nodes deleted
// on the plane are swept from both members, with east's Kueue objects.
func TestPlaneProjectsShares(t *testing.T) {
	ctx := context.Background()
	east := member
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("fleet-east-%d", i)
		_, err := localcluster.ApplyNode(ctx, east.Kube, localcluster.GPUNode(name, 8))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = east.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	testutil.A100Flavor(t, east)
	if err := east.EnsureNamespace(ctx, "fleet-ml"); err != nil {
		t.Fatal(err)
	}
	// East's root is its manager's, with its finalizer: let it go at the
	// end, once the manager has stopped (cleanups run last first).
	t.Cleanup(func() { releaseRoot(t, aqs) })
	testutil.StartManager(t, east, member.ManagerBin, "east", "--webhook=false", "--enrolled-namespaces=fleet-ml")

	west := startCluster(t)
	westAQs := versioned.NewForConfigOrDie(west.Config).OmeV1beta1().AcceleratorQuotas()
	if _, err := localcluster.ApplyNode(ctx, west.Kube, localcluster.GPUNode("fleet-west-1", 8)); err != nil {
		t.Fatal(err)
	}
	testutil.A100Flavor(t, west)
	if err := west.EnsureNamespace(ctx, "fleet-ml"); err != nil {
		t.Fatal(err)
	}
	// No Lease: west's API server is stopped for a while below, and a
	// manager that cannot renew its Lease exits.
	testutil.StartManager(t, west, member.ManagerBin, "west", "--webhook=false", "--enrolled-namespaces=fleet-ml", "--leader-elect=false")

	// The plane reaches each member as the identity the chart's
	// remoteAccess values create there, with its real token; west through
	// a link the test cuts and restores.
	planeKubeconfig := func(c *localcluster.Cluster) string {
		remoteAccess(t, c)
		path := filepath.Join(t.TempDir(), "plane.kubeconfig")
		if err := c.WriteServiceAccountKubeconfig(ctx, "ome-system", remoteAccessName, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	u, err := url.Parse(west.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	westLink := newLink(t, u.Host)
	hub := startCluster(t)
	hubAQs := versioned.NewForConfigOrDie(hub.Config).OmeV1beta1().AcceleratorQuotas()
	planeLog := filepath.Join(t.TempDir(), "events")
	inventory := memberSecrets(t, hub, "fleet-plane", map[string]string{"east": planeKubeconfig(east), "west": westLink.kubeconfig(t, planeKubeconfig(west))})
	pm := testutil.StartManager(t, hub, member.ManagerBin, "plane", append(inventory, "--mode=management", "--webhook=false", "--origin=fleet",
		"--event-log="+planeLog)...)

	// The fleet tree: a Cohort of 20 and three teams. fleet-a splits 8
	// as east 6 and west 2; fleet-b splits 6 by the marks, 16 to 8: 4 and
	// 2.
	explicit := func(name, east, west string) *v1beta1.AcceleratorQuota {
		aq := aqtest.Team(name, "fleet-c").Budget(gpu, "a100", sum(east, west)).Share("east", east).Share("west", west).Obj()
		aq.Spec.Budgets[0].Policy = v1beta1.DistributionExplicit
		return aq
	}
	// fleet-a borrows nothing, so that Kueue on east admits exactly its
	// share there.
	a := explicit("fleet-a", "6", "2")
	zero := resource.MustParse("0")
	a.Spec.Budgets[0].BorrowingLimit = &zero
	proportional := aqtest.Team("fleet-b", "fleet-c").Budget(gpu, "a100", "6").Obj()
	proportional.Spec.Budgets[0].Policy = v1beta1.DistributionProportional
	for _, aq := range []*v1beta1.AcceleratorQuota{aqtest.Cohort("fleet-c", "root").Budget(gpu, "a100", "20").Obj(), a, proportional} {
		createWhenRootIs(t, hubAQs, aq)
		t.Cleanup(func() { _ = hubAQs.Delete(context.Background(), aq.Name, metav1.DeleteOptions{}) })
	}
	copies := func(c typed.AcceleratorQuotaInterface, want ...string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() string {
			if got := fleetCopies(t, c); !slices.Equal(got, want) {
				return fmt.Sprintf("the member holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			return ""
		})
	}
	copies(aqs, "fleet-a<-fleet-c [a100=6] origin=fleet", "fleet-b<-fleet-c [a100=4] origin=fleet", "fleet-c<-root [] origin=fleet")
	copies(westAQs, "fleet-a<-fleet-c [a100=2] origin=fleet", "fleet-b<-fleet-c [a100=2] origin=fleet", "fleet-c<-root [] origin=fleet")
	nominal := func(team, want string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() string {
			if got := cqNominal(east, team); got != want {
				return fmt.Sprintf("east's ClusterQueue %s: nominal %s, want %s", team, got, want)
			}
			return ""
		})
	}
	nominal("fleet-a", "6")
	nominal("fleet-b", "4")
	for team, want := range map[string]string{"fleet-a": "2", "fleet-b": "2"} {
		testutil.Eventually(t, 60*time.Second, func() string {
			if got := cqNominal(west, team); got != want {
				return fmt.Sprintf("west's ClusterQueue %s: nominal %s, want %s", team, got, want)
			}
			return ""
		})
	}

	// The plane's own statuses: each member's share of a team's budget,
	// and each member's capacity on root.
	status := func(name, want string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() string {
			if got := planeStatus(t, hubAQs, name); got != want {
				return fmt.Sprintf("the plane's %s reports %q, want %q", name, got, want)
			}
			return ""
		})
	}
	status("fleet-a", "east=6 west=2")
	status("fleet-b", "east=4 west=2")
	status("root", "east=16/16 west=8/8")
	// Its metrics: the fleet budget under plane="management", and each
	// member's share (what the dashboard's fleet row reads).
	for _, m := range []struct {
		family string
		match  []string
		want   float64
	}{
		{"ome_quota_budget_nominal", []string{`plane="management"`, `quota="fleet-a"`}, 8},
		{"ome_quota_budget_share", []string{`quota="fleet-a"`, `cluster="east"`}, 6},
		{"ome_quota_budget_share", []string{`quota="fleet-b"`, `cluster="west"`}, 2},
	} {
		if v, err := pm.Metric(ctx, m.family, m.match...); err != nil || v != m.want {
			t.Errorf("the plane's %s%v = %v (%v), want %v", m.family, m.match, v, err, m.want)
		}
	}
	// kubectl ome quota tree on the plane prints them.
	testutil.Eventually(t, 30*time.Second, func() string {
		var out, errOut bytes.Buffer
		if code := quotactl.Run([]string{"quota", "tree", "--kubeconfig", hub.Kubeconfig}, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}); code != 0 {
			return fmt.Sprintf("kubectl ome quota tree exited %d: %s", code, errOut.String())
		}
		return golden.Diff(t, "plane-tree.txt", regexp.MustCompile(`measured \d+[smhd] ago`).ReplaceAllString(out.String(), "measured <age> ago"))
	})
	// status on the plane shows each member's copy: east's is in place in
	// Kueue, west (no manager there) holds the copy and nothing more.
	testutil.Eventually(t, 30*time.Second, func() string {
		var out, errOut bytes.Buffer
		if code := quotactl.Run([]string{"quota", "status", "fleet-a", "--kubeconfig", hub.Kubeconfig}, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}); code != 0 {
			return fmt.Sprintf("kubectl ome quota status exited %d: %s", code, errOut.String())
		}
		return golden.Diff(t, "plane-status-fleet-a.txt", out.String())
	})

	// Kueue on east admits fleet-a's workloads up to its share there, 6
	// GPUs, and no further.
	wls := east.Kueue.KueueV1beta2().Workloads("fleet-ml")
	for i := range 7 {
		wl := gpuWorkload("fleet-ml", fmt.Sprintf("fleet-a-%d", i), "fleet-a")
		testutil.Eventually(t, 30*time.Second, func() string {
			if _, err := wls.Create(ctx, wl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Sprintf("creating workload %s: %v", wl.Name, err)
			}
			return ""
		})
	}
	admitted := func(want int, pending string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() string {
			list, err := wls.List(ctx, metav1.ListOptions{})
			if err != nil {
				return err.Error()
			}
			n, waiting := 0, ""
			for i := range list.Items {
				if apimeta.IsStatusConditionTrue(list.Items[i].Status.Conditions, kueuev1beta2.WorkloadAdmitted) {
					n++
				} else if c := apimeta.FindStatusCondition(list.Items[i].Status.Conditions, kueuev1beta2.WorkloadQuotaReserved); c != nil {
					waiting += c.Message
				}
			}
			if n != want || !strings.Contains(waiting, pending) {
				return fmt.Sprintf("Kueue on east admitted %d of fleet-a's workloads, want %d; the others wait with %q, want %q", n, want, waiting, pending)
			}
			return ""
		})
	}
	admitted(6, "insufficient unused quota")

	// One budget change on the plane, to both members' ClusterQueues; Kueue
	// on east admits the seventh workload.
	changed := time.Now()
	patch := fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":%q,"resourceFlavor":"a100","nominal":"10","borrowingLimit":"0","policy":"Explicit","perCluster":[{"cluster":"east","nominal":"7"},{"cluster":"west","nominal":"3"}]}]}}`, gpu)
	if _, err := hubAQs.Patch(ctx, "fleet-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, func() string {
		if e, w := cqNominal(east, "fleet-a"), cqNominal(west, "fleet-a"); e != "7" || w != "3" {
			return fmt.Sprintf("fleet-a's ClusterQueues hold %s on east and %s on west, want 7 and 3", e, w)
		}
		return ""
	})
	t.Logf("a budget change on the plane reached both members' ClusterQueues in %s", time.Since(changed).Round(time.Millisecond))
	admitted(7, "")
	// The plane reads it back from east's copy: per member, and summed.
	testutil.Eventually(t, 60*time.Second, func() string {
		aq, err := hubAQs.Get(ctx, "fleet-a", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		var got []string
		for _, b := range aq.Status.Budgets {
			got = append(got, "total="+b.Admitted.String())
			for _, pc := range b.PerCluster {
				got = append(got, pc.Cluster+"="+pc.Admitted.String())
			}
		}
		if g := strings.Join(got, " "); g != "total=7 east=7 west=0" {
			return fmt.Sprintf("the plane's fleet-a reports admitted %q, want %q", g, "total=7 east=7 west=0")
		}
		return ""
	})
	t.Run("a Prometheus scraping the plane reads fleet-a's usage as kubectl shows it", func(t *testing.T) {
		planeUsageInPrometheus(t, hub, pm, "fleet-a")
	})

	// East's own fleet-d is never overwritten; west gets the copy.
	local, err := aqs.Create(ctx, aqtest.Team("fleet-d", "root").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aqs.Delete(context.Background(), "fleet-d", metav1.DeleteOptions{}) })
	d := explicit("fleet-d", "3", "1")
	createWhenRootIs(t, hubAQs, d)
	t.Cleanup(func() { _ = hubAQs.Delete(context.Background(), "fleet-d", metav1.DeleteOptions{}) })
	copies(westAQs, "fleet-a<-fleet-c [a100=3] origin=fleet", "fleet-b<-fleet-c [a100=2] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-fleet-c [a100=1] origin=fleet")
	// The plane reports the conflict on its fleet-d, naming east, and
	// fleet-a's copies as in place.
	materialized := func(name, want string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() string {
			aq, err := hubAQs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			c := apimeta.FindStatusCondition(aq.Status.Conditions, v1beta1.ConditionMaterialized)
			if c == nil || !strings.HasPrefix(string(c.Status)+" "+c.Reason+": "+c.Message, want) {
				return fmt.Sprintf("the plane's %s says Materialized %+v, want %q", name, c, want)
			}
			return ""
		})
	}
	materialized("fleet-d", "False ObjectConflict: member east: the member holds a node of its own named fleet-d")
	materialized("fleet-a", "True Admitted")
	testutil.Eventually(t, 30*time.Second, func() string {
		evs, err := hub.Kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=fleet-d,reason=ObjectConflict"})
		if err != nil {
			return err.Error()
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "member east") {
				return ""
			}
		}
		return fmt.Sprintf("no ObjectConflict Event on the plane's fleet-d naming east: %d Events", len(evs.Items))
	})

	// West's link cut: the plane learns it (ome_quota_member_reachable,
	// which OmeQuotaMemberUnreachable reads), keeps west's share of
	// fleet-b rather than moving it to east, and goes on writing east;
	// west's copies stay as they were until the link returns.
	reachableWithin := func(want float64, within time.Duration) {
		t.Helper()
		testutil.Eventually(t, within, func() string {
			v, err := pm.Metric(ctx, "ome_quota_member_reachable", `cluster="west"`)
			if err != nil || v != want {
				return fmt.Sprintf(`the plane's ome_quota_member_reachable{cluster="west"} = %v (%v), want %v`, v, err, want)
			}
			return ""
		})
	}
	reachable := func(want float64) { t.Helper(); reachableWithin(want, 30*time.Second) }
	silent := func(want string, ok func(float64) bool) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() string {
			v, err := pm.Metric(ctx, "ome_quota_member_silent_seconds", `cluster="west"`)
			if err != nil || !ok(v) {
				return fmt.Sprintf(`the plane's ome_quota_member_silent_seconds{cluster="west"} = %v (%v), want %s`, v, err, want)
			}
			return ""
		})
	}
	heard := func(v float64) bool { return v == 0 }
	reachable(1)
	silent("0", heard)
	westLink.cut()
	reachable(0)
	// How long since the plane heard from west, which OmeQuotaMemberSilent
	// reads, grows.
	silent("above 1", func(v float64) bool { return v > 1 })
	patch = fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":%q,"resourceFlavor":"a100","nominal":"9","policy":"Explicit","perCluster":[{"cluster":"east","nominal":"5"},{"cluster":"west","nominal":"4"}]}]}}`, gpu)
	if _, err := hubAQs.Patch(ctx, "fleet-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nominal("fleet-a", "5")
	copies(aqs, "fleet-a<-fleet-c [a100=5] origin=fleet", "fleet-b<-fleet-c [a100=4] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-root [a100=1] origin=")
	copies(westAQs, "fleet-a<-fleet-c [a100=3] origin=fleet", "fleet-b<-fleet-c [a100=2] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-fleet-c [a100=1] origin=fleet")
	status("fleet-b", "east=4 west=2")
	testutil.Eventually(t, 30*time.Second, func() string {
		var out, errOut bytes.Buffer
		quotactl.Run([]string{"quota", "status", "fleet-b", "--kubeconfig", hub.Kubeconfig}, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
		if !strings.Contains(out.String(), "  west: Unreachable") || !strings.Contains(out.String(), "  east: Matches") {
			return fmt.Sprintf("status fleet-b on the plane while west is cut off:\n%s%s", out.String(), errOut.String())
		}
		return ""
	})
	westLink.restore(t)
	reachable(1)
	silent("0", heard)
	copies(westAQs, "fleet-a<-fleet-c [a100=4] origin=fleet", "fleet-b<-fleet-c [a100=2] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-fleet-c [a100=1] origin=fleet")

	// West's API server stopped (SIGSTOP): its connections stay open and
	// nothing comes through them; the HTTP/2 health check of the plane's
	// client closes them (after 30 s without a frame and 15 s without an
	// answer to a ping), and the next attempts time out; it reports west
	// ClusterUnreachable. fleet-a then moves from 5/4 to 6/3: east's raise
	// waits until west's lower is read back, once west runs again; the
	// members' copies, sampled throughout, never hold more than 9.
	apiserver := west.Processes()["kube-apiserver"]
	if apiserver == 0 {
		t.Fatal("west's kube-apiserver process is not found")
	}
	sampled := watchSum(t, "fleet-a", map[string]typed.AcceleratorQuotaInterface{"east": aqs, "west": westAQs})
	if err := syscall.Kill(apiserver, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := func() { _ = syscall.Kill(apiserver, syscall.SIGCONT) }
	t.Cleanup(resume)
	reachableWithin(0, 2*time.Minute)
	patch = fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":%q,"resourceFlavor":"a100","nominal":"9","policy":"Explicit","perCluster":[{"cluster":"east","nominal":"6"},{"cluster":"west","nominal":"3"}]}]}}`, gpu)
	if _, err := hubAQs.Patch(ctx, "fleet-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() string {
		aq, err := hubAQs.Get(ctx, "fleet-a", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		var west, east bool
		for _, c := range aq.Status.Clusters {
			west = west || c.Cluster == "west" && strings.HasPrefix(c.Message, "ClusterUnreachable:")
			east = east || c.Cluster == "east" && strings.Contains(c.Waiting, "west to release 1") && c.WaitingSince != nil
		}
		if !west || !east {
			return fmt.Sprintf("the plane's fleet-a does not report west ClusterUnreachable and east's raise waiting for it: %+v", aq.Status.Clusters)
		}
		return ""
	})
	nominal("fleet-a", "5")
	if got := copyOf(t, aqs, "fleet-a"); got != "5" {
		t.Fatalf("with west's API server stopped, east's copy of fleet-a holds %s, want 5", got)
	}
	behind := func(cluster string, want float64) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() string {
			v, err := pm.Metric(ctx, "ome_quota_member_copies_behind", `cluster="`+cluster+`"`)
			if err != nil || v != want {
				return fmt.Sprintf("the plane's ome_quota_member_copies_behind{cluster=%q} = %v (%v), want %v", cluster, v, err, want)
			}
			return ""
		})
	}
	behind("west", 1) // fleet-a's copy there is from the generation before
	behind("east", 1) // east's own fleet-d stands where the copy would
	resumed := time.Now()
	resume()
	reachable(1)
	copies(westAQs, "fleet-a<-fleet-c [a100=3] origin=fleet", "fleet-b<-fleet-c [a100=2] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-fleet-c [a100=1] origin=fleet")
	nominal("fleet-a", "6")
	t.Logf("once west's API server ran again, east's raise reached its ClusterQueue in %s", time.Since(resumed).Round(time.Millisecond))
	sampled.atMost(t, "9")
	behind("west", 0)

	// East grows past its mark (a third Node of 8: 24 of 32): fleet-b's
	// Proportional 6 moves once, to 4.5 and 1.5, the tie on the halves
	// going to east by name. A drop within east's damping band (23
	// installed) leaves its mark, and so the split, where they are.
	generation := func() int64 {
		aq, err := aqs.Get(ctx, "fleet-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return aq.Generation
	}
	before := generation()
	third := func(gpus int) {
		if _, err := localcluster.ApplyNode(ctx, east.Kube, localcluster.GPUNode("fleet-east-3", gpus)); err != nil {
			t.Fatal(err)
		}
	}
	third(8)
	t.Cleanup(func() {
		_ = east.Kube.CoreV1().Nodes().Delete(context.Background(), "fleet-east-3", metav1.DeleteOptions{})
	})
	copies(aqs, "fleet-a<-fleet-c [a100=6] origin=fleet", "fleet-b<-fleet-c [a100=5] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-root [a100=1] origin=")
	copies(westAQs, "fleet-a<-fleet-c [a100=3] origin=fleet", "fleet-b<-fleet-c [a100=1] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-fleet-c [a100=1] origin=fleet")
	status("fleet-b", "east=5 west=1")
	if got := generation(); got != before+1 {
		t.Errorf("east's copy of fleet-b went from generation %d to %d: the split moved more than once", before, got)
	}
	// The plane's recorded log explains the split: the policy, and each
	// member's mark with the report that brought it.
	why, err := exec.Command(member.ManagerBin, "replay", planeLog, "--why", "fleet-b").CombinedOutput()
	if err != nil {
		t.Fatalf("replay --why fleet-b: %v\n%s", err, why)
	}
	for _, want := range []string{"fleet-b's budget nvidia.com/gpu@a100 is split Proportional among the member clusters: east=5, west=1",
		"<- east's high-water mark of nvidia.com/gpu@a100 is 24", "<- west's high-water mark of nvidia.com/gpu@a100 is 8"} {
		if !strings.Contains(string(why), want) {
			t.Errorf("replay --why fleet-b on the plane's log does not say %q:\n%s", want, why)
		}
	}
	third(7)
	status("root", "east=23/24 west=8/8")
	// A later change reaches east, so the plane has passed over east since
	// it heard of the drop: fleet-b's copy is still as it was.
	patch = fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":%q,"resourceFlavor":"a100","nominal":"7","policy":"Explicit","perCluster":[{"cluster":"east","nominal":"4"},{"cluster":"west","nominal":"3"}]}]}}`, gpu)
	if _, err := hubAQs.Patch(ctx, "fleet-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	copies(aqs, "fleet-a<-fleet-c [a100=4] origin=fleet", "fleet-b<-fleet-c [a100=5] origin=fleet",
		"fleet-c<-root [] origin=fleet", "fleet-d<-root [a100=1] origin=")
	if got := generation(); got != before+1 {
		t.Errorf("a drop within east's damping band moved fleet-b's split: its copy on east is at generation %d, want %d", got, before+1)
	}
	status("fleet-b", "east=5 west=1")

	// fleet-b deleted on the plane: swept from both members, and east's
	// manager deletes its ClusterQueue. By then the plane has passed over
	// east after fleet-d's creation, so east's fleet-d is seen untouched
	// after a pass, not merely before one.
	if err := hubAQs.Delete(ctx, "fleet-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	copies(aqs, "fleet-a<-fleet-c [a100=4] origin=fleet", "fleet-c<-root [] origin=fleet", "fleet-d<-root [a100=1] origin=")
	copies(westAQs, "fleet-a<-fleet-c [a100=3] origin=fleet", "fleet-c<-root [] origin=fleet", "fleet-d<-fleet-c [a100=1] origin=fleet")
	nominal("fleet-b", "none")
	after, err := aqs.Get(ctx, "fleet-d", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !sameSpec(after, local) {
		t.Errorf("east's own fleet-d was changed: %+v", after.Spec)
	}

	// The fleet tree deleted on the plane: every copy is swept from both
	// members, and east's manager deletes the Kueue objects (so that Kueue
	// lets the flavor go at cleanup).
	if err := wls.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := aqs.Delete(ctx, "fleet-d", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fleet-a", "fleet-d", "fleet-c"} {
		if err := hubAQs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	copies(aqs)
	copies(westAQs)
	nominal("fleet-a", "none")
}

func gpuWorkload(ns, name, queue string) *kueuev1beta2.Workload {
	one := resource.MustParse("1")
	return &kueuev1beta2.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kueuev1beta2.WorkloadSpec{
			QueueName: kueuev1beta2.LocalQueueName(queue),
			PodSets: []kueuev1beta2.PodSet{{Name: "main", Count: 1, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "worker", Image: "registry.invalid/pause",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: one}, Limits: corev1.ResourceList{gpu: one}}}},
			}}}},
		},
	}
}

const gpu = "nvidia.com/gpu"

func sum(a, b string) string {
	q := resource.MustParse(a)
	q.Add(resource.MustParse(b))
	return q.String()
}

func sameSpec(a, b *v1beta1.AcceleratorQuota) bool {
	return apiequality.Semantic.DeepEqual(a.Spec, b.Spec) && a.Labels[v1beta1.OriginLabel] == b.Labels[v1beta1.OriginLabel]
}

// planeStatus renders what a plane's node reports per member: a team's
// shares of its A100 GPUs ("east=6 west=2"), root's capacity of them
// ("east=16/16": allocatable and mark).
func planeStatus(t *testing.T, c typed.AcceleratorQuotaInterface, name string) string {
	t.Helper()
	aq, err := c.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, b := range aq.Status.Budgets {
		for _, pc := range b.PerCluster {
			parts = append(parts, pc.Cluster+"="+pc.Nominal.String())
		}
	}
	for _, cp := range aq.Status.Capacity {
		if cp.ResourceName == gpu && cp.ResourceFlavor == "a100" {
			for _, pc := range cp.PerCluster {
				parts = append(parts, fmt.Sprintf("%s=%s/%s", pc.Cluster, pc.Allocatable.String(), pc.HighWaterMark.String()))
			}
		}
	}
	return strings.Join(parts, " ")
}

// kubeconfig writes a copy of the kubeconfig at path whose clusters are
// reached through l, and returns its path.
func (l *link) kubeconfig(t *testing.T, path string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server, c.TLSServerName = "https://"+l.addr, "127.0.0.1"
	}
	out := filepath.Join(t.TempDir(), "through-link.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// memberSecrets lists members for a plane on hub, as --members-from=secrets
// reads them: each member's kubeconfig (a file) in a Secret NAME-kubeconfig
// of namespace ns, and the ConfigMap that names them. It returns the
// plane's flags for that inventory.
func memberSecrets(t *testing.T, hub *localcluster.Cluster, ns string, kubeconfigs map[string]string) []string {
	t.Helper()
	ctx := context.Background()
	if err := hub.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	entries := map[string]string{}
	for name, path := range kubeconfigs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		writeSecret(t, hub, ns, name+"-kubeconfig", map[string][]byte{"kubeconfig": data})
		entries[name] = name + "-kubeconfig"
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ome-quota-manager-members"}, Data: entries}
	if _, err := hub.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return []string{"--members-from=secrets", "--members-namespace=" + ns}
}

// writeSecret creates or replaces a Secret of the cluster.
func writeSecret(t *testing.T, c *localcluster.Cluster, ns, name string, data map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	_, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.Kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// startCluster starts another control plane for one test.
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	c, err := localcluster.Start(context.Background(), localcluster.Options{})
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

// createWhenRootIs creates aq, trying again while the API server refuses
// it (the plane starts moments before).
func createWhenRootIs(t *testing.T, c typed.AcceleratorQuotaInterface, aq *v1beta1.AcceleratorQuota) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() string {
		if _, err := c.Create(context.Background(), aq, metav1.CreateOptions{}); err != nil {
			return fmt.Sprintf("creating %s: %v", aq.Name, err)
		}
		return ""
	})
}

// fleetCopies renders a cluster's AcceleratorQuotas named fleet-*.
func fleetCopies(t *testing.T, c typed.AcceleratorQuotaInterface) []string {
	t.Helper()
	return quotaLines(t, c, "fleet-")
}

// quotaLines renders a cluster's AcceleratorQuotas other than root whose
// name has prefix, one line each: name, parent, budgets and origin.
func quotaLines(t *testing.T, c typed.AcceleratorQuotaInterface, prefix string) []string {
	t.Helper()
	list, err := c.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, aq := range list.Items {
		if aq.Name == v1beta1.RootName || !strings.HasPrefix(aq.Name, prefix) {
			continue
		}
		var budgets []string
		for _, b := range aq.Spec.Budgets {
			budgets = append(budgets, b.ResourceFlavor+"="+b.Nominal.String())
		}
		parent := ""
		if aq.Spec.ParentRef != nil {
			parent = aq.Spec.ParentRef.Name
		}
		out = append(out, fmt.Sprintf("%s<-%s [%s] origin=%s", aq.Name, parent, strings.Join(budgets, ","), aq.Labels[v1beta1.OriginLabel]))
	}
	slices.Sort(out)
	return out
}

// cqNominal is the nominal quota of A100 GPUs in the cluster's
// ClusterQueue team, "none" when there is no such ClusterQueue.
func cqNominal(c *localcluster.Cluster, team string) string {
	cq, err := c.Kueue.KueueV1beta2().ClusterQueues().Get(context.Background(), team, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "none"
	}
	if err != nil {
		return err.Error()
	}
	for _, rg := range cq.Spec.ResourceGroups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				if f.Name == "a100" && r.Name == gpu {
					return r.NominalQuota.String()
				}
			}
		}
	}
	return "no A100 GPUs"
}

// releaseRoot deletes the cluster's root, letting its finalizer go.
func releaseRoot(t *testing.T, c typed.AcceleratorQuotaInterface) {
	ctx := context.Background()
	if _, err := c.Patch(ctx, v1beta1.RootName, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("releasing root: %v", err)
	}
	if err := c.Delete(ctx, v1beta1.RootName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting root: %v", err)
	}
}

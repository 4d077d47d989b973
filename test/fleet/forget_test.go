package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

// ome runs kubectl ome in process with args.
func ome(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = quotactl.Run(args, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

// TestForgetAGoneCluster runs a plane on a control plane of its own, with
// its webhook and an event log, and two members: east (the package's
// cluster, with a workload manager) and dead, whose kubeconfig points at
// a port where nothing listens. The team forget-a's hold record, as a
// plane that ran before left it, says dead may hold 3 of its GPUs: east's
// raise to its share of 4 waits for dead to release them. kubectl ome
// quota members lists both, dead unreachable and never reported, holding
// east back; the budget lowered to 2 leaves the members holding more than
// it (ome_quota_fleet_held). Forgetting east, which answers, is refused by
// the plugin and by the plane's webhook; forgetting dead, as a user of
// its own, works: the plane lists it gone, its record no longer counts,
// east rises to its share and the members hold no more than the budget.
// replay --history on the plane's log names that user as the author of
// the write. forget --undo takes dead back as a member that holds
// nothing. Pointed at east, a workload cluster, members says to point it
// at the plane.
func TestForgetAGoneCluster(t *testing.T) {
	ctx := context.Background()
	east := member
	if _, err := localcluster.ApplyNode(ctx, east.Kube, localcluster.GPUNode("forget-east-1", 8)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = east.Kube.CoreV1().Nodes().Delete(context.Background(), "forget-east-1", metav1.DeleteOptions{})
	})
	testutil.A100Flavor(t, east)
	t.Cleanup(func() { releaseRoot(t, aqs) })
	testutil.StartManager(t, east, member.ManagerBin, "east", "--webhook=false")

	remoteAccess(t, east)
	eastKubeconfig := filepath.Join(t.TempDir(), "plane.kubeconfig")
	if err := east.WriteServiceAccountKubeconfig(ctx, "ome-system", remoteAccessName, eastKubeconfig); err != nil {
		t.Fatal(err)
	}
	// dead: the same credential, for a server on a port nothing listens on.
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(eastKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server, c.TLSServerName = fmt.Sprintf("https://127.0.0.1:%d", port), "127.0.0.1"
	}
	deadKubeconfig := filepath.Join(t.TempDir(), "dead.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, deadKubeconfig); err != nil {
		t.Fatal(err)
	}

	hub := startCluster(t)
	hubAQs := aqsOf(hub)
	// The fleet tree, written before the plane and its webhook start:
	// forget-a gives east 4 of 4 GPUs, and carries the hold record a plane
	// that ran before wrote: dead may hold 3.
	team := aqtest.Team("forget-a", "forget-c").Budget(gpu, "a100", "4").Share("east", "4").Obj()
	team.Spec.Budgets[0].Policy = v1beta1.DistributionExplicit
	for _, aq := range []*v1beta1.AcceleratorQuota{aqtest.Cohort("forget-c", "root").Budget(gpu, "a100", "8").Obj(), team} {
		if _, err := hubAQs.Create(ctx, aq, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Written as the plane writes its statuses: applied, by its field
	// manager.
	record := &v1beta1.AcceleratorQuota{TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.SchemeGroupVersion.String(), Kind: "AcceleratorQuota"},
		ObjectMeta: metav1.ObjectMeta{Name: "forget-a"},
		Status: v1beta1.AcceleratorQuotaStatus{Holds: &v1beta1.FleetHolds{Writer: "1/an-earlier-plane", Clusters: []v1beta1.ClusterHolds{{Cluster: "dead",
			Budgets: []v1beta1.HeldBudget{{ResourceName: gpu, ResourceFlavor: "a100", Nominal: resource.MustParse("3")}}}}}}}
	body, err := json.Marshal(record)
	if err != nil {
		t.Fatal(err)
	}
	force := true
	if _, err := hubAQs.Patch(ctx, "forget-a", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: apply.FieldManager, Force: &force}, "status"); err != nil {
		t.Fatal(err)
	}

	// A user of its own, who may read and write AcceleratorQuotas on the
	// plane.
	if err := hub.EnsureNamespace(ctx, "fleet-ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Kube.CoreV1().ServiceAccounts("fleet-ops").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-admin"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.GrantClusterRole(t, hub, "fleet-admin", "fleet-ops", "fleet-admin", rbacv1.PolicyRule{
		APIGroups: []string{v1beta1.GroupName}, Resources: []string{"acceleratorquotas"}, Verbs: []string{"get", "list", "watch", "update", "patch"}})
	admin := filepath.Join(t.TempDir(), "fleet-admin.kubeconfig")
	if err := hub.WriteServiceAccountKubeconfig(ctx, "fleet-ops", "fleet-admin", admin); err != nil {
		t.Fatal(err)
	}
	const user = "system:serviceaccount:fleet-ops:fleet-admin"

	planeLog := filepath.Join(t.TempDir(), "events")
	inventory := memberSecrets(t, hub, "fleet-forget", map[string]string{"east": eastKubeconfig, "dead": deadKubeconfig})
	pm := testutil.StartManager(t, hub, member.ManagerBin, "plane", append(append(inventory, "--mode=management", "--origin=fleet",
		"--event-log="+planeLog), testutil.InstallWebhook(t, hub)...)...)
	// At the end, the fleet tree goes while the plane runs, which sweeps
	// east's copies.
	t.Cleanup(func() {
		for _, name := range []string{"forget-a", "forget-c"} {
			_ = hubAQs.Delete(context.Background(), name, metav1.DeleteOptions{})
		}
		testutil.Eventually(t, 60*time.Second, func() string {
			if got := quotaLines(t, aqs, "forget-"); len(got) > 0 {
				return fmt.Sprintf("east still holds %v", got)
			}
			return ""
		})
	})

	members := func() map[string]v1beta1.MemberStatus {
		t.Helper()
		code, out, errOut := ome("quota", "members", "-o", "json", "--kubeconfig", admin)
		if code != 0 {
			return map[string]v1beta1.MemberStatus{"": {Message: fmt.Sprintf("kubectl ome quota members exited %d: %s", code, errOut)}}
		}
		var rep quotactl.MembersReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("members -o json: %v\n%s", err, out)
		}
		byName := map[string]v1beta1.MemberStatus{}
		for _, m := range rep.Members {
			byName[m.Cluster] = m
		}
		return byName
	}
	line := func(m v1beta1.MemberStatus) string {
		reason := m.Reason
		if reason == "SplitOut" {
			// The plane's member grace may pass during the test: dead has
			// never reported either way.
			reason = "NotReported"
		}
		return fmt.Sprintf("%s reachable=%t reported=%t copies=%d behind=%d waiting=%d holding=%d %s", m.State, m.Reachable, m.Reported,
			m.Copies, m.CopiesBehind, m.RaisesWaiting, m.ReleasesAwaited, reason)
	}
	wantMembers := func(want map[string]string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() string {
			got := map[string]string{}
			for name, m := range members() {
				got[name] = line(m)
			}
			for name, w := range want {
				if got[name] != w {
					return fmt.Sprintf("kubectl ome quota members: %s is %q, want %q (all: %v)", name, got[name], w, got)
				}
			}
			if len(got) != len(want) {
				return fmt.Sprintf("kubectl ome quota members lists %v, want %v", got, want)
			}
			return ""
		})
	}
	copyOnEast := func(want string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() string {
			if got := quotaLines(t, aqs, "forget-"); !slices.Contains(got, want) {
				aq, err := hubAQs.Get(ctx, "forget-a", metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				return fmt.Sprintf("east holds %v, want %s; the plane's forget-a: clusters %+v, holds %+v", got, want, aq.Status.Clusters, aq.Status.Holds)
			}
			return ""
		})
	}
	held := func(want float64) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() string {
			v, err := pm.Metric(ctx, "ome_quota_fleet_held", `quota="forget-a"`)
			if err != nil || v != want {
				return fmt.Sprintf(`the plane's ome_quota_fleet_held{quota="forget-a"} = %v (%v), want %v`, v, err, want)
			}
			return ""
		})
	}

	// East rises only as far as dead's record leaves room: 1 of 4.
	copyOnEast("forget-a<-forget-c [a100=1] origin=fleet")
	wantMembers(map[string]string{
		"east": "Member reachable=true reported=true copies=2 behind=0 waiting=1 holding=0 RaisesWaiting",
		"dead": "Member reachable=false reported=false copies=0 behind=0 waiting=0 holding=1 NotReported",
	})
	testutil.Eventually(t, 60*time.Second, func() string {
		m := members()
		if d := m["dead"].Message; !strings.Contains(d, "it has never reported") || !strings.Contains(d, "connection refused") ||
			!strings.Contains(d, "1 raise(s) of other members' copies wait for it to release what it may hold above its share, first east's copy of forget-a (nvidia.com/gpu@a100 from 1 to 4): if the cluster is gone for good, forget it (kubectl ome quota forget dead)") {
			return fmt.Sprintf("dead's message: %q", d)
		}
		if e := m["east"].Message; !strings.Contains(e, "waits for dead to release 3 (it may hold 3, its share is 0; it does not answer)") {
			return fmt.Sprintf("east's message: %q", e)
		}
		return ""
	})
	code, table, errOut := ome("quota", "members", "--kubeconfig", admin)
	if code != 0 {
		t.Fatalf("kubectl ome quota members: %d %s", code, errOut)
	}
	t.Logf("kubectl ome quota members:\n%s", table)
	held(4)

	// The budget lowered to 2: east lowers at once, dead's 3 still count.
	lowered := aqtest.Team("forget-a", "forget-c").Budget(gpu, "a100", "2").Share("east", "2").Obj()
	lowered.Spec.Budgets[0].Policy = v1beta1.DistributionExplicit
	testutil.Eventually(t, 30*time.Second, func() string {
		cur, err := hubAQs.Get(ctx, "forget-a", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		cur.Spec = lowered.Spec
		if _, err := hubAQs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return err.Error()
		}
		return ""
	})
	held(4)
	if v, err := pm.Metric(ctx, "ome_quota_budget_nominal", `plane="management"`, `quota="forget-a"`); err != nil || v != 2 {
		t.Errorf(`the plane's ome_quota_budget_nominal{quota="forget-a"} = %v (%v), want 2`, v, err)
	}
	// A real Prometheus scraping the plane: OmeQuotaFleetOverBudget's
	// expression holds for forget-a, at what the members may hold.
	prom := scrapedPlane(t, pm)
	overBudget := "(" + alertExpr(t, "OmeQuotaFleetOverBudget") + `) and on (quota) ome_quota_fleet_held{quota="forget-a"}`
	inPrometheus := func(expr string, want ...string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() string {
			got, err := promQuery(prom, expr)
			if err != nil || !slices.Equal(got, want) {
				return fmt.Sprintf("Prometheus reads %s as %v (%v), want %v", expr, got, err, want)
			}
			return ""
		})
	}
	inPrometheus(`ome_quota_fleet_held{quota="forget-a"}`, "4")
	inPrometheus(overBudget, "4")

	// East answers: forget refuses it, the plugin and the plane's webhook.
	code, _, errOut = ome("quota", "forget", "east", "--kubeconfig", admin)
	if want := "error: cluster east still answers the plane, so it is not gone"; code != 1 || !strings.HasPrefix(errOut, want) {
		t.Errorf("forget east: exit %d, %q; want 1 and %q", code, errOut, want)
	}
	_, stderr, err := hub.KubectlOutput(ctx, "patch", "aq", "root", "--type=merge", "-p", `{"spec":{"goneClusters":[{"name":"east"}]}}`)
	if want := `denied the request: root: spec.goneClusters declares east gone without force, but the plane still hears from it`; err == nil || !strings.Contains(stderr, want) {
		t.Errorf("the plane's webhook let east be declared gone (%v): %s; want %q", err, stderr, want)
	}
	code, _, errOut = ome("quota", "forget", "nowhere", "--kubeconfig", admin)
	if want := "error: the plane knows no cluster nowhere: its clusters are [dead east]"; code != 1 || !strings.HasPrefix(errOut, want) {
		t.Errorf("forget nowhere: exit %d, %q; want 1 and %q", code, errOut, want)
	}

	// Dead forgotten, by fleet-admin.
	code, out, errOut := ome("quota", "forget", "dead", "--kubeconfig", admin)
	if want := "cluster dead declared gone: the plane forgets it, and what it held no longer counts against the fleet's budgets\n"; code != 0 || out != want {
		t.Fatalf("forget dead: exit %d, %q %s; want %q", code, out, errOut, want)
	}
	if code, out, _ := ome("quota", "forget", "dead", "--kubeconfig", admin); code != 0 || out != "cluster dead is declared gone already\n" {
		t.Errorf("forget dead again: exit %d, %q", code, out)
	}
	wantMembers(map[string]string{
		"east": "Member reachable=true reported=true copies=2 behind=0 waiting=0 holding=0 Answering",
		"dead": "Gone reachable=false reported=false copies=0 behind=0 waiting=0 holding=0 ClusterGone",
	})
	copyOnEast("forget-a<-forget-c [a100=2] origin=fleet")
	held(2)
	// Once Prometheus has scraped the members' 2, the alert's expression
	// no longer holds.
	inPrometheus(`ome_quota_fleet_held{quota="forget-a"}`, "2")
	inPrometheus(overBudget)
	code, table, _ = ome("quota", "members", "--kubeconfig", admin)
	t.Logf("kubectl ome quota members, dead forgotten (%d):\n%s", code, table)
	testutil.Eventually(t, 30*time.Second, func() string {
		aq, err := hubAQs.Get(ctx, "forget-a", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if h := aq.Status.Holds; h == nil || slices.ContainsFunc(h.Clusters, func(c v1beta1.ClusterHolds) bool { return c.Cluster == "dead" }) {
			return fmt.Sprintf("forget-a's hold record still names dead: %+v", h)
		}
		return ""
	})

	// The plane's log names fleet-admin as the author of the write.
	testutil.Eventually(t, 30*time.Second, func() string {
		trail, err := exec.Command(member.ManagerBin, "replay", planeLog, "--node", "root", "--history").CombinedOutput()
		if err != nil {
			return fmt.Sprintf("replay --node root --history: %v\n%s", err, trail)
		}
		verdict := regexp.MustCompile(`(?m)^(?:\d+:)?\d+\s+\S+\s+` + regexp.QuoteMeta(user) + `\s+UPDATE admitted by plane, landed as #(\d+) \[goneClusters \+dead\]$`).FindSubmatch(trail)
		if verdict == nil {
			return fmt.Sprintf("replay --node root --history does not name %s as the author of goneClusters +dead:\n%s", user, trail)
		}
		write := regexp.MustCompile(`(?m)^` + string(verdict[1]) + `\s+\S+\s+` + regexp.QuoteMeta(user) + `\s+AcceleratorQuota root written \(generation \d+\) \[goneClusters \+dead\]$`)
		if !write.Match(trail) {
			return fmt.Sprintf("replay --node root --history: the write #%s does not name %s:\n%s", verdict[1], user, trail)
		}
		if !strings.Contains(string(trail), "UPDATE request denied by plane: root: spec.goneClusters declares east gone without force") {
			return fmt.Sprintf("replay --node root --history does not show the denial of east:\n%s", trail)
		}
		t.Logf("replay --node root --history:\n%s", trail)
		return ""
	})

	// Taken back: dead is a member again, never reported, holding nothing.
	if code, out, errOut := ome("quota", "forget", "--undo", "dead", "--kubeconfig", admin); code != 0 || !strings.HasPrefix(out, "cluster dead taken back") {
		t.Fatalf("forget --undo dead: exit %d, %q %s", code, out, errOut)
	}
	wantMembers(map[string]string{
		"east": "Member reachable=true reported=true copies=2 behind=0 waiting=0 holding=0 Answering",
		"dead": "Member reachable=false reported=false copies=0 behind=0 waiting=0 holding=0 NotReported",
	})
	held(2)

	// Pointed at east, a workload cluster.
	code, _, errOut = ome("quota", "members", "--kubeconfig", east.Kubeconfig)
	if want := "error: root's status lists no member clusters: this cluster's quota manager is not a management plane"; code != 1 || !strings.HasPrefix(errOut, want) {
		t.Errorf("members on east: exit %d, %q; want 1 and %q", code, errOut, want)
	}
}

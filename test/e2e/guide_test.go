package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

const (
	capacityJSONPath = `jsonpath={range .status.capacity[*]}{.resourceName}{" "}{.resourceFlavor}{" "}{.allocatable}{" "}{.highWaterMark}{"\n"}{end}`
	observedJSONPath = `jsonpath={range .status.capacity[*]}{.resourceName}{" "}{.resourceFlavor}{" "}{.observedAt}{"\n"}{end}`
	treeColumns      = `custom-columns=NAME:.metadata.name,ROLE:.spec.role,PARENT:.spec.parentRef.name,READY:.status.conditions[?(@.type=="Ready")].status,MATERIALIZED:.status.conditions[?(@.type=="Materialized")].status`
)

// eventually and normalize are testutil's, by short names.
var (
	eventually = testutil.Eventually
	normalize  = testutil.Normalize
)

// managedVersions maps every managed Kueue object, and every node but root,
// to what a write of the manager would change: for a node, its
// resourceVersion (only the tests and the manager write nodes); for a Kueue
// object, its generation and the manager's own managedFields entries
// (managerWrites). Kueue writes its objects' status on its own schedule,
// later on a loaded machine (a ClusterQueue's usage some seconds after its
// Workloads were admitted), so their resourceVersions move without any
// write of the manager.
func managedVersions(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: v1beta1.ManagedByLabel + "=" + v1beta1.ManagedByValue}
	kq := cluster.Kueue.KueueV1beta2()
	out := map[string]string{}
	cohorts, err := kq.Cohorts().List(ctx, sel)
	require.NoError(t, err)
	for i := range cohorts.Items {
		out["Cohort/"+cohorts.Items[i].Name] = managerWrites(t, &cohorts.Items[i])
	}
	cqs, err := kq.ClusterQueues().List(ctx, sel)
	require.NoError(t, err)
	for i := range cqs.Items {
		out["ClusterQueue/"+cqs.Items[i].Name] = managerWrites(t, &cqs.Items[i])
	}
	lqs, err := kq.LocalQueues("").List(ctx, sel)
	require.NoError(t, err)
	for i := range lqs.Items {
		o := &lqs.Items[i]
		out["LocalQueue/"+o.Namespace+"/"+o.Name] = managerWrites(t, o)
	}
	// Node objects too, but root: its observedAt stamps are rewritten every
	// report interval by design, so that they show the measuring is alive.
	nodes, err := aqs.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		if n.Name != v1beta1.RootName {
			out["AcceleratorQuota/"+n.Name] = n.ResourceVersion
		}
	}
	return out
}

// managerWrites is an object's generation, which every change of its spec
// moves, and the manager's managedFields entries, whose time and fields
// the API server moves on every write of the manager that changes the
// object (labels included).
func managerWrites(t *testing.T, o metav1.Object) string {
	t.Helper()
	s := fmt.Sprintf("generation %d", o.GetGeneration())
	for _, f := range o.GetManagedFields() {
		if f.Manager == apply.FieldManager {
			b, err := json.Marshal(f)
			require.NoError(t, err)
			s += "; " + string(b)
		}
	}
	return s
}

func condition(aq *v1beta1.AcceleratorQuota, typ string) *metav1.Condition {
	for i := range aq.Status.Conditions {
		if aq.Status.Conditions[i].Type == typ {
			return &aq.Status.Conditions[i]
		}
	}
	return nil
}

// TestGuide walks the guide's Steps 1 to 3 and the behaviour around them,
// in order, against one manager process.
func TestGuide(t *testing.T) {
	ctx := context.Background()
	kq := cluster.Kueue.KueueV1beta2()
	testutil.GuideCluster(t, cluster)

	// m1 records its events; m3 continues the same log after m1 is killed.
	eventLog := filepath.Join(t.TempDir(), "events")
	m1 := startManager(t, "m1", "--event-log="+eventLog)

	t.Run("root is created", func(t *testing.T) {
		testutil.KubectlEquals(t, cluster, 30*time.Second, "NAME ROLE PARENT\nroot Cohort <none>",
			"get", "aq", "-o", "custom-columns=NAME:.metadata.name,ROLE:.spec.role,PARENT:.spec.parentRef.name")
		root, err := aqs.Get(ctx, "root", metav1.GetOptions{})
		require.NoError(t, err)
		require.Contains(t, root.Finalizers, v1beta1.RootFinalizer)
	})

	t.Run("capacity on root", func(t *testing.T) {
		testutil.KubectlEquals(t, cluster, 30*time.Second, "google.com/tpu a100 0 0\nnvidia.com/gpu a100 32 32", "get", "aq", "root", "-o", capacityJSONPath)
		first := testutil.Kubectl(t, cluster, "get", "aq", "root", "-o", observedJSONPath)
		// The report interval is 3s: the stamps are rewritten although the
		// numbers stand.
		eventually(t, 15*time.Second, func() string {
			if now := testutil.Kubectl(t, cluster, "get", "aq", "root", "-o", observedJSONPath); now == first {
				return "observedAt not refreshed: " + now
			}
			return ""
		})
		for _, line := range strings.Split(strings.TrimSpace(testutil.Kubectl(t, cluster, "get", "aq", "root", "-o", observedJSONPath)), "\n") {
			f := strings.Fields(line)
			require.Len(t, f, 3, line)
			at, err := time.Parse(time.RFC3339, f[2])
			require.NoError(t, err, line)
			require.WithinDuration(t, time.Now(), at, 10*time.Second, "observedAt is not recent: %s", line)
		}
	})

	t.Run("the guide's tree is Ready and Materialized", func(t *testing.T) {
		out := testutil.Kubectl(t, cluster, "apply", "-f", "../../config/samples/quota-tree.yaml")
		require.Equal(t, normalize(`acceleratorquota.ome.io/ml-research created
acceleratorquota.ome.io/team-alpha created
acceleratorquota.ome.io/team-beta created`), normalize(out))
		testutil.KubectlEquals(t, cluster, 30*time.Second, `NAME ROLE PARENT READY MATERIALIZED
ml-research Cohort root True True
root Cohort <none> True True
team-alpha ClusterQueue ml-research True True
team-beta ClusterQueue ml-research True True`, "get", "aq", "-o", treeColumns)
		testutil.KubectlEquals(t, cluster, 10*time.Second, "NAME COHORT\nteam-alpha ml-research\nteam-beta ml-research",
			"get", "clusterqueues.kueue.x-k8s.io", "-l", "ome.io/quota-managed-by=ome-quota-manager", "-o", "custom-columns=NAME:.metadata.name,COHORT:.spec.cohortName")
		testutil.KubectlEquals(t, cluster, 10*time.Second, "NAME CLUSTERQUEUE\nteam-alpha team-alpha\nteam-beta team-beta",
			"get", "localqueues.kueue.x-k8s.io", "-n", "ml-serving", "-l", "ome.io/quota-managed-by=ome-quota-manager", "-o", "custom-columns=NAME:.metadata.name,CLUSTERQUEUE:.spec.clusterQueue")
		testutil.KubectlEquals(t, cluster, 10*time.Second, `Ready=True Admitted: node is a valid member of the quota tree
Degraded=False Admitted: no invariant violated
Materialized=True Admitted: enforcement objects match this node's budget`,
			"get", "aq", "team-beta", "-o", `jsonpath={range .status.conditions[*]}{.type}{"="}{.status}{" "}{.reason}{": "}{.message}{"\n"}{end}`)
		cq, err := kq.ClusterQueues().Get(ctx, "team-beta", metav1.GetOptions{})
		require.NoError(t, err)
		rq := cq.Spec.ResourceGroups[0].Flavors[0].Resources
		require.Equal(t, corev1.ResourceName("nvidia.com/gpu"), rq[0].Name)
		require.Equal(t, "8", rq[0].NominalQuota.String())
		require.Equal(t, "4", rq[0].BorrowingLimit.String())
		alpha, err := kq.ClusterQueues().Get(ctx, "team-alpha", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "0", alpha.Spec.ResourceGroups[0].Flavors[0].Resources[0].BorrowingLimit.String(), "no borrowingLimit means no borrowing")
	})

	t.Run("team-beta gets 12 GPUs while team-alpha is idle", func(t *testing.T) {
		for i := 1; i <= 12; i++ {
			createWorkload(t, fmt.Sprintf("beta-%02d", i), "team-beta")
		}
		eventually(t, 60*time.Second, func() string {
			if n := admittedIn(t, "ml-serving"); n != 12 {
				return fmt.Sprintf("%d admitted, want 12", n)
			}
			return ""
		})
		createWorkload(t, "beta-13", "team-beta")
		eventually(t, 30*time.Second, func() string {
			w, err := kq.Workloads("ml-serving").Get(ctx, "beta-13", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			for _, c := range w.Status.Conditions {
				if c.Type == kueuev1beta2.WorkloadQuotaReserved && c.Status == metav1.ConditionFalse &&
					strings.Contains(c.Message, "insufficient unused quota for nvidia.com/gpu in flavor a100") {
					return ""
				}
			}
			return "beta-13 is not pending for want of quota"
		})
		require.Equal(t, 12, admittedIn(t, "ml-serving"))
		// kubectl get aq team-beta shows the admitted GPUs next to the share.
		eventually(t, 30*time.Second, func() string {
			out := testutil.Kubectl(t, cluster, "get", "aq", "team-beta")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 {
				return out
			}
			// OME's CRD prints the first budget's resource and flavor
			// before its amounts, and Degraded after Ready.
			header, at := "NAME ROLE PARENT NOMINAL ADMITTED READY AGE", 3
			if omeCRD {
				header, at = "NAME ROLE PARENT RESOURCE FLAVOR NOMINAL ADMITTED READY DEGRADED AGE", 5
			}
			f := strings.Fields(lines[1])
			if strings.Join(strings.Fields(lines[0]), " ") != header || len(f) < at+3 ||
				f[at] != "8" || f[at+1] != "12" || f[at+2] != "True" {
				return "kubectl get aq team-beta printed:\n" + out
			}
			return ""
		})
		beta, err := aqs.Get(ctx, "team-beta", metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, beta.Status.Budgets, 1)
		require.Equal(t, "12", beta.Status.Budgets[0].Admitted.String())
		require.Equal(t, "4", beta.Status.Budgets[0].Borrowed.String())
	})

	t.Run("a quiet resync writes nothing", func(t *testing.T) {
		before := managedVersions(t)
		writes := m1.metric(ctx, "ome_quota_backend_writes_total", `kind="ClusterQueue"`) +
			m1.metric(ctx, "ome_quota_backend_writes_total", `kind="LocalQueue"`) +
			m1.metric(ctx, "ome_quota_backend_writes_total", `kind="Cohort"`)
		applied := m1.metric(ctx, "ome_quota_backend_applied_total")
		// Two ticks, each a full pass.
		m1.waitTicks(ctx, 2)
		require.Equal(t, before, managedVersions(t), "a pass with nothing changed wrote a node or the manager's part of a Kueue object")
		require.Equal(t, writes, m1.metric(ctx, "ome_quota_backend_writes_total", `kind="ClusterQueue"`)+
			m1.metric(ctx, "ome_quota_backend_writes_total", `kind="LocalQueue"`)+
			m1.metric(ctx, "ome_quota_backend_writes_total", `kind="Cohort"`), "Kueue writes on a quiet cluster")
		require.Greater(t, m1.metric(ctx, "ome_quota_backend_applied_total"), applied, "applied_total must rise on every pass")
	})

	t.Run("losing a node lowers the mark and freezes a budget above it", func(t *testing.T) {
		for _, o := range []*v1beta1.AcceleratorQuota{
			aqtest.Cohort("big", "root").Budget("nvidia.com/gpu", "a100", "28").Obj(),
			aqtest.Team("big-team", "big").Budget("nvidia.com/gpu", "a100", "20").Obj(),
		} {
			_, err := aqs.Create(ctx, o, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		testutil.WaitMaterialized(t, cluster, "big", "big-team")
		before := managedVersions(t)
		require.Contains(t, before, "ClusterQueue/big-team")

		require.NoError(t, cluster.Kube.CoreV1().Nodes().Delete(ctx, "gpu-node-4", metav1.DeleteOptions{}))
		testutil.KubectlEquals(t, cluster, 30*time.Second, "google.com/tpu a100 0 0\nnvidia.com/gpu a100 24 24", "get", "aq", "root", "-o", capacityJSONPath)
		eventually(t, 30*time.Second, func() string {
			big, err := aqs.Get(ctx, "big", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			team, err := aqs.Get(ctx, "big-team", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			r, tr := condition(big, "Ready"), condition(team, "Ready")
			if r == nil || r.Reason != "CapacityExceeded" || tr == nil || tr.Reason != "Frozen" || !strings.Contains(tr.Message, "big") {
				return fmt.Sprintf("big: %+v; big-team: %+v", r, tr)
			}
			return ""
		})
		// ml-research (24) still fits.
		ml, err := aqs.Get(ctx, "ml-research", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "True", string(condition(ml, "Ready").Status))
		m1.waitTicks(ctx, 2)
		after := managedVersions(t)
		for _, k := range []string{"Cohort/big", "ClusterQueue/big-team", "LocalQueue/ml-serving/big-team"} {
			require.Equal(t, before[k], after[k], "%s of a frozen node was written", k)
		}
	})

	t.Run("the recorded log explains the freeze", func(t *testing.T) {
		checkFreezeExplained(t, eventLog)
	})

	t.Run("deleting a team sweeps its objects, even frozen", func(t *testing.T) {
		require.NoError(t, aqs.Delete(ctx, "big-team", metav1.DeleteOptions{}))
		eventually(t, 30*time.Second, func() string {
			_, err1 := kq.ClusterQueues().Get(ctx, "big-team", metav1.GetOptions{})
			_, err2 := kq.LocalQueues("ml-serving").Get(ctx, "big-team", metav1.GetOptions{})
			if !apierrors.IsNotFound(err1) || !apierrors.IsNotFound(err2) {
				return fmt.Sprintf("still there: %v / %v", err1, err2)
			}
			return ""
		})
		require.Greater(t, m1.metric(ctx, "ome_quota_backend_swept_total"), 0.0)
		require.NoError(t, aqs.Delete(ctx, "big", metav1.DeleteOptions{}))
	})

	t.Run("a foreign ClusterQueue named like a team is never touched", func(t *testing.T) {
		_, err := kq.ClusterQueues().Create(ctx, localcluster.ForeignClusterQueue("team-gamma"), metav1.CreateOptions{})
		require.NoError(t, err)
		// Kueue writes the ClusterQueue's status as it likes; what no one
		// but its owner writes is the rest, which the generation and the
		// labels say.
		created, err := kq.ClusterQueues().Get(ctx, "team-gamma", metav1.GetOptions{})
		require.NoError(t, err)
		_, err = aqs.Create(ctx, aqtest.Team("team-gamma", "root").Budget("nvidia.com/gpu", "a100", "2").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, 30*time.Second, func() string {
			g, err := aqs.Get(ctx, "team-gamma", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			c := condition(g, "Materialized")
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ObjectConflict" || !strings.Contains(c.Message, "ClusterQueue team-gamma") {
				return fmt.Sprintf("Materialized: %+v", c)
			}
			return ""
		})
		m1.waitTicks(ctx, 2)
		now, err := kq.ClusterQueues().Get(ctx, "team-gamma", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, created.Generation, now.Generation, "the foreign ClusterQueue's spec was modified")
		require.Equal(t, created.Labels, now.Labels, "the foreign ClusterQueue's labels were modified")
		require.NotContains(t, now.Labels, v1beta1.ManagedByLabel)
		for _, mf := range now.ManagedFields {
			require.NotEqual(t, "ome-quota-manager", mf.Manager, "the manager wrote to a foreign ClusterQueue")
		}
		// Nothing else of the node was written either: its LocalQueue would
		// charge its workloads to the foreign ClusterQueue.
		_, err = kq.LocalQueues("ml-serving").Get(ctx, "team-gamma", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "a LocalQueue was written for a node in conflict: %v", err)
		// Deleting the node leaves the foreign object alone too.
		require.NoError(t, aqs.Delete(ctx, "team-gamma", metav1.DeleteOptions{}))
		eventually(t, 30*time.Second, func() string {
			if _, err := aqs.Get(ctx, "team-gamma", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("team-gamma is still there: %v", err)
			}
			return ""
		})
		m1.waitTicks(ctx, 2)
		_, err = kq.ClusterQueues().Get(ctx, "team-gamma", metav1.GetOptions{})
		require.NoError(t, err, "the sweep deleted a ClusterQueue without our label")
	})

	t.Run("two replicas: only the leader writes, and a SIGKILL hands over", func(t *testing.T) {
		m2 := startManager(t, "m2")
		require.Equal(t, 1.0, m1.metric(ctx, "ome_quota_leader"))
		require.Equal(t, 0.0, m2.metric(ctx, "ome_quota_leader"))
		// A change while both run: written once, by the leader.
		_, err := aqs.Create(ctx, aqtest.Team("team-delta", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		testutil.WaitMaterialized(t, cluster, "team-delta")
		require.Equal(t, 0.0, m2.metric(ctx, "ome_quota_backend_writes_total"), "the follower wrote")

		killed := time.Now()
		m1.kill()
		// Written while nobody leads: must not be lost.
		_, err = aqs.Create(ctx, aqtest.Team("team-epsilon", "root").Budget("nvidia.com/gpu", "a100", "1").Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
		// The follower takes the Lease once it expires: within two lease
		// durations of the kill (one plus its retry period, and room for a
		// loaded machine; the time is logged, not asserted tighter).
		eventually(t, 2*leaseDuration, func() string {
			if m2.metric(ctx, "ome_quota_leader") != 1 {
				return "m2 is not the leader"
			}
			return ""
		})
		took := time.Since(killed)
		t.Logf("handover after SIGKILL took %s (lease duration %s)", took.Round(time.Millisecond), leaseDuration)
		testutil.WaitMaterialized(t, cluster, "team-epsilon", "team-delta")
		// Nothing duplicated: one ClusterQueue and one LocalQueue per team.
		v := managedKueueVersions(t)
		for _, team := range []string{"team-alpha", "team-beta", "team-delta", "team-epsilon"} {
			require.Contains(t, v, "ClusterQueue/"+team)
			require.Contains(t, v, "LocalQueue/ml-serving/"+team)
		}
		require.Len(t, v, 2*4+2, "managed objects: %v", v) // 4 teams x (CQ+LQ) + Cohorts root and ml-research

		t.Run("metrics", func(t *testing.T) {
			require.Equal(t, 8.0, m2.metric(ctx, "ome_quota_budget_nominal", `plane="workload"`, `quota="team-beta"`, `role="ClusterQueue"`, `resource="nvidia.com/gpu"`, `flavor="a100"`))
			require.Equal(t, 12.0, m2.metric(ctx, "ome_quota_budget_admitted", `quota="team-beta"`))
			require.Equal(t, 4.0, m2.metric(ctx, "ome_quota_budget_borrowed", `quota="team-beta"`))
			require.Equal(t, 24.0, m2.metric(ctx, "ome_quota_budget_nominal", `quota="ml-research"`, `role="Cohort"`))
			require.Equal(t, 24.0, m2.metric(ctx, "ome_quota_capacity_high_water_mark", `resource="nvidia.com/gpu"`, `flavor="a100"`))
			require.Equal(t, 24.0, m2.metric(ctx, "ome_quota_capacity_allocatable", `resource="nvidia.com/gpu"`, `flavor="a100"`))
			require.Greater(t, m2.metric(ctx, "ome_quota_backend_applied_total"), 0.0)
			require.Greater(t, m2.metric(ctx, "ome_quota_events_total", `kind="Node"`), 0.0)
		})

		t.Run("SIGTERM releases the lease", func(t *testing.T) {
			m3 := startManager(t, "m3", "--event-log="+eventLog)
			stopped := time.Now()
			m2.Stop()
			require.Equal(t, 0, m2.ExitCode(), "a SIGTERM must end the manager cleanly")
			eventually(t, leaseDuration, func() string {
				if m3.metric(ctx, "ome_quota_leader") != 1 {
					return "m3 is not the leader"
				}
				return ""
			})
			took := time.Since(stopped)
			t.Logf("handover after SIGTERM took %s (lease duration %s)", took.Round(time.Millisecond), leaseDuration)
			require.Less(t, took, leaseDuration, "a released lease is taken at once, not after it expires")

			t.Run("changing a role in place sweeps the old kind", func(t *testing.T) {
				delta, err := aqs.Get(ctx, "team-delta", metav1.GetOptions{})
				require.NoError(t, err)
				delta.Spec.Role = v1beta1.RoleCohort
				_, err = aqs.Update(ctx, delta, metav1.UpdateOptions{})
				require.NoError(t, err)
				eventually(t, 30*time.Second, func() string {
					_, cqErr := kq.ClusterQueues().Get(ctx, "team-delta", metav1.GetOptions{})
					_, lqErr := kq.LocalQueues("ml-serving").Get(ctx, "team-delta", metav1.GetOptions{})
					_, cohortErr := kq.Cohorts().Get(ctx, "team-delta", metav1.GetOptions{})
					if !apierrors.IsNotFound(cqErr) || !apierrors.IsNotFound(lqErr) || cohortErr != nil {
						return fmt.Sprintf("ClusterQueue: %v, LocalQueue: %v, Cohort: %v", cqErr, lqErr, cohortErr)
					}
					return ""
				})
			})

			t.Run("a namespace no longer enrolled loses its LocalQueues", func(t *testing.T) {
				require.NoError(t, cluster.EnsureNamespace(ctx, "ml-batch"))
				m3.Stop()
				// m3 continued m1's log after m1 was killed: no gap.
				checkContinuous(t, eventLog, 2)
				m4 := startManager(t, "m4", "--enrolled-namespaces=ml-serving,ml-batch")
				eventually(t, 30*time.Second, func() string {
					lqs, err := kq.LocalQueues("ml-batch").List(ctx, metav1.ListOptions{})
					if err != nil || len(lqs.Items) != 3 {
						return fmt.Sprintf("LocalQueues in ml-batch: %v %v", lqs, err)
					}
					return ""
				})
				m4.Stop()
				startManager(t, "m5", "--enrolled-namespaces=ml-serving")
				eventually(t, 30*time.Second, func() string {
					lqs, err := kq.LocalQueues("ml-batch").List(ctx, metav1.ListOptions{})
					if err != nil || len(lqs.Items) != 0 {
						return fmt.Sprintf("LocalQueues left in ml-batch: %d %v", len(lqs.Items), err)
					}
					return ""
				})
				lqs, err := kq.LocalQueues("ml-serving").List(ctx, metav1.ListOptions{})
				require.NoError(t, err)
				require.Len(t, lqs.Items, 3, "ml-serving keeps a LocalQueue per team (alpha, beta, epsilon)")
			})
		})
	})
}

func createWorkload(t *testing.T, name, queue string) {
	t.Helper()
	gpu := resource.MustParse("1")
	w := &kueuev1beta2.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml-serving", Name: name},
		Spec: kueuev1beta2.WorkloadSpec{
			QueueName: kueuev1beta2.LocalQueueName(queue),
			PodSets: []kueuev1beta2.PodSet{{Name: "main", Count: 1, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "worker", Image: "registry.invalid/pause", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{"nvidia.com/gpu": gpu}, Limits: corev1.ResourceList{"nvidia.com/gpu": gpu}}}},
			}}}},
		},
	}
	eventually(t, 30*time.Second, func() string {
		_, err := cluster.Kueue.KueueV1beta2().Workloads("ml-serving").Create(context.Background(), w, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err.Error()
		}
		return ""
	})
}

func admittedIn(t *testing.T, ns string) int {
	t.Helper()
	wl, err := cluster.Kueue.KueueV1beta2().Workloads(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	n := 0
	for _, w := range wl.Items {
		for _, c := range w.Status.Conditions {
			if c.Type == kueuev1beta2.WorkloadAdmitted && c.Status == metav1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// managedKueueVersions is managedVersions without the nodes.
func managedKueueVersions(t *testing.T) map[string]string {
	t.Helper()
	out := managedVersions(t)
	for k := range out {
		if strings.HasPrefix(k, "AcceleratorQuota/") {
			delete(out, k)
		}
	}
	return out
}

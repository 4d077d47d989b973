package impact

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil"
)

const ns = "ml-serving"

// classes are the WorkloadPriorityClasses the Jobs name, by name.
var classes = map[string]int32{"p0": 0, "p10": 10, "p20": 20}

var classesOnce sync.Once

func priorityClasses(t *testing.T) {
	classesOnce.Do(func() {
		for name, v := range classes {
			retry(t, "WorkloadPriorityClass "+name, func() error {
				_, err := cluster.Kueue.KueueV1beta2().WorkloadPriorityClasses().Create(context.Background(),
					&kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}, metav1.CreateOptions{})
				return err
			})
		}
	})
}

// retry retries a create until Kueue's webhooks answer it.
func retry(t *testing.T, what string, f func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() string {
		if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
			return what + ": " + err.Error()
		}
		return ""
	})
}

// pool makes a ResourceFlavor named name, whose nodes carry pool=name,
// and n such Nodes of gpus nvidia.com/gpu each: a pair of its own, which
// no other test's teams hold quota on.
func pool(t *testing.T, name string, n, gpus int) {
	t.Helper()
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.FakeNode{Name: fmt.Sprintf("%s-node-%d", name, i),
			Labels: map[string]string{"pool": name}, Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": fmt.Sprint(gpus)}})
		require.NoError(t, err)
	}
	retry(t, "ResourceFlavor "+name, func() error {
		_, err := cluster.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{"pool": name}}}, metav1.CreateOptions{})
		return err
	})
}

// submit creates a suspended Job asking for gpus of the flavor whose
// nodes carry selector, charged to queue at class, and waits until Kueue
// has its Workload.
func submit(t *testing.T, name, queue, class string, gpus int64, selector map[string]string) {
	t.Helper()
	gpu := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": class}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, NodeSelector: selector,
			Containers: []corev1.Container{{Name: "worker", Image: "registry.invalid/worker:1",
				Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu}}},
		}}},
	}
	retry(t, "Job "+name, func() error {
		_, err := cluster.Kube.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{})
		return err
	})
	testutil.Eventually(t, 30*time.Second, func() string {
		if _, ok := workloads(t)[name]; !ok {
			return "Kueue made no Workload for Job " + name
		}
		return ""
	})
}

// remove deletes Jobs and their Workloads (no garbage collector runs
// here), and waits until they are gone.
func remove(t *testing.T, jobs ...string) {
	t.Helper()
	ctx := context.Background()
	bg := metav1.DeletePropagationBackground
	for _, j := range jobs {
		err := cluster.Kube.BatchV1().Jobs(ns).Delete(ctx, j, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	gone := map[string]bool{}
	for _, j := range jobs {
		gone[j] = true
	}
	testutil.Eventually(t, 60*time.Second, func() string {
		list, err := cluster.Kueue.KueueV1beta2().Workloads(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		left := 0
		for _, w := range list.Items {
			if j := jobOf(&w); gone[j] {
				left++
				_ = cluster.Kueue.KueueV1beta2().Workloads(ns).Delete(ctx, w.Name, metav1.DeleteOptions{})
			}
		}
		if left > 0 {
			return fmt.Sprintf("%d Workloads of deleted Jobs are left", left)
		}
		return ""
	})
}

func jobOf(w *kueue.Workload) string {
	for _, o := range w.OwnerReferences {
		if o.Kind == "Job" {
			return o.Name
		}
	}
	return ""
}

// wl is what a test reads of one Job's Workload.
type wl struct {
	Name     string // the Workload's name
	UID      string
	Queue    string // the ClusterQueue that admitted it
	Admitted bool
	// Reason is the QuotaReserved condition's reason ("" before Kueue
	// looked at it); Evicting is an eviction under way.
	Reason    string
	Message   string
	Evicting  bool
	Preempted int32 // evictions by preemption so far
	Priority  int32
	GPUs      int64
	Reserved  time.Time
}

// workloads are the Workloads in ml-serving, by the name of their Job.
func workloads(t *testing.T) map[string]wl {
	t.Helper()
	list, err := cluster.Kueue.KueueV1beta2().Workloads(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string]wl{}
	for i := range list.Items {
		w := &list.Items[i]
		job := jobOf(w)
		if job == "" {
			continue
		}
		s := wl{Name: w.Name, UID: string(w.UID), Priority: ptr.Deref(w.Spec.Priority, 0)}
		if c := meta.FindStatusCondition(w.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil {
			s.Reason, s.Message = c.Reason, c.Message
			s.Admitted = c.Status == metav1.ConditionTrue
			if s.Admitted {
				s.Reserved = c.LastTransitionTime.Time
			}
		}
		s.Evicting = s.Admitted && meta.IsStatusConditionTrue(w.Status.Conditions, kueue.WorkloadEvicted)
		if a := w.Status.Admission; a != nil && s.Admitted {
			s.Queue = string(a.ClusterQueue)
			for _, psa := range a.PodSetAssignments {
				g := psa.ResourceUsage["nvidia.com/gpu"]
				s.GPUs += g.Value()
			}
		}
		if st := w.Status.SchedulingStats; st != nil {
			for _, e := range st.Evictions {
				if e.Reason == kueue.WorkloadEvictedByPreemption {
					s.Preempted += e.Count
				}
			}
		}
		out[job] = s
	}
	return out
}

// settle waits until Kueue is done with every Workload: each one admitted
// or pending with a reason, none being evicted, and two reads in a row
// the same. It returns the last read.
func settle(t *testing.T) map[string]wl {
	t.Helper()
	var last map[string]wl
	testutil.Eventually(t, 90*time.Second, func() string {
		cur := workloads(t)
		for job, s := range cur {
			// A preemptor waits for its targets to go, then is admitted.
			preempting := !s.Admitted && strings.Contains(s.Message, "Pending the preemption")
			if s.Reason == "" || s.Evicting || preempting || (s.Admitted && s.Queue == "") {
				last = nil
				return fmt.Sprintf("Kueue is not done with Job %s's Workload: %+v", job, s)
			}
		}
		if last == nil || !maps.EqualFunc(last, cur, func(a, b wl) bool { a.Message, b.Message = "", ""; return a == b }) {
			last = cur
			return "Kueue's Workloads changed since the last read"
		}
		return ""
	})
	return last
}

// apply runs kubectl apply on doc and returns its standard output and
// error (where kubectl prints the webhook's warnings).
func apply(t *testing.T, doc string, extra ...string) (string, string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "change.yaml")
	require.NoError(t, os.WriteFile(f, []byte(doc), 0o600))
	return cluster.KubectlOutput(context.Background(), append([]string{"apply", "-f", f}, extra...)...)
}

// waitNominal waits until ClusterQueue name holds nominal of gpu on
// flavor.
func waitNominal(t *testing.T, name, flavor string, nominal int64) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, func() string {
		cq, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, rg := range cq.Spec.ResourceGroups {
			for _, f := range rg.Flavors {
				for _, r := range f.Resources {
					if string(f.Name) == flavor && r.Name == "nvidia.com/gpu" && r.NominalQuota.Value() == nominal {
						return ""
					}
				}
			}
		}
		return fmt.Sprintf("ClusterQueue %s does not hold nominal %d of nvidia.com/gpu on %s yet", name, nominal, flavor)
	})
}

// setPreemption sets a ClusterQueue's preemption policy, as an admin
// would with kubectl patch: the manager owns none of these fields and
// leaves them.
func setPreemption(t *testing.T, name string, p kueue.ClusterQueuePreemption) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"preemption": p}})
	require.NoError(t, err)
	testutil.Eventually(t, 60*time.Second, func() string {
		_, err := cluster.Kubectl(context.Background(), "patch", "clusterqueue", name, "--type=merge", "-p", string(body))
		if err != nil {
			return err.Error()
		}
		return ""
	})
}

var (
	readerOnce sync.Once
	readerPath string
)

// readerKubeconfig is a kubeconfig of ServiceAccount ome/plan-reader, which
// may get, list and watch everything and write nothing: the plugin runs
// as it, so that a write would fail, and the audit log would name it.
func readerKubeconfig(t *testing.T) string {
	t.Helper()
	readerOnce.Do(func() {
		ctx := context.Background()
		_, err := cluster.Kube.CoreV1().ServiceAccounts("ome").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "plan-reader"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cluster.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "plan-reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		testutil.BindClusterRole(t, cluster, "plan-reader", "ome", "plan-reader")
		dir, err := os.MkdirTemp("", "ome-impact-reader-")
		require.NoError(t, err)
		readerPath = filepath.Join(dir, "kubeconfig")
		require.NoError(t, cluster.WriteServiceAccountKubeconfig(ctx, "ome", "plan-reader", readerPath))
	})
	t.Cleanup(func() {}) // the folder goes with the package's TMPDIR
	return readerPath
}

// planRun is one run of kubectl ome quota plan.
type planRun struct {
	code        int
	out, errOut string
	report      *quotactl.PlanReport
}

// plan runs kubectl ome quota plan in process as ome/plan-reader, with
// -o json unless the arguments ask for text.
func plan(t *testing.T, text bool, args ...string) planRun {
	t.Helper()
	args = append([]string{"quota", "plan", "--kubeconfig", readerKubeconfig(t)}, args...)
	if !text {
		args = append(args, "-o", "json")
	}
	var in, out, errOut bytes.Buffer
	code := quotactl.Run(args, genericiooptions.IOStreams{In: &in, Out: &out, ErrOut: &errOut})
	r := planRun{code: code, out: out.String(), errOut: errOut.String()}
	if !text && (code == 0 || code == 2 || code == 3) {
		r.report = &quotactl.PlanReport{}
		require.NoError(t, json.Unmarshal(out.Bytes(), r.report), "plan printed:\n%s\n%s", out.String(), errOut.String())
	}
	return r
}

// versions are the resourceVersions of every object a plan reads or that
// Kueue and the manager write, by kind/namespace/name.
func versions(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	add := func(kind string, items []metav1.Object) {
		for _, o := range items {
			out[kind+"/"+o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	aqs, err := cluster.AQs.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("AcceleratorQuota", objs(aqs.Items))
	kq := cluster.Kueue.KueueV1beta2()
	cqs, err := kq.ClusterQueues().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("ClusterQueue", objs(cqs.Items))
	cos, err := kq.Cohorts().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("Cohort", objs(cos.Items))
	lqs, err := kq.LocalQueues("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("LocalQueue", objs(lqs.Items))
	wls, err := kq.Workloads("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("Workload", objs(wls.Items))
	rfs, err := kq.ResourceFlavors().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("ResourceFlavor", objs(rfs.Items))
	jobs, err := cluster.Kube.BatchV1().Jobs("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("Job", objs(jobs.Items))
	nodes, err := cluster.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	add("Node", objs(nodes.Items))
	return out
}

func objs[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// audited counts the requests of user in the API server's audit log,
// which holds every request but reads.
func audited(t *testing.T, user string) int {
	t.Helper()
	f, err := os.Open(auditLog)
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			User struct {
				Username string `json:"username"`
			} `json:"user"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.User.Username == user {
			n++
		}
	}
	require.NoError(t, sc.Err())
	return n
}

// planWritesNothing runs plan with args and checks that it wrote nothing:
// the audit log, which holds every request but reads, holds none of the
// identity it runs as, and no resourceVersion moved across the run. Kueue
// and the manager write statuses of their own now and then, so the run
// starts once the objects have stood still for a while, and is measured
// again (at most three times) when someone else wrote meanwhile.
func planWritesNothing(t *testing.T, args ...string) planRun {
	t.Helper()
	const reader = "system:serviceaccount:ome:plan-reader"
	for attempt := 1; ; attempt++ {
		before := quiet(t)
		audits := audited(t, reader)
		r := plan(t, false, args...)
		after := versions(t)
		require.Equal(t, audits, audited(t, reader), "the plan made a request that is not a read")
		if maps.Equal(before, after) {
			require.NotEmpty(t, before)
			return r
		}
		var moved []string
		for k, v := range after {
			if before[k] != v {
				moved = append(moved, k)
			}
		}
		require.Less(t, attempt, 3, "objects changed while the plan ran, in three runs: %v", moved)
		t.Logf("%v changed while the plan ran, not by the plan: measuring again", moved)
	}
}

// quiet waits until no object's resourceVersion has moved over four reads
// in a row, and returns them.
func quiet(t *testing.T) map[string]string {
	t.Helper()
	var last map[string]string
	still := 0
	testutil.Eventually(t, 60*time.Second, func() string {
		cur := versions(t)
		if maps.Equal(last, cur) {
			still++
		} else {
			still = 0
		}
		last = cur
		if still < 3 {
			return "objects still change"
		}
		return ""
	})
	return last
}

// sortedJobs are the names of the jobs that satisfy keep, sorted.
func sortedJobs(ws map[string]wl, keep func(string, wl) bool) []string {
	var out []string
	for _, j := range slices.Sorted(maps.Keys(ws)) {
		if keep(j, ws[j]) {
			out = append(out, j)
		}
	}
	return out
}

// jobOfWorkload maps a Workload's name back to its Job's.
func jobOfWorkload(ws map[string]wl, name string) string {
	for j, s := range ws {
		if s.Name == name {
			return j
		}
	}
	return "?" + name
}

// normalize replaces what changes from run to run in a plan's text, with
// text of the same width: the times of admission, and the suffixes Kueue
// generates for Workload names.
func normalize(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		fields := strings.Fields(line)
		for _, f := range fields {
			if _, err := time.Parse(time.RFC3339, f); err == nil && len(f) == len("2006-01-02T15:04:05Z") {
				line = strings.Replace(line, f, "2006-01-02T15:04:05Z", 1)
			}
		}
		out = append(out, line)
	}
	return suffixRE.ReplaceAllString(strings.Join(out, "\n"), "$1-xxxxx")
}

// suffixRE matches the hash Kueue appends to a Job's Workload's name.
var suffixRE = regexp.MustCompile(`\b(job-[a-z0-9-]+?)-[0-9a-f]{5}\b`)

// waitUsage waits until each ClusterQueue's status reports the GPUs of
// flavor that its admitted Workloads use: what the manager's state, and
// so the plan, read as a team's admitted usage.
func waitUsage(t *testing.T, flavor string, ws map[string]wl, queues ...string) {
	t.Helper()
	want := map[string]int64{}
	for _, q := range queues {
		want[q] = 0
	}
	for _, s := range ws {
		if _, ok := want[s.Queue]; ok && s.Admitted {
			want[s.Queue] += s.GPUs
		}
	}
	testutil.Eventually(t, 60*time.Second, func() string {
		for q, n := range want {
			cq, err := cluster.Kueue.KueueV1beta2().ClusterQueues().Get(context.Background(), q, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			var got int64
			for _, f := range cq.Status.FlavorsUsage {
				for _, r := range f.Resources {
					if string(f.Name) == flavor && r.Name == "nvidia.com/gpu" {
						got = r.Total.Value()
					}
				}
			}
			if got != n {
				return fmt.Sprintf("ClusterQueue %s reports %d nvidia.com/gpu of %s in use, its Workloads %d", q, got, flavor, n)
			}
		}
		return ""
	})
}

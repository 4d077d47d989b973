package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/store"
	"ome.io/quota-manager/test/localcluster"
)

// auditPolicy logs every request but reads, so that the audit log lists
// the writes of each client by user agent.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: Metadata
`

// replayCmd runs "ome-quota-manager replay" and returns its standard output.
func replayCmd(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(cluster.ManagerBin, append([]string{"replay"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "replay %v: %s", args, stderr.String())
	return string(out)
}

// replayJSON runs replay with -o json and decodes its items into v.
func replayJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	var rep struct {
		APIVersion string          `json:"apiVersion"`
		Items      json.RawMessage `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(replayCmd(t, append(args, "-o", "json")...)), &rep))
	require.Equal(t, "replay.ome.io/v1alpha1", rep.APIVersion)
	require.NoError(t, json.Unmarshal(rep.Items, v))
}

// transition is one entry of replay's timeline, as -o json prints it.
type transition struct {
	Seq   uint64 `json:"seq"`
	Node  string `json:"node"`
	To    string `json:"to"`
	Cause string `json:"cause"`
}

// replayTimeline is the timeline of the log in dir.
func replayTimeline(t *testing.T, dir string) []transition {
	t.Helper()
	var timeline []transition
	replayJSON(t, &timeline, dir)
	return timeline
}

// checkFreezeExplained replays the log that the manager is recording and
// checks that it explains big-team's freeze by the Node deletion, and that
// its objects are the ones in the API server.
func checkFreezeExplained(t *testing.T, dir string) {
	timeline := replayTimeline(t, dir)
	var at uint64
	for _, e := range timeline {
		if e.Node == "big" && e.To == "CapacityExceeded" {
			at = e.Seq
			require.Contains(t, e.Cause, "Node gpu-node-4 deleted")
		}
	}
	require.NotZero(t, at, "the timeline has no transition of big to CapacityExceeded: %+v", timeline)

	why := replayCmd(t, dir, "--why", "big-team")
	for _, want := range []string{
		fmt.Sprintf("big-team is Frozen since #%d", at),
		fmt.Sprintf("big is CapacityExceeded since #%d", at),
		"the high-water mark of nvidia.com/gpu@a100 fell from 32 to 24",
		"Node gpu-node-4 deleted",
	} {
		require.Contains(t, why, want, "replay --why big-team")
	}
	before := replayCmd(t, dir, "--at", strconv.FormatUint(at-1, 10), "--state")
	after := replayCmd(t, dir, "--at", strconv.FormatUint(at, 10), "--state")
	require.Regexp(t, `quota big gen=\d+ phase=Ready`, before)
	require.Regexp(t, `quota big gen=\d+ phase=CapacityExceeded`, after)
	require.Regexp(t, `quota big-team gen=\d+ phase=Frozen`, after)

	// The objects a replay says the manager leaves are the ones it wrote,
	// for the held big-team too.
	require.Contains(t, checkObjects(t, dir), "ClusterQueue/big-team", "the held team's objects are part of what the manager leaves")
}

// checkObjects compares the Kueue objects that "replay DIR --objects"
// says the manager leaves with the managed objects in the API server:
// every field the projector sets is in the stored object, and no managed
// object is missing or extra. It returns the objects' keys.
func checkObjects(t *testing.T, dir string) []string {
	t.Helper()
	var objs struct {
		Cohorts       []map[string]any `json:"cohorts"`
		ClusterQueues []map[string]any `json:"clusterQueues"`
		LocalQueues   []map[string]any `json:"localQueues"`
	}
	replayJSON(t, &objs, dir, "--objects")
	ctx := context.Background()
	kq := cluster.Kueue.KueueV1beta2()
	sel := metav1.ListOptions{LabelSelector: v1beta1.ManagedByLabel + "=" + v1beta1.ManagedByValue}
	live := map[string]any{}
	cohorts, err := kq.Cohorts().List(ctx, sel)
	require.NoError(t, err)
	for _, o := range cohorts.Items {
		live["Cohort/"+o.Name] = o
	}
	cqs, err := kq.ClusterQueues().List(ctx, sel)
	require.NoError(t, err)
	for _, o := range cqs.Items {
		live["ClusterQueue/"+o.Name] = o
	}
	lqs, err := kq.LocalQueues("").List(ctx, sel)
	require.NoError(t, err)
	for _, o := range lqs.Items {
		live["LocalQueue/"+o.Namespace+"/"+o.Name] = o
	}
	replayed := map[string]map[string]any{}
	for kind, list := range map[string][]map[string]any{"Cohort": objs.Cohorts, "ClusterQueue": objs.ClusterQueues, "LocalQueue": objs.LocalQueues} {
		for _, o := range list {
			md := o["metadata"].(map[string]any)
			key := kind + "/" + md["name"].(string)
			if ns, ok := md["namespace"].(string); ok {
				key = kind + "/" + ns + "/" + md["name"].(string)
			}
			replayed[key] = o
		}
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(live)), slices.Collect(maps.Keys(replayed)))
	for key, want := range replayed {
		b, err := json.Marshal(live[key])
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(b, &got))
		delete(want, "status")
		if path := subset(want, got, key); path != "" {
			t.Errorf("replay --objects and the API server differ: %s", path)
		}
	}
	return slices.Sorted(maps.Keys(replayed))
}

// checkStatuses compares the statuses that "replay DIR --state" computes
// from the end of the log with the AcceleratorQuotas' statuses in the API
// server, which the manager that wrote the log (stopped by now, its
// statuses caught up with its state: see statusesDiffer) wrote last: every
// node, every condition (Materialized included) with its
// lastTransitionTime, and every figure. Root's observedAt stamps are left
// out: a tick may refresh them in the logged state a moment before the
// stop, and the status write that carries them is then never made. It
// returns the nodes compared.
func checkStatuses(t *testing.T, dir string) []string {
	t.Helper()
	names, diff := statusesDiffer(t, dir, "observedAt")
	require.Empty(t, diff)
	return names
}

// statusesDiffer returns the nodes of the replay's --state and how their
// statuses differ from the API server's, "" when they do not. Equal, the
// two encode to the same bytes: stamps included, as the state dates the
// conditions from the log's events. Capacity fields named in leave are
// left out.
func statusesDiffer(t *testing.T, dir string, leave ...string) ([]string, string) {
	t.Helper()
	var view struct {
		Leader   string                    `json:"leader"`
		Statuses map[string]map[string]any `json:"statuses"`
	}
	replayJSON(t, &view, dir, "--state")
	list, err := aqs.List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	live := map[string]map[string]any{}
	for _, aq := range list.Items {
		b, err := json.Marshal(aq.Status)
		require.NoError(t, err)
		var st map[string]any
		require.NoError(t, json.Unmarshal(b, &st))
		live[aq.Name] = st
	}
	for _, sts := range []map[string]map[string]any{live, view.Statuses} {
		for _, st := range sts {
			items, _ := st["capacity"].([]any)
			for _, it := range items {
				for _, f := range leave {
					delete(it.(map[string]any), f)
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(view.Statuses)), cmp.Diff(view.Statuses, live)
}

// subset returns "" when every field of want is in got with the same
// value, else the path of the first difference.
func subset(want, got any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", path, got)
		}
		for k, v := range w {
			if p := subset(v, g[k], path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %v, got %v", path, w, got)
		}
		for i := range w {
			if p := subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Sprintf("%s: want %v, got %v", path, want, got)
		}
	}
	return ""
}

// checkContinuous reads a log written by several starts of the manager in
// one folder: every event is there, numbered with no gap, and each start
// left its marker.
func checkContinuous(t *testing.T, dir string, starts int) {
	var prev uint64
	var markers []string
	rep, err := store.Read(dir, 0, func(ev events.Event) error {
		if prev != 0 && ev.Seq != prev+1 {
			return fmt.Errorf("event %d follows %d", ev.Seq, prev)
		}
		prev = ev.Seq
		if ev.Kind == events.KindStart {
			markers = append(markers, ev.Start.Identity)
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.Equal(t, uint64(1), rep.First)
	require.Len(t, markers, starts, "start markers: %v", markers)
}

// ensureGuideCluster applies the guide's A100 Nodes gpu-node-1 to
// gpu-node-n and creates the ResourceFlavor a100 unless it exists.
func ensureGuideCluster(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		_, err := localcluster.ApplyNode(ctx, cluster.Kube, localcluster.GPUNode(fmt.Sprintf("gpu-node-%d", i), 8))
		require.NoError(t, err)
	}
	if _, err := cluster.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestRecord records the cluster with "ome-quota-manager record" while the
// tree exists, replays what it wrote, and reads the API server's audit log
// for any write the recorder made.
func TestRecord(t *testing.T) {
	ctx := context.Background()
	// The guide's cluster and tree, if TestGuide has not left them (run alone).
	ensureGuideCluster(t, 3)
	for _, o := range []*v1beta1.AcceleratorQuota{
		aqtest.Root().Obj(),
		aqtest.Cohort("ml-research", "root").Budget("nvidia.com/gpu", "a100", "24").Obj(),
		aqtest.Team("team-beta", "ml-research").Budget("nvidia.com/gpu", "a100", "8").Borrow("4").Obj(),
	} {
		if _, err := aqs.Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "recorded")
	logFile := filepath.Join(t.TempDir(), "record.log")
	f, err := os.Create(logFile)
	require.NoError(t, err)
	cmd := exec.Command(cluster.ManagerBin, "record", "--kubeconfig="+cluster.Kubeconfig, "--event-log="+dir,
		"--enrolled-namespaces=ml-serving", "--capacity-report-interval=1s")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("--- record's log ---\n%s", b)
		}
	})
	// Recorded: team-beta's arrival and a measurement of the four nodes.
	eventually(t, 30*time.Second, func() string {
		out, err := exec.Command(cluster.ManagerBin, "replay", dir, "--state").CombinedOutput()
		if err != nil || !regexp.MustCompile(`quota team-beta gen=\d+ phase=Ready`).Match(out) ||
			!regexp.MustCompile(`entry nvidia.com/gpu@a100 allocatable=\d+ mark=\d+`).Match(out) {
			return fmt.Sprintf("the recorded log does not hold team-beta Ready and a measurement yet: %v\n%s", err, out)
		}
		return ""
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "record did not exit cleanly")
	f.Close()

	tl := replayCmd(t, dir)
	require.Contains(t, tl, "team-beta")
	require.Contains(t, tl, "Ready")

	// The audit log lists every write; none came from the recorder, while
	// others' writes (this test's own, at least) are there, so the log does
	// record writes.
	af, err := os.Open(auditLog)
	require.NoError(t, err)
	defer af.Close()
	sc := bufio.NewScanner(af)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var writes int
	for sc.Scan() {
		var ev struct {
			Verb       string `json:"verb"`
			UserAgent  string `json:"userAgent"`
			RequestURI string `json:"requestURI"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		if strings.HasPrefix(ev.UserAgent, "ome-quota-manager-record") {
			t.Errorf("the recorder wrote: %s %s", ev.Verb, ev.RequestURI)
		}
		writes++
	}
	require.NoError(t, sc.Err())
	require.Greater(t, writes, 0, "the audit log holds no write at all: is auditing on?")
}

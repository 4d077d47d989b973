package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

// usageLog is the guide's tree where team-beta's ClusterQueue reports 12
// GPUs admitted at event 13, then 4 at event 14.
func usageLog(t *testing.T) string {
	t.Helper()
	cfg := events.DefaultConfig()
	cfg.EnrolledNamespaces = []string{"ml-serving"}
	var evs []events.Event
	add := func(ev events.Event) { evs = append(evs, ev) }
	add(events.ConfigChanged(t0, cfg))
	add(events.FlavorUpserted(t0, &events.Flavor{Name: "a100", NodeLabels: map[string]string{"gpu.product": "a100"}}))
	for i := 1; i <= 4; i++ {
		add(events.NodeUpserted(t0, eightGPUNode("gpu-node-"+string(rune('0'+i)))))
	}
	add(events.Synced(t0.Add(time.Second)))
	add(events.Tick(t0.Add(time.Second)))
	for _, aq := range append([]*v1beta1.AcceleratorQuota{aqtest.Root().Obj()}, aqtest.GuideTree()...) {
		add(events.QuotaUpserted(t0.Add(2*time.Second), quota(aq)))
	}
	usage := func(n string) events.Event {
		return events.QueueUpserted(t0.Add(time.Minute), &events.Queue{Name: "team-beta", Managed: true, Usage: []events.Usage{
			{Resource: "nvidia.com/gpu", Flavor: "a100", Admitted: resource.MustParse(n)}}})
	}
	add(usage("12"))
	add(usage("4"))
	return writeLog(t, evs)
}

const lowerBeta = `apiVersion: ome.io/v1beta1
kind: AcceleratorQuota
metadata:
  name: team-beta
spec:
  role: ClusterQueue
  parentRef:
    name: ml-research
  budgets:
    - resourceName: nvidia.com/gpu
      resourceFlavor: a100
      nominal: "4"
      borrowingLimit: "2"
`

// TestPlanAtAPastMoment lowers team-beta to 4 (borrowing 2) at two
// moments of a log: while its ClusterQueue reported 12 GPUs admitted the
// change leaves 6 above the budget; once it reported 4, nothing.
func TestPlanAtAPastMoment(t *testing.T) {
	dir := usageLog(t)
	file := filepath.Join(t.TempDir(), "lower-beta.yaml")
	if err := os.WriteFile(file, []byte(lowerBeta), 0o600); err != nil {
		t.Fatal(err)
	}
	text := squash(run(t, dir, "--at", "13", "-f", file))
	for _, want := range []string{
		"At event 13:",
		"team-beta Updated Written nvidia.com/gpu@a100 8 -> 4 4 -> 2 - 12 6",
		"Admitted usage left above budget (Kueue does not evict it):",
		"team-beta: admitted nvidia.com/gpu on a100 is 12, 6 above its budget of 6 (nominal 4 + borrowingLimit 2)",
		"Note: the Workloads are not known",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan at event 13 lacks %q:\n%s", want, text)
		}
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{dir, "-f", file, "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rep struct {
		Items Plan `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Items.Seq != 14 || len(rep.Items.Impact.AboveBudget) != 0 || len(rep.Items.Impact.Nodes) != 1 {
		t.Errorf("at the end (event 14, 4 admitted) want one node changed and nothing above budget, got %+v", rep.Items)
	}
	// A denied write is named with its file and line, and changes nothing.
	raise := strings.ReplaceAll(strings.ReplaceAll(lowerBeta, `"4"`, `"20"`), `borrowingLimit: "2"`, `borrowingLimit: "0"`)
	if err := os.WriteFile(file, []byte(raise), 0o600); err != nil {
		t.Fatal(err)
	}
	text = run(t, dir, "--at", "13", "-f", file)
	if !strings.Contains(text, "denied team-beta ("+file+":1): ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 36") {
		t.Errorf("want the denial:\n%s", text)
	}
}

func TestPlanIsAViewOfItsOwn(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"dir", "--state", "--delete", "team-beta"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "separate views") {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
}

// squash collapses runs of spaces, as column widths vary.
func squash(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

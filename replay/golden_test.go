package replay

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"ome.io/quota-manager/test/testutil/golden"
)

// guideLogDir is a log recorded by the end-to-end TestAuditTrail (test/e2e),
// with the webhook on, as it wrote it: the guide's tree applied,
// team-alpha lowered to 12 and raised to 16 again, its raise to 20 denied,
// a Cohort big of 28 with big-team of 20, the Node gpu-node-4 deleted (big
// CapacityExceeded, big-team Frozen), big lowered to 24 (both Ready), then
// the webhook turned off (the guide's way out of a wedge) and team-beta
// lowered to 6 unjudged. Made
// with OME_E2E_SAVE_EVENT_LOG=$PWD/replay/testdata/guide hack/test.sh
// ./test/e2e -run TestAuditTrail; that test compares the replay's
// --objects with the API server's objects at the end of the same run.
const guideLogDir = "testdata/guide"

// TestGolden replays the recorded log and compares each view with its
// golden file, after checking what the views must say whatever the bytes.
func TestGolden(t *testing.T) {
	res, err := Run(guideLogDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Problems) > 0 {
		t.Fatalf("the recorded log is damaged: %v", res.Problems)
	}
	var frozeAt, repairedAt uint64
	for _, e := range res.Timeline {
		switch {
		case e.Node == "big" && e.To == "CapacityExceeded" && frozeAt == 0:
			frozeAt = e.Seq
			if !strings.Contains(e.Cause, "Node gpu-node-4 deleted") {
				t.Errorf("big froze at #%d for %q, want the deletion of gpu-node-4", e.Seq, e.Cause)
			}
		case e.Node == "big-team" && e.To == "Ready" && frozeAt != 0:
			repairedAt = e.Seq
		}
	}
	if frozeAt == 0 || repairedAt == 0 {
		t.Fatalf("the log holds no freeze of big (#%d) or no repair after it (#%d)", frozeAt, repairedAt)
	}
	before, at := strconv.FormatUint(frozeAt-1, 10), strconv.FormatUint(frozeAt, 10)
	views := []struct {
		golden string
		args   []string
		// must are substrings the view must hold, golden or not.
		must []string
	}{
		{"timeline.txt", nil, []string{"Node gpu-node-4 deleted"}},
		{"timeline.json", []string{"-o", "json"}, nil},
		{"why-big-team.txt", []string{"--why", "big-team", "--at", at}, []string{
			"big-team is Frozen since #" + at, "Node gpu-node-4 deleted", "the high-water mark of nvidia.com/gpu@a100 fell from 32 to 24"}},
		{"why-big-team.json", []string{"--why", "big-team", "--at", at, "-o", "json"}, nil},
		{"state-before.txt", []string{"--at", before, "--state"}, []string{"quota big gen=1 phase=Ready"}},
		{"state-after.txt", []string{"--at", at, "--state"}, []string{"quota big gen=1 phase=CapacityExceeded", "phase=Frozen",
			"status big-team observedGeneration=1\n  Ready=False Frozen", "Materialized=False Frozen"}},
		{"state.txt", []string{"--state"}, []string{"leader trail\n", "statuses as the leader trail writes them",
			"status team-alpha observedGeneration=3\n  Ready=True Admitted: node is a valid member of the quota tree (since 20", "  Degraded=False Admitted: no invariant violated (since 20", "  Materialized=True Admitted"}},
		{"state.json", []string{"--state", "-o", "json"}, []string{`"leader": "trail"`, `"type": "Materialized"`}},
		{"objects-before.yaml", []string{"--at", before, "--objects"}, []string{"name: big-team"}},
		{"objects-after.yaml", []string{"--at", at, "--objects"}, []string{"name: big-team"}},
		{"objects.json", []string{"--objects", "-o", "json"}, nil},
		{"history-team-alpha.txt", []string{"--node", "team-alpha", "--history"}, []string{
			"UPDATE request denied by trail: ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28 [nvidia.com/gpu@a100 nominal 16 -> 20]",
			// testdata/guide was recorded before schema version 5: its verdicts
			// carry no object uid nor base, so none can be matched with the
			// write it claims: each is unverified and names no author, and
			// the write after it is not flagged as unjudged.
			"UPDATE admitted by trail, unverified (no object uid or version recorded) [nvidia.com/gpu@a100 nominal 12 -> 16]\n" +
				"28   2026-11-30T09:09:03Z         AcceleratorQuota team-alpha written (generation 3) [nvidia.com/gpu@a100 nominal 12 -> 16]\n"}},
		{"history-team-alpha.json", []string{"--node", "team-alpha", "--history", "-o", "json"}, nil},
		{"history-team-beta.txt", []string{"--node", "team-beta", "--history"}, []string{
			"[nvidia.com/gpu@a100 nominal 8 -> 6] (no admitted verdict in the logs read matches it: written while the webhook was off"}},
		{"node-big.txt", []string{"--node", "big"}, []string{"the applier brought big's Kueue objects in place",
			"the applier holds big's Kueue objects as they are", "Ready -> CapacityExceeded"}},
		{"history-big.txt", []string{"--node", "big", "--history"}, []string{"big Ready -> CapacityExceeded", "big-team Frozen -> Ready"}},
		{"whatif-hysteresis-30.txt", []string{"--capacity-hysteresis-percent", "30"}, []string{"CapacityExceeded"}},
	}
	for _, v := range views {
		t.Run(v.golden, func(t *testing.T) {
			got := run(t, append([]string{guideLogDir}, v.args...)...)
			for _, m := range v.must {
				if !strings.Contains(got, m) {
					t.Errorf("replay %v does not say %q:\n%s", v.args, m, got)
				}
			}
			if d := golden.Diff(t, filepath.Join("golden", v.golden), got); d != "" {
				t.Errorf("replay %v: %s", v.args, d)
			}
		})
	}
}

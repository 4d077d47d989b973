package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
)

// usageState is a StateReader over the guide's cluster where Kueue has
// admitted 12 GPUs for team-beta (8, borrowing up to 4).
type usageState struct{ s *state.State }

func (u usageState) Observe(f func(*state.State)) <-chan struct{} {
	f(u.s)
	ch := make(chan struct{})
	close(ch)
	return ch
}
func (usageState) Synced() bool                                       { return true }
func (usageState) NotReady() error                                    { return nil }
func (usageState) OnVerdict(context.Context, string, *events.Verdict) {}

func guideWithUsage(t *testing.T) usageState {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	s := state.New()
	evs := []events.Event{events.ConfigChanged(t0, events.DefaultConfig()), events.FlavorUpserted(t0, &events.Flavor{Name: "a100"})}
	evs = append(evs, events.QuotaUpserted(t0, &events.Quota{Name: v1beta1.RootName, Spec: aqtest.Root().Obj().Spec}))
	for _, aq := range aqtest.GuideTree() {
		evs = append(evs, events.QuotaUpserted(t0, &events.Quota{Name: aq.Name, Spec: aq.Spec}))
	}
	evs = append(evs, events.QueueUpserted(t0, &events.Queue{Name: "team-beta", Managed: true, Usage: []events.Usage{
		{Resource: gpu, Flavor: "a100", Admitted: resource.MustParse("12"), Borrowed: resource.MustParse("4")}}}))
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
		s.Apply(ev)
	}
	if u := s.TeamUsage("team-beta"); len(u) != 1 {
		t.Fatalf("the state holds no usage for team-beta: %v", u)
	}
	return usageState{s}
}

// TestUsageWarningNeverChangesAVerdict judges the same writes with and
// without the warning of a lowering below usage: every answer is the
// same but for the warnings, and only a lowering of team-beta below its
// 12 admitted GPUs gets one, a lowered borrowingLimit too, which the
// webhook admits without judging.
func TestUsageWarningNeverChangesAVerdict(t *testing.T) {
	st := guideWithUsage(t)
	beta := aqtest.GuideTree()[2]
	with := func(nominal, borrow string) *v1beta1.AcceleratorQuota {
		w := aqtest.Team("team-beta", "ml-research").Budget(gpu, "a100", nominal)
		if borrow != "" {
			w = w.Borrow(borrow)
		}
		return w.Obj()
	}
	alpha := aqtest.GuideTree()[1]
	cases := map[string]struct {
		body []byte
		warn string // a substring of the one warning, or none
	}{
		"team-beta lowered to 4 (12 admitted, budget 8)": {
			body: reviewOf(t, admissionv1.Update, "team-beta", with("4", "4"), beta, false),
			warn: "team-beta: admitted nvidia.com/gpu on a100 is 12, 4 above its budget of 8 (nominal 4 + borrowingLimit 4). Kueue does not evict admitted Workloads",
		},
		"the same as a dry run": {
			body: reviewOf(t, admissionv1.Update, "team-beta", with("4", "4"), beta, true),
			warn: "4 above its budget of 8",
		},
		"team-beta's borrowing taken away": {
			body: reviewOf(t, admissionv1.Update, "team-beta", with("8", ""), beta, false),
			warn: "4 above its budget of 8 (nominal 8)",
		},
		"team-beta's borrowing lowered (no rule reads it)": {
			body: reviewOf(t, admissionv1.Update, "team-beta", with("8", "2"), beta, false),
			warn: "2 above its budget of 10 (nominal 8 + borrowingLimit 2)",
		},
		"team-beta lowered, still holding its 12":         {body: reviewOf(t, admissionv1.Update, "team-beta", with("6", "6"), beta, false)},
		"team-beta's borrowing raised (no rule reads it)": {body: reviewOf(t, admissionv1.Update, "team-beta", with("8", "6"), beta, false)},
		"team-beta raised past ml-research (denied)": {
			body: reviewOf(t, admissionv1.Update, "team-beta", with("12", "4"), beta, false),
		},
		"team-alpha lowered (nothing admitted)": {
			body: reviewOf(t, admissionv1.Update, "team-alpha", aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "2").Obj(), alpha, false),
		},
		"team-beta deleted":  {body: reviewOf(t, admissionv1.Delete, "team-beta", nil, beta, false)},
		"a new team":         {body: reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Budget(gpu, "a100", "1").Obj(), nil, false)},
		"a budget too large": {body: reviewOf(t, admissionv1.Create, "team-x", aqtest.Team("team-x", "root").Budget(gpu, "a100", "40").Obj(), nil, false)},
	}
	warned := 0
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plain := guideReviewer()
			warning := guideReviewer()
			warning.Warn = usageWarnings(st)
			a, b := plain.Review(context.Background(), tc.body), warning.Review(context.Background(), tc.body)
			ra, rb := a.Review.Response, b.Review.Response
			if ra.Allowed != rb.Allowed || a.HTTPStatus != b.HTTPStatus || !cmp.Equal(ra.Result, rb.Result) {
				t.Fatalf("the verdict changed with the warning: %+v, then %+v", ra, rb)
			}
			extra := rb.Warnings[len(ra.Warnings):]
			if diff := cmp.Diff(ra.Warnings, rb.Warnings[:len(ra.Warnings)], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("the rule book's own warnings changed: %s", diff)
			}
			switch {
			case tc.warn == "" && len(extra) > 0:
				t.Errorf("want no warning of usage, got %q", extra)
			case tc.warn != "" && (len(extra) != 1 || !strings.Contains(extra[0], tc.warn)):
				t.Errorf("want one warning containing %q, got %q", tc.warn, extra)
			case tc.warn != "":
				warned++
			}
		})
	}
	if warned != 4 {
		t.Errorf("%d lowerings were warned, want 4", warned)
	}
}

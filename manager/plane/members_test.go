package plane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
)

// watched is an informer whose store the test fills: synced or not, as
// the test says. Only what MemberSource reads of it is implemented.
type watched struct {
	cache.SharedIndexInformer
	store  cache.Store
	synced bool
}

func (w *watched) HasSynced() bool       { return w.synced }
func (w *watched) GetStore() cache.Store { return w.store }

func newWatched() *watched {
	return &watched{store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
}

// TestMemberSourceReads: what a member's source publishes of what its two
// watches hold. Nothing before both have synced; a member whose watch
// fails, or without root, does not answer (with why); once root is there,
// its flavors, root's capacity, the plane's copies of its origin (sorted,
// with the version, generation and budgets each holds, materialized only
// for the copy's current generation) and the admitted usage of the
// ClusterQueue copies. A read that finds the same publishes nothing; a
// change in usage publishes again.
func TestMemberSourceReads(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	aqs, flavors := newWatched(), newWatched()
	var published []events.Event
	m := &MemberSource{Name: "east", Origin: "fleet", Now: func() time.Time { return t0 },
		Publish: func(ev events.Event) { published = append(published, ev) },
		aqs:     aqs, flavors: flavors, failing: map[string]error{}}
	ctx := context.Background()

	m.publish(ctx)
	if len(published) != 0 || m.Reads() != 1 {
		t.Fatalf("before the watches synced: %d reads, published %+v", m.Reads(), published)
	}
	aqs.synced, flavors.synced = true, true

	m.publish(ctx)
	want := events.MemberLost(t0, "east", "the member has no root AcceleratorQuota: its workload-mode manager has not created it; its shares are kept until it does")
	if diff := cmp.Diff([]events.Event{want}, published); diff != "" {
		t.Fatalf("without root (-want +got):\n%s", diff)
	}

	root := aqtest.Root().Obj()
	root.Status.Capacity = []v1beta1.CapacityStatus{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100",
		Allocatable: resource.MustParse("16"), HighWaterMark: resource.MustParse("16")}}
	// Copies of the plane's origin: team-b (a ClusterQueue, materialized
	// at its generation 3, made from the plane's generation 7) and the
	// Cohort group; a team of the member's own, and a copy of another
	// plane, which the source leaves out.
	teamB := aqtest.Team("team-b", "group").Budget("nvidia.com/gpu", "a100", "6").Obj()
	teamB.Labels = map[string]string{v1beta1.OriginLabel: "fleet"}
	teamB.Annotations = map[string]string{v1beta1.SourceGenerationAnnotation: "7"}
	teamB.Generation, teamB.ResourceVersion = 3, "41"
	teamB.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionMaterialized, Status: metav1.ConditionTrue, ObservedGeneration: 3}}
	teamB.Status.Budgets = []v1beta1.BudgetStatus{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100",
		Admitted: resource.MustParse("4"), Reserved: resource.MustParse("5"), Borrowed: resource.MustParse("0")}}
	group := aqtest.Cohort("group", "root").Budget("nvidia.com/gpu", "a100", "10").Obj()
	group.Labels = map[string]string{v1beta1.OriginLabel: "fleet"}
	group.Annotations = map[string]string{v1beta1.SourceGenerationAnnotation: "2"}
	group.Generation, group.ResourceVersion = 1, "40"
	own := aqtest.Team("own", "root").Budget("nvidia.com/gpu", "a100", "2").Obj()
	other := aqtest.Team("team-x", "root").Budget("nvidia.com/gpu", "a100", "2").Obj()
	other.Labels = map[string]string{v1beta1.OriginLabel: "another"}
	for _, o := range []*v1beta1.AcceleratorQuota{root, teamB, group, own, other} {
		if err := aqs.store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"h100", "a100"} {
		if err := flavors.store.Add(&kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: f}}); err != nil {
			t.Fatal(err)
		}
	}
	m.publish(ctx)
	seen := events.MemberSeen(t0, "east", []string{"a100", "h100"}, []events.MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
		Allocatable: resource.MustParse("16"), HighWaterMark: resource.MustParse("16")}})
	seen.Member.Copies = []events.MemberCopy{
		{Node: "group", Version: "40", Applied: 2, Budgets: []events.CopyBudget{{Resource: "nvidia.com/gpu", Flavor: "a100", Nominal: resource.MustParse("10")}}},
		{Node: "team-b", Version: "41", Applied: 7, Materialized: 7, Budgets: []events.CopyBudget{{Resource: "nvidia.com/gpu", Flavor: "a100", Nominal: resource.MustParse("6")}}},
	}
	seen.Member.Usage = []events.MemberUsage{{Node: "team-b", Resource: "nvidia.com/gpu", Flavor: "a100",
		Admitted: resource.MustParse("4"), Reserved: resource.MustParse("5"), Borrowed: resource.MustParse("0")}}
	if diff := cmp.Diff([]events.Event{want, seen}, published, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Fatalf("with root, copies and flavors (-want +got):\n%s", diff)
	}

	m.publish(ctx)
	if len(published) != 2 || m.Reads() != 4 {
		t.Fatalf("a read that finds the same: %d reads, %d published, want 4 and 2", m.Reads(), len(published))
	}
	moved := teamB.DeepCopy()
	moved.Status.Budgets[0].Admitted = resource.MustParse("6")
	if err := aqs.store.Update(moved); err != nil {
		t.Fatal(err)
	}
	m.publish(ctx)
	if len(published) != 3 || published[2].Member.Usage[0].Admitted.String() != "6" {
		t.Fatalf("after team-b's admitted usage moved: %+v", published[2:])
	}

	// A watch that fails: the member does not answer, and says why.
	m.failing[watchedFlavors] = errors.New("connection refused")
	m.publish(ctx)
	lost := events.MemberLost(t0, "east", "watching the member's ResourceFlavors: connection refused")
	if diff := cmp.Diff(lost, published[len(published)-1]); diff != "" {
		t.Errorf("with a failing watch (-want +got):\n%s", diff)
	}
}

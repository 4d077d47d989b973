package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// cohortAt is Cohort name under root as stored at resourceVersion rv: its
// one budget's nominal is rv, so that the state shows which version of it
// it holds.
func cohortAt(t *testing.T, name string, rv uint64) unstructured.Unstructured {
	t.Helper()
	aq := &v1beta1.AcceleratorQuota{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.SchemeGroupVersion.String(), Kind: "AcceleratorQuota"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u-" + "name", ResourceVersion: strconv.FormatUint(rv, 10)},
		Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, ParentRef: &v1beta1.ParentReference{Name: v1beta1.RootName},
			Budgets: []v1beta1.Budget{{ResourceName: "r", ResourceFlavor: "f", Nominal: *resource.NewQuantity(int64(rv), resource.DecimalSI)}}},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(aq)
	if err != nil {
		t.Fatal(err)
	}
	return unstructured.Unstructured{Object: obj}
}

// history is what the API server stored of each name: its versions, a
// deletion as -1.
type history map[string][]struct{ rv, value int64 }

// holds reports whether st shows every name at least as new as its
// newest version up to progress, as State.Progress promises, and says
// which one it does not.
func (h history) holds(s *state.State) error {
	p := int64(s.Progress())
	tree := s.Tree()
	for name, versions := range h {
		value := int64(-1)
		if spec := tree[name]; spec != nil {
			value = spec.Budgets[0].Nominal.Value()
		}
		var due, shown int64 // the newest version up to progress; the newest with the state's value
		for _, v := range versions {
			if v.rv <= p {
				due = v.rv
			}
			if v.value == value {
				shown = v.rv
			}
		}
		if shown < due {
			return fmt.Errorf("progress is %d but the state holds %s as at version %d, not %d", p, name, shown, due)
		}
	}
	return nil
}

// TestRelistHoldsProgress: after a watch expires, client-go lists the
// AcceleratorQuotas again and delivers them in key order, not in the order
// of their versions. The state's progress must not run ahead of what it
// holds meanwhile: a reservation would be settled, or a write judged, on a
// tree that lacks a sibling's landed version. The informer here is
// client-go's own, on a list and watch that the test serves.
func TestRelistHoldsProgress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := history{
		"a": {{0, -1}, {3, 3}, {14, 14}, {25, 25}},
		"b": {{0, -1}, {6, 6}, {12, 12}, {20, 20}},
		"c": {{0, -1}, {9, 9}, {22, -1}},
		"d": {{0, -1}, {27, 27}},
	}
	lists := [][]unstructured.Unstructured{
		{cohortAt(t, "a", 3), cohortAt(t, "b", 6), cohortAt(t, "c", 9)},    // at 10
		{cohortAt(t, "a", 25), cohortAt(t, "b", 20), cohortAt(t, "d", 27)}, // at 30, in key order
	}
	listRVs := []string{"10", "30"}
	var mu sync.Mutex
	listed := 0
	list := func(_ context.Context, _ metav1.ListOptions) (*unstructured.UnstructuredList, error) {
		mu.Lock()
		defer mu.Unlock()
		i := min(listed, len(lists)-1)
		listed++
		ul := &unstructured.UnstructuredList{Items: slices.Clone(lists[i])}
		ul.SetResourceVersion(listRVs[i])
		return ul, nil
	}
	watches := make(chan *watch.RaceFreeFakeWatcher, 4)
	watchAQs := func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
			return nil, errors.New("no watch-list here")
		}
		w := watch.NewRaceFreeFake()
		watches <- w
		return w, nil
	}

	m := &Manager{metrics: metrics.New()}
	m.undecodable = &undecodable{m: m, objs: map[string]*skipped{}}
	st := state.New()
	var violation error
	changed := make(chan struct{}, 1)
	pub := publisherFunc(func(ev events.Event) {
		mu.Lock()
		defer mu.Unlock()
		ev.Seq = st.LastSeq() + 1
		st.Apply(ev)
		if err := h.holds(st); err != nil && violation == nil {
			violation = fmt.Errorf("after %s: %w", ev, err)
		}
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	inf := m.newAQInformer(list, watchAQs, pub)
	handlers := sources.New(ctx, pub, time.Now, func(err error) { t.Error(err) })
	if _, err := inf.AddEventHandler(handlers.Quotas()); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(ctx)

	// The first watch delivers b at 12 and a at 14, then expires.
	w1 := <-watches
	w1.Modify(objOf(cohortAt(t, "b", 12)))
	w1.Modify(objOf(cohortAt(t, "a", 14)))
	w1.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})

	done := func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if violation != nil {
			return true, violation
		}
		return listed >= 2 && st.Progress() >= 30, h.holds(st)
	}
	deadline := time.After(30 * time.Second)
	for {
		ok, err := done()
		if ok {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		select {
		case <-changed:
		case <-deadline:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the relist did not end at progress 30: progress %d, %d lists, %v", st.Progress(), listed, err)
		}
	}
}

func objOf(u unstructured.Unstructured) runtime.Object { return &u }

type publisherFunc func(events.Event)

func (f publisherFunc) Publish(_ context.Context, ev events.Event) (uint64, error) {
	f(ev)
	return 0, nil
}

// TestListEndsAtItsVersion: a replica that starts after a deletion lists
// objects whose versions are all older than the deletion, up to which
// another replica may have raised the ledger's floor. The list's own
// version reaches the state, so its Progress is not stuck below the floor
// until some object is written again.
func TestListEndsAtItsVersion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	list := func(_ context.Context, _ metav1.ListOptions) (*unstructured.UnstructuredList, error) {
		ul := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{cohortAt(t, "a", 5)}}
		ul.SetResourceVersion("12") // b was deleted at 10
		return ul, nil
	}
	watchAQs := func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
			return nil, errors.New("no watch-list here")
		}
		return watch.NewRaceFreeFake(), nil
	}
	m := &Manager{metrics: metrics.New()}
	m.undecodable = &undecodable{m: m, objs: map[string]*skipped{}}
	var mu sync.Mutex
	st := state.New()
	changed := make(chan struct{}, 1)
	pub := publisherFunc(func(ev events.Event) {
		mu.Lock()
		defer mu.Unlock()
		ev.Seq = st.LastSeq() + 1
		st.Apply(ev)
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	inf := m.newAQInformer(list, watchAQs, pub)
	reg, err := inf.AddEventHandler(sources.New(ctx, pub, time.Now, func(err error) { t.Error(err) }).Quotas())
	if err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := st.Node("a"); !ok || st.Progress() != 12 {
		t.Errorf("after the first list: a held %v, progress %d; want true and 12", ok, st.Progress())
	}
}

// The AcceleratorQuota informer's transform keeps who wrote an object and
// when (its record travels in its events) and drops the fields each
// manager owns, the large part; the record is the same either way.
func TestSlimManagedFields(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 10, 5, 9, 41, 12, 0, time.UTC))
	aq := &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{Name: "a", ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "ome.io/v1beta1", Time: &at,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:budgets":{}}}`)}},
		{Manager: "ome-quota-manager", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "ome.io/v1beta1", Time: &at, Subresource: "status",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}},
	}}}
	want := events.RecordOf(aq.ManagedFields)
	out, err := slimManagedFields(aq)
	if err != nil {
		t.Fatal(err)
	}
	mf := out.(*v1beta1.AcceleratorQuota).ManagedFields
	if len(mf) != 2 || mf[0].Manager != "kubectl" || mf[1].Subresource != "status" {
		t.Fatalf("managedFields kept: %+v", mf)
	}
	for _, e := range mf {
		if e.FieldsV1 != nil {
			t.Errorf("%s's owned fields kept", e.Manager)
		}
	}
	if got := sources.QuotaOf(out.(*v1beta1.AcceleratorQuota)).Record; got != want {
		t.Errorf("record %q after the transform, want %q", got, want)
	}
	// Not an object (a tombstone): left as it is.
	tomb := cache.DeletedFinalStateUnknown{Key: "a"}
	if got, err := slimManagedFields(tomb); err != nil || got != any(tomb) {
		t.Errorf("a tombstone became %v, %v", got, err)
	}
}

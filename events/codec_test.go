package events

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
)

var t0 = time.Date(2026, 10, 5, 9, 41, 12, 500, time.UTC)

func sampleEvents() []Event {
	evs := []Event{
		ConfigChanged(t0, DefaultConfig()),
		FlavorUpserted(t0, &Flavor{Name: "a100", NodeLabels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}),
		NodeUpserted(t0, &Node{
			Name:        "a100-1",
			Labels:      map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
			Capacity:    map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8"), "memory": resource.MustParse("1Ti")},
			Allocatable: map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")},
			Ready:       true,
		}),
		QuotaUpserted(t0, &Quota{Name: "root", Generation: 1, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort},
			Capacity: []v1beta1.CapacityStatus{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100",
				Allocatable: resource.MustParse("32"), HighWaterMark: resource.MustParse("32"),
				ObservedAt: metav1.NewTime(time.Date(2026, 10, 5, 9, 40, 0, 0, time.UTC))}}}),
		QuotaUpserted(t0, &Quota{Name: "team-beta", Generation: 3, Spec: v1beta1.AcceleratorQuotaSpec{
			Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "ml-research"},
			Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100",
				Nominal: resource.MustParse("8"), BorrowingLimit: ptr(resource.MustParse("4"))}}}}),
		QueueUpserted(t0, &Queue{Name: "team-beta", Managed: true, Usage: []Usage{{Resource: "nvidia.com/gpu", Flavor: "a100",
			Admitted: resource.MustParse("10"), Reserved: resource.MustParse("10"), Borrowed: resource.MustParse("2")}}}),
		Deleted(t0, KindNode, "a100-1"),
		Tick(t0),
		MeasureFailed(t0, "nodes is forbidden"),
		SourceFailed(t0, "nodes", "nodes is forbidden: User \"x\" cannot watch resource \"nodes\""),
		SourceRecovered(t0, "nodes"),
		ConfigChanged(t0, Config{MeasuredResources: []string{"nvidia.com/gpu"}, DeviceClassMappings: []DeviceClassMapping{
			{Name: "nvidia.com/gpu", DeviceClassNames: []string{"gpu.nvidia.com"}},
			{Name: "gpu.memory", DeviceClassNames: []string{"gpu.nvidia.com", "mig.nvidia.com"}, Sources: []MappingSource{{Type: SourceCounter,
				Counter: &CounterSource{Name: "memory", Driver: "gpu.nvidia.com", DeviceSelector: &DeviceSelector{Type: SelectorCEL, CEL: &CELSelector{Expression: "device.driver == 'gpu.nvidia.com'"}}}}}},
		}}),
		DeviceClassUpserted(t0, &DeviceClass{Name: "gpu.nvidia.com", Selectors: []string{"device.driver == 'gpu.nvidia.com'"}, ExtendedResourceName: "nvidia.com/gpu"}),
		ResourceSliceUpserted(t0, &ResourceSlice{Name: "n1-gpus", Driver: "gpu.nvidia.com", Pool: "n1", Generation: 1, SliceCount: 2,
			Access: Access{NodeName: "n1"},
			Devices: []Device{{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: ptr("gpu")}},
				Capacity:         map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")},
				ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourcev1.Counter{"memory": {Value: resource.MustParse("40Gi")}}}}}},
		}),
		ResourceSliceUpserted(t0, &ResourceSlice{Name: "n1-counters", Driver: "gpu.nvidia.com", Pool: "n1", Generation: 1, SliceCount: 2,
			Access:         Access{NodeName: "n1"},
			SharedCounters: []resourcev1.CounterSet{{Name: "gpu-0", Counters: map[string]resourcev1.Counter{"memory": {Value: resource.MustParse("40Gi")}}}},
		}),
		Deleted(t0, KindResourceSlice, "n1-gpus"),
		Deleted(t0, KindDeviceClass, "gpu.nvidia.com"),
		Verdicted(t0, "team-alpha", &Verdict{UID: "u-1", User: "alice", Groups: []string{"system:authenticated"}, Operation: "UPDATE",
			Code: 403, Message: "ml-research: budget nvidia.com/gpu on a100 is 24 but its children total 28",
			Old: &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "ml-research"},
				Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse("16")}}},
			New: &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue, ParentRef: &v1beta1.ParentReference{Name: "ml-research"},
				Budgets: []v1beta1.Budget{{ResourceName: "nvidia.com/gpu", ResourceFlavor: "a100", Nominal: resource.MustParse("20")}}},
			Replica: "m1"}),
		Verdicted(t0, "team-gone", &Verdict{UID: "u-2", User: "bob", Operation: "DELETE", Allowed: true}),
		LeadershipChanged(t0, "m1", LeadershipAcquired),
		OutcomeReported(t0, "team-beta", Outcome{Kind: OutcomeApplied}),
		OutcomeReported(t0, "team-alpha", Outcome{Kind: OutcomeConflict, Message: "ClusterQueue team-alpha exists without the label"}),
		OutcomeReported(t0, "team-alpha", Outcome{}),
		LeadershipChanged(t0, "m1", LeadershipLost),
		QuotaUpserted(t0, &Quota{Name: "team-gamma", Generation: 2, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue},
			Conditions: []Stamp{{Type: "Ready", Status: "True", Since: time.Date(2026, 10, 5, 9, 40, 0, 0, time.UTC)},
				{Type: "Materialized", Status: "False", Since: time.Date(2026, 10, 5, 9, 41, 0, 0, time.UTC)}}}),
		QuotaUpserted(t0, &Quota{Name: "ml-research", UID: "u-7", Generation: 2, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort,
			ParentRef: &v1beta1.ParentReference{Name: "root"}}, Deleting: true}),
		QuotasListing(t0),
		QuotasListed(t0, 812),
		Drifted(t0, "team-beta", Drift{Object: "ClusterQueue", Name: "team-beta", Change: DriftEdited, Version: "812"}),
		Drifted(t0, "team-beta", Drift{Object: "LocalQueue", Namespace: "ml", Name: "team-beta", Change: DriftDeleted}),
		ConfigChanged(t0, Config{Mode: ModeManagement, Members: []string{"west", "east"}, MeasuredResources: []string{"nvidia.com/gpu"}}),
		MemberSeen(t0, "east", []string{"a100"}, []MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "a100",
			Allocatable: resource.MustParse("6"), HighWaterMark: resource.MustParse("8")}}),
		MemberLost(t0, "east", "Get \"https://east:6443/\": dial tcp: connection refused"),
		QuotaUpserted(t0, &Quota{Name: "team-delta", UID: "u-9", Generation: 1, Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleClusterQueue},
			Record: "0123456789abcdef01234567"}),
		Verdicted(t0, "team-delta", &Verdict{UID: "u-3", User: "carol", Operation: "CREATE", Allowed: true, ObjectUID: "u-9",
			Authenticated: true, Record: "0123456789abcdef01234567"}),
	}
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
	}
	return evs
}

func ptr[T any](v T) *T { return &v }

// decodeAll decodes every event of log, failing the test on an error.
func decodeAll(t *testing.T, log string) []Event {
	t.Helper()
	dec := NewDecoder(strings.NewReader(log))
	var out []Event
	for {
		ev, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	in := sampleEvents()
	for _, ev := range in {
		if err := enc.Encode(ev); err != nil {
			t.Fatalf("encode %s: %v", ev, err)
		}
	}
	first := buf.String()
	out := decodeAll(t, first)
	if diff := cmp.Diff(in, out, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("decoded events differ (-in +out):\n%s", diff)
	}
	// The encoding is stable: encoding what was decoded gives the same bytes.
	var again bytes.Buffer
	enc = NewEncoder(&again)
	for _, ev := range out {
		if err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	if again.String() != first {
		t.Errorf("re-encoding changed the bytes:\n%s\nvs\n%s", first, again.String())
	}
}

func TestEncodingIsPinned(t *testing.T) {
	// A change to this line is a change of the schema: bump SchemaVersion.
	ev := NodeUpserted(time.Date(2026, 10, 5, 11, 41, 12, 0, time.FixedZone("CEST", 7200)), &Node{
		Name: "n1", Labels: map[string]string{"b": "2", "a": "1"},
		Capacity: map[string]resource.Quantity{"nvidia.com/gpu": resource.MustParse("8")}, Ready: true, Unschedulable: true,
	})
	ev.Seq = 7
	b, err := Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":13,"seq":7,"time":"2026-10-05T09:41:12Z","kind":"Node","op":"upsert","key":"n1","node":{"name":"n1","labels":{"a":"1","b":"2"},"capacity":{"nvidia.com/gpu":"8"},"ready":true,"unschedulable":true}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestDecodeRefuses(t *testing.T) {
	tests := map[string]struct {
		line    string
		version int // a *VersionError with this version is expected when >= 0
		want    string
	}{
		"newer version": {
			line: `{"v":14,"seq":1,"kind":"Tick","time":"2026-10-05T09:41:12Z","shiny":true}`, version: 14,
			want: "schema version 14, newer than 13, the newest this build reads: read the log with the ome-quota-manager version that wrote it, or a newer one",
		},
		"verdict in version 2": {line: `{"v":2,"seq":1,"kind":"Verdict","key":"a","verdict":{"uid":"u","user":"x","operation":"CREATE","allowed":true},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 2 did not have"},
		"copy version in 11": {line: `{"v":11,"seq":1,"kind":"Member","key":"east","member":{"reachable":true,"copies":[{"node":"a","version":"7"}]},"time":"2026-10-05T09:41:12Z"}`,
			version: -1, want: "a field of schema version 12"},
		"term in 11": {line: `{"v":11,"seq":1,"kind":"Leadership","leadership":{"identity":"r","change":"Acquired","term":3,"nonce":"x"},"time":"2026-10-05T09:41:12Z"}`,
			version: -1, want: "a field of schema version 12"},
		"holds in 11": {line: `{"v":11,"seq":1,"kind":"AcceleratorQuota","op":"upsert","key":"a","quota":{"name":"a","spec":{"role":"ClusterQueue"},"holds":{"writer":"1/x"}},"time":"2026-10-05T09:41:12Z"}`,
			version: -1, want: "a field of schema version 12"},
		"lost lead with a term": {line: `{"v":12,"seq":1,"kind":"Leadership","leadership":{"identity":"r","change":"Lost","term":3},"time":"2026-10-05T09:41:12Z"}`,
			version: -1, want: "only taking it does"},
		"member in version 7":   {line: `{"v":7,"seq":1,"kind":"Member","key":"east","member":{"reachable":false},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 7 did not have"},
		"reserved in version 8": {line: `{"v":8,"seq":1,"kind":"Member","key":"east","member":{"reachable":true,"usage":[{"node":"a","resource":"r","flavor":"f","admitted":"2","reserved":"3","borrowed":"0"}]},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "member event #1 carries a reserved amount, which schema version 8 never wrote"},
		"members in version 7":  {line: `{"v":7,"seq":1,"kind":"Config","config":{"maxTreeDepth":5,"hysteresisPercent":10,"reportInterval":"1m0s","measuredResources":["r"],"mode":"management","members":["east"]},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 7 did not have"},
		"deleting in version 9": {line: `{"v":9,"seq":1,"kind":"AcceleratorQuota","op":"upsert","key":"a","quota":{"name":"a","spec":{"role":"Cohort"},"deleting":true},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "AcceleratorQuota event #1 carries deleting, which schema version 9 never wrote"},
		"a record in version 12": {line: `{"v":12,"seq":1,"kind":"AcceleratorQuota","op":"upsert","key":"a","time":"2026-10-05T09:41:12Z","quota":{"name":"a","spec":{"role":"Cohort"},"record":"abc"}}`,
			version: -1, want: "carries a record or authenticated, which schema version 12 never wrote"},
		"an authenticated verdict in version 12": {line: `{"v":12,"seq":1,"kind":"Verdict","key":"a","time":"2026-10-05T09:41:12Z","verdict":{"uid":"u","user":"x","operation":"CREATE","allowed":true,"authenticated":true}}`,
			version: -1, want: "carries a record or authenticated, which schema version 12 never wrote"},
		"listed in version 10":    {line: `{"v":10,"seq":1,"kind":"QuotaListed","version":30,"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 10 did not have"},
		"listing with a version":  {line: `{"v":11,"seq":1,"kind":"QuotaListing","version":30,"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "only the end of a list does"},
		"listed with a key":       {line: `{"v":11,"seq":1,"kind":"QuotaListed","key":"a","version":30,"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "only object events carry them"},
		"membership in version 8": {line: `{"v":8,"seq":1,"kind":"Membership","key":"east","membership":{"member":true},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 8 did not have"},
		"outcome in version 3":    {line: `{"v":3,"seq":1,"kind":"Outcome","key":"a","outcome":{"kind":"Applied"},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 3 did not have"},
		"leadership in version 3": {line: `{"v":3,"seq":1,"kind":"Leadership","leadership":{"identity":"m1","change":"Acquired"},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 3 did not have"},
		"outcome bad kind":        {line: `{"v":4,"seq":1,"kind":"Outcome","key":"a","outcome":{"kind":"Written"},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: `kind "Written"`},
		"leadership no identity":  {line: `{"v":4,"seq":1,"kind":"Leadership","leadership":{"change":"Acquired"},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "names no identity"},
		"verdict no key":          {line: `{"v":3,"seq":1,"kind":"Verdict","verdict":{"uid":"u","user":"x","operation":"CREATE","allowed":true},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "name the node written"},
		"verdict bad op":          {line: `{"v":3,"seq":1,"kind":"Verdict","key":"a","verdict":{"uid":"u","user":"x","operation":"CONNECT","allowed":true},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: `operation "CONNECT"`},
		"synced in version 1":     {line: `{"v":1,"seq":1,"kind":"Synced","time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 1 did not have"},
		"synced payload":          {line: `{"v":2,"seq":1,"kind":"Synced","time":"2026-10-05T09:41:12Z","failure":{"reason":"x"}}`, version: -1, want: "a synced marker carries none"},
		"no version":              {line: `{"seq":1,"kind":"Tick"}`, version: 0, want: `no schema version (field "v")`},
		"version zero":            {line: `{"v":0,"seq":1,"kind":"Tick"}`, version: 0, want: `no schema version`},
		"unknown field":           {line: `{"v":1,"seq":1,"kind":"Tick","time":"2026-10-05T09:41:12Z","extra":1}`, version: -1, want: `unknown field "extra"`},
		"not json":                {line: `hello`, version: -1, want: "not an encoded event"},
		"reserved kind":           {line: `{"v":1,"seq":1,"kind":"ResourceSlice","op":"upsert","key":"s","resourceSlice":{"name":"s","driver":"d","pool":"p","generation":1,"sliceCount":1,"access":{"nodeName":"n"}},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 1 did not have"},
		"v1 mappings":             {line: `{"v":1,"seq":1,"kind":"Config","config":{"maxTreeDepth":1,"hysteresisPercent":10,"reportInterval":"1m","measuredResources":[],"deviceClassMappings":[{"name":"g","deviceClassNames":["c"]}]},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "schema version 1 never wrote"},
		"bad mapping":             {line: `{"v":2,"seq":1,"kind":"Config","config":{"maxTreeDepth":1,"hysteresisPercent":10,"reportInterval":"1m","measuredResources":[],"deviceClassMappings":[{"name":"g","deviceClassNames":[]}]},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "name at least one DeviceClass; fix --dra-config"},
		"unknown kind":            {line: `{"v":1,"seq":1,"kind":"Pod","time":"2026-10-05T09:41:12Z"}`, version: -1, want: `unknown kind "Pod"`},
		"key mismatch":            {line: `{"v":1,"seq":1,"kind":"ResourceFlavor","op":"upsert","key":"a","flavor":{"name":"b"},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: `key "a" but its payload names "b"`},
		"missing payload":         {line: `{"v":1,"seq":1,"kind":"Node","op":"upsert","key":"a","time":"2026-10-05T09:41:12Z"}`, version: -1, want: `exactly one payload, "node"`},
		"bad quantity":            {line: `{"v":1,"seq":1,"kind":"Node","op":"upsert","key":"a","node":{"name":"a","capacity":{"x":"lots"},"ready":true},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "does not decode"},
		"bad config":              {line: `{"v":1,"seq":1,"kind":"Config","config":{"maxTreeDepth":-1,"hysteresisPercent":10,"reportInterval":"1m","measuredResources":[]},"time":"2026-10-05T09:41:12Z"}`, version: -1, want: "fix --max-tree-depth"},
		"two values":              {line: `{"v":1,"seq":1,"kind":"Tick","time":"2026-10-05T09:41:12Z"}{}`, version: -1, want: "after top-level value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := NewDecoder(strings.NewReader("\n" + tc.line + "\n")).Decode()
			if err == nil {
				t.Fatal("decoded, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "event log line 2: ") {
				t.Errorf("error %q, want it to start with the line and contain %q", err, tc.want)
			}
			var ve *VersionError
			if got := errors.As(err, &ve); got != (tc.version >= 0) || (got && ve.Version != tc.version) {
				t.Errorf("error %v: VersionError %v (%+v), want version %d", err, got, ve, tc.version)
			}
		})
	}
}

// A version 1 log had no Synced: its first Tick marked the informers'
// initial lists as delivered. The decoder reads it so; later Ticks stay
// Ticks, and a version 2 Tick is never upgraded.
func TestDecodeUpgradesVersion1(t *testing.T) {
	log := `{"v":1,"seq":1,"time":"2026-10-05T09:41:12Z","kind":"Node","op":"upsert","key":"n1","node":{"name":"n1","ready":true}}
{"v":1,"seq":2,"time":"2026-10-05T09:41:13Z","kind":"Tick"}
{"v":1,"seq":3,"time":"2026-10-05T09:42:13Z","kind":"Tick"}
{"v":2,"seq":4,"time":"2026-10-05T09:43:13Z","kind":"Tick"}
`
	var got []string
	for _, ev := range decodeAll(t, log) {
		got = append(got, ev.String())
	}
	want := []string{"#1 Node upsert n1", "#2 Synced", "#3 Tick", "#4 Tick"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("got %v, want %v", got, want)
	}
	var b bytes.Buffer
	if err := NewEncoder(&b).Encode(Event{Seq: 2, Time: time.Date(2026, 10, 5, 9, 41, 13, 0, time.UTC), Kind: KindSynced}); err != nil {
		t.Fatal(err)
	}
	if want := `{"v":13,"seq":2,"time":"2026-10-05T09:41:13Z","kind":"Synced"}` + "\n"; b.String() != want {
		t.Errorf("encoded %q, want %q", b.String(), want)
	}
}

func TestDecodeLastLineWithoutNewline(t *testing.T) {
	dec := NewDecoder(strings.NewReader(`{"v":2,"seq":4,"time":"2026-10-05T09:41:12Z","kind":"Tick"}`))
	ev, err := dec.Decode()
	if err != nil || ev.Seq != 4 || ev.Kind != KindTick {
		t.Fatalf("got %v, %v", ev, err)
	}
	if _, err := dec.Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestMarshalRefusesInvalid(t *testing.T) {
	if _, err := Marshal(Event{Kind: KindNode, Op: OpUpsert, Key: "n"}); err == nil {
		t.Fatal("encoded a node upsert without a payload")
	}
}

func TestValidate(t *testing.T) {
	bad := Config{MaxTreeDepth: 1, HysteresisPercent: 101}
	tests := map[string]struct {
		ev   Event
		want string // "" for valid
	}{
		"tick":                {ev: Tick(t0)},
		"delete":              {ev: Deleted(t0, KindAcceleratorQuota, "a")},
		"delete no key":       {ev: Deleted(t0, KindAcceleratorQuota, ""), want: "has no key"},
		"delete payload":      {ev: Event{Kind: KindNode, Op: OpDelete, Key: "a", Node: &Node{Name: "a"}}, want: "carries only the key"},
		"bad op":              {ev: Event{Kind: KindNode, Op: "patch", Key: "a"}, want: `op "patch"`},
		"two payloads":        {ev: Event{Kind: KindNode, Op: OpUpsert, Key: "a", Node: &Node{Name: "a"}, Flavor: &Flavor{Name: "a"}}, want: "exactly one payload"},
		"tick payload":        {ev: Event{Kind: KindTick, Failure: &Failure{}}, want: "carries none"},
		"tick key":            {ev: Event{Kind: KindTick, Key: "x"}, want: "only object events"},
		"config hysteresis":   {ev: Event{Kind: KindConfig, Config: &bad}, want: "between 0 and 100"},
		"config unsorted":     {ev: Event{Kind: KindConfig, Config: &Config{MeasuredResources: []string{"b", "a"}}}, want: "sorted and unique"},
		"config normalized":   {ev: ConfigChanged(t0, Config{MeasuredResources: []string{"b", "a", "b"}})},
		"config interval":     {ev: Event{Kind: KindConfig, Config: &Config{ReportInterval: metav1.Duration{Duration: -1}}}, want: "--capacity-report-interval"},
		"config empty name":   {ev: Event{Kind: KindConfig, Config: &Config{MeasuredResources: []string{""}}}, want: "is empty"},
		"failure no payload":  {ev: Event{Kind: KindMeasureFailed}, want: `"failure"`},
		"outcome":             {ev: OutcomeReported(t0, "a", Outcome{Kind: OutcomeFailed, Message: "x"})},
		"outcome none":        {ev: OutcomeReported(t0, "a", Outcome{})},
		"outcome no key":      {ev: OutcomeReported(t0, "", Outcome{Kind: OutcomeApplied}), want: "name the node"},
		"outcome op":          {ev: Event{Kind: KindOutcome, Op: OpUpsert, Key: "a", Outcome: &Outcome{}}, want: "has an op"},
		"outcome no payload":  {ev: Event{Kind: KindOutcome, Key: "a"}, want: `"outcome"`},
		"applied message":     {ev: OutcomeReported(t0, "a", Outcome{Kind: OutcomeApplied, Message: "x"}), want: "carries a message"},
		"leadership":          {ev: LeadershipChanged(t0, "m1", LeadershipLost)},
		"leadership change":   {ev: LeadershipChanged(t0, "m1", "Stolen"), want: `change "Stolen"`},
		"leadership key":      {ev: Event{Kind: KindLeadership, Key: "x", Leadership: &Leadership{Identity: "m1", Change: LeadershipAcquired}}, want: "only object events"},
		"drift":               {ev: Drifted(t0, "a", Drift{Object: "Cohort", Name: "a", Change: DriftCreated})},
		"drift no key":        {ev: Drifted(t0, "", Drift{Object: "Cohort", Name: "a", Change: DriftCreated}), want: "name the node"},
		"drift kind":          {ev: Drifted(t0, "a", Drift{Object: "Pod", Name: "a", Change: DriftCreated}), want: `object kind "Pod"`},
		"drift change":        {ev: Drifted(t0, "a", Drift{Object: "Cohort", Name: "a", Change: "moved"}), want: `change "moved"`},
		"drift no payload":    {ev: Event{Kind: KindDrift, Key: "a"}, want: `"drift"`},
		"member":              {ev: MemberSeen(t0, "east", []string{"h100", "a100"}, []MemberCapacity{{Resource: "nvidia.com/gpu", Flavor: "h100"}, {Resource: "nvidia.com/gpu", Flavor: "a100"}})},
		"member lost":         {ev: MemberLost(t0, "east", "dial tcp: connection refused")},
		"member no key":       {ev: MemberLost(t0, "", "x"), want: "name the member cluster"},
		"member lost marks":   {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Flavors: []string{"a"}}}, want: "carries only why"},
		"member unsorted":     {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Reachable: true, Flavors: []string{"b", "a"}}}, want: "unsorted or twice"},
		"member twice":        {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Reachable: true, Capacity: []MemberCapacity{{Resource: "r", Flavor: "f"}, {Resource: "r", Flavor: "f"}}}}, want: "unsorted or twice (r@f)"},
		"member negative":     {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Reachable: true, Capacity: []MemberCapacity{{Resource: "r", Flavor: "f", HighWaterMark: resource.MustParse("-1")}}}}, want: "negative"},
		"member no payload":   {ev: Event{Kind: KindMember, Key: "a"}, want: `"member"`},
		"member usage":        {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Reachable: true, Usage: []MemberUsage{{Node: "a", Resource: "r", Flavor: "f"}, {Node: "b", Resource: "r", Flavor: "f"}}}}},
		"member usage twice":  {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Reachable: true, Usage: []MemberUsage{{Node: "b", Resource: "r", Flavor: "f"}, {Node: "a", Resource: "r", Flavor: "f"}}}}, want: "usage unsorted or twice (a r@f)"},
		"member copies":       {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Reachable: true, Copies: []MemberCopy{{Node: "a", Applied: 2, Materialized: 2}, {Node: "b", Applied: 1}}}}},
		"member copies twice": {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Reachable: true, Copies: []MemberCopy{{Node: "b"}, {Node: "a"}}}}, want: "copies without a node, unsorted or twice"},
		"member usage, lost":  {ev: Event{Kind: KindMember, Key: "east", Member: &Member{Usage: []MemberUsage{{Node: "a", Resource: "r", Flavor: "f"}}}}, want: "carries only why"},
		"membership joined":   {ev: MembershipChanged(t0, "east", Membership{Member: true, Source: "ClusterProfile fleet/east", Health: "True"})},
		"membership left":     {ev: MembershipChanged(t0, "east", Membership{Message: "its ClusterProfile was deleted"})},
		"membership no key":   {ev: MembershipChanged(t0, "", Membership{Member: true}), want: "name the member cluster"},
		"membership health":   {ev: MembershipChanged(t0, "east", Membership{Member: true, Health: "Sick"}), want: `health "Sick"`},
		"membership op":       {ev: Event{Kind: KindMembership, Op: OpUpsert, Key: "east", Membership: &Membership{}}, want: "only object events carry one"},
		"membership payload":  {ev: Event{Kind: KindMembership, Key: "east"}, want: `"membership"`},
		"config mode":         {ev: ConfigChanged(t0, Config{Mode: "fleet"}), want: `mode is "fleet"`},
		"config members":      {ev: ConfigChanged(t0, Config{Members: []string{"east"}}), want: "only a management plane has members"},
		"config fleet":        {ev: ConfigChanged(t0, Config{Mode: ModeManagement, Members: []string{"west", "east", "east"}})},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.ev.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("valid event refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestEventString(t *testing.T) {
	ev := Deleted(t0, KindNode, "n1")
	ev.Seq = 3
	if got, want := ev.String(), "#3 Node delete n1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := Tick(t0).String(), "#0 Tick"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestVersion1StillReads(t *testing.T) {
	ev, err := Unmarshal([]byte(`{"v":1,"seq":4,"kind":"Node","op":"delete","key":"a100-1","time":"2026-10-05T09:41:12Z"}`))
	if err != nil {
		t.Fatalf("a version 1 line does not read: %v", err)
	}
	if ev.Kind != KindNode || ev.Op != OpDelete || ev.Key != "a100-1" || ev.Seq != 4 {
		t.Errorf("read %+v", ev)
	}
}

// A version 8 member's usage had no reserved: it reads as nothing
// reserved, and a version 9 line carries what the member reserved, and
// nothing for 0, so that an unreserved copy encodes as before.
func TestMemberReservedAcrossVersions(t *testing.T) {
	v8 := `{"v":8,"seq":3,"time":"2026-10-05T09:41:12Z","kind":"Member","key":"east","member":{"reachable":true,"usage":[{"node":"team-a","resource":"nvidia.com/gpu","flavor":"a100","admitted":"4","borrowed":"1"}]}}`
	ev, err := Unmarshal([]byte(v8))
	if err != nil {
		t.Fatalf("a version 8 member line does not read: %v", err)
	}
	u := ev.Member.Usage[0]
	if u.Admitted.String() != "4" || u.Borrowed.String() != "1" || !u.Reserved.IsZero() {
		t.Errorf("version 8 usage read as %+v", u)
	}
	b, err := Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(v8, `"v":8`, `"v":13`, 1); string(b) != want {
		t.Errorf("re-encoded\n got  %s\n want %s", b, want)
	}
	ev.Member.Usage[0].Reserved = resource.MustParse("5")
	if b, err = Marshal(ev); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"admitted":"4","reserved":"5","borrowed":"1"`) {
		t.Errorf("a reserved amount is not encoded: %s", b)
	}
	back, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Member.Usage[0].Reserved.String(); got != "5" {
		t.Errorf("reserved read back as %s, want 5", got)
	}
}

// Before version 7 the API kept the split fields untyped: a share's
// cluster was clusterName, and a distribution any object. Such lines read
// with the shares' names kept and only the distribution's policy.
func TestDecodeUpgradesSplitFields(t *testing.T) {
	log := `{"v":6,"seq":1,"time":"2026-10-05T09:41:12Z","kind":"AcceleratorQuota","op":"upsert","key":"t","quota":{"name":"t","generation":1,"spec":{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"8","perCluster":[{"clusterName":"west","nominal":"5"},{"clusterName":"east","nominal":3}]}],"distribution":{"policy":"Explicit","weights":{"west":2}}}}}
{"v":6,"seq":2,"time":"2026-10-05T09:41:13Z","kind":"Verdict","key":"t","verdict":{"uid":"u","user":"alice","operation":"UPDATE","allowed":true,"new":{"role":"ClusterQueue","parentRef":{"name":"root"},"distribution":{"note":"x"}}}}
`
	evs := decodeAll(t, log)
	if len(evs) != 2 {
		t.Fatalf("decoded %d events, want 2", len(evs))
	}
	spec := evs[0].Quota.Spec
	shares := spec.Budgets[0].PerCluster
	if len(shares) != 2 || shares[0].Cluster != "west" || shares[0].Nominal.String() != "5" || shares[1].Cluster != "east" || shares[1].Nominal.String() != "3" {
		t.Errorf("shares %+v, want west 5 and east 3", shares)
	}
	if spec.Distribution == nil || spec.Distribution.Policy != v1beta1.DistributionExplicit {
		t.Errorf("distribution %+v, want policy Explicit", spec.Distribution)
	}
	if d := evs[1].Verdict.New.Distribution; d == nil || d.Policy != "" {
		t.Errorf("the verdict's distribution %+v, want an empty one", d)
	}
}

// A version 12 verdict reads as unauthenticated and without a record, and
// re-encodes as version 13 without either; a version 13 line keeps both,
// pinned.
func TestVerdictRecordAcrossVersions(t *testing.T) {
	v12 := `{"v":12,"seq":3,"time":"2026-10-05T09:41:12Z","kind":"Verdict","key":"a","verdict":{"uid":"u","user":"x","operation":"CREATE","allowed":true}}`
	ev, err := Unmarshal([]byte(v12))
	if err != nil {
		t.Fatalf("a version 12 verdict does not read: %v", err)
	}
	if ev.Verdict.Authenticated || ev.Verdict.Record != "" {
		t.Errorf("version 12 verdict read as %+v", ev.Verdict)
	}
	b, err := Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(v12, `"v":12`, `"v":13`, 1); string(b) != want {
		t.Errorf("re-encoded\n got  %s\n want %s", b, want)
	}
	ev.Verdict.Authenticated, ev.Verdict.Record = true, "abc"
	if b, err = Marshal(ev); err != nil {
		t.Fatal(err)
	}
	want := `{"v":13,"seq":3,"time":"2026-10-05T09:41:12Z","kind":"Verdict","key":"a","verdict":{"uid":"u","user":"x","operation":"CREATE","allowed":true,"authenticated":true,"record":"abc"}}`
	if string(b) != want {
		t.Errorf("encoded\n got  %s\n want %s", b, want)
	}
	q := QuotaUpserted(time.Date(2026, 10, 5, 9, 41, 12, 0, time.UTC), &Quota{Name: "a", Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort}, Record: "abc"})
	q.Seq = 4
	if b, err = Marshal(q); err != nil {
		t.Fatal(err)
	}
	want = `{"v":13,"seq":4,"time":"2026-10-05T09:41:12Z","kind":"AcceleratorQuota","op":"upsert","key":"a","quota":{"name":"a","spec":{"role":"Cohort"},"record":"abc"}}`
	if string(b) != want {
		t.Errorf("encoded\n got  %s\n want %s", b, want)
	}
}

// RecordOf digests who wrote an object and when: not the fields each
// manager owns, not the order of the entries; nothing for no entries.
func TestRecordOf(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 10, 5, 9, 41, 12, 0, time.UTC))
	a := metav1.ManagedFieldsEntry{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "ome.io/v1beta1", Time: &at,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}
	b := metav1.ManagedFieldsEntry{Manager: "ome-quota-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "ome.io/v1beta1", Time: &at, Subresource: "status"}
	if got := RecordOf(nil); got != "" {
		t.Errorf("RecordOf(nil) = %q, want empty", got)
	}
	r := RecordOf([]metav1.ManagedFieldsEntry{a, b})
	if len(r) != 24 {
		t.Errorf("RecordOf = %q, want 24 hex digits", r)
	}
	slim := a
	slim.FieldsV1 = nil
	if got := RecordOf([]metav1.ManagedFieldsEntry{b, slim}); got != r {
		t.Errorf("order or owned fields changed the record: %q vs %q", got, r)
	}
	later := metav1.NewTime(at.Add(time.Second))
	moved := a
	moved.Time = &later
	for name, e := range map[string]metav1.ManagedFieldsEntry{"time": moved, "manager": {Manager: "x", Operation: a.Operation, APIVersion: a.APIVersion, Time: &at}} {
		if got := RecordOf([]metav1.ManagedFieldsEntry{e, b}); got == r {
			t.Errorf("another %s left the record as it was", name)
		}
	}
}

package events

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1"
)

// Kind says what an event is about.
type Kind string

// Kinds of event. Adding a kind changes what a reader must understand, so
// it bumps SchemaVersion (see codec.go): Synced, Start, DeviceClass and
// ResourceSlice (DRA capacity) came with version 2, Verdict with version 3,
// Outcome and Leadership (outcome.go) with version 4.
const (
	KindAcceleratorQuota Kind = "AcceleratorQuota"
	KindNode             Kind = "Node"
	KindResourceFlavor   Kind = "ResourceFlavor"
	KindClusterQueue     Kind = "ClusterQueue"
	KindTick             Kind = "Tick"
	KindConfig           Kind = "Config"
	KindMeasureFailed    Kind = "MeasureFailed"
	// KindMeasureRecovered ends the failure of a source that a
	// MeasureFailed with that source began.
	KindMeasureRecovered Kind = "MeasureRecovered"
	KindSynced           Kind = "Synced"
	// KindStart marks a start of the manager in a recorded log: which build
	// ran, with which flags. The state does not read it.
	KindStart         Kind = "Start"
	KindDeviceClass   Kind = "DeviceClass"
	KindResourceSlice Kind = "ResourceSlice"
	// KindVerdict is the admission webhook's answer to one write of the
	// tree: who asked, what they asked, and what was answered. It changes
	// no state: it is recorded so that a log is an audit trail of the tree.
	// Its Key is the node written.
	KindVerdict Kind = "Verdict"
	// KindQuotaListing marks the start of a list of AcceleratorQuotas
	// (the informer's first, or a relist after its watch ended): until
	// the KindQuotaListed that ends it, the AcceleratorQuota events that
	// follow come in the order of their names, not of their versions.
	// KindQuotaListed ends it: its Version is the list's resourceVersion,
	// and every object of the list, and every deletion it implies, is in
	// an event before it. Both came with schema version 11.
	KindQuotaListing Kind = "QuotaListing"
	KindQuotaListed  Kind = "QuotaListed"
)

// Op is what happened to the object of an object event.
type Op string

// Operations on objects. Add and update are both an upsert: the payload is
// the object's whole compact form, so the state does not care which it was.
const (
	OpUpsert Op = "upsert"
	OpDelete Op = "delete"
)

// Event is one input to the state. Exactly one payload field is set on an
// upsert, matching Kind; a delete carries only the Key; a Tick carries no
// payload.
type Event struct {
	// Seq is the position in the stream, assigned by Stream.Publish: 1, 2,
	// 3, ... with no gaps.
	Seq uint64 `json:"seq"`
	// Time is when the manager received the input, supplied by the caller.
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// Op is set on object events (AcceleratorQuota, Node, ResourceFlavor,
	// ClusterQueue, DeviceClass, ResourceSlice) only.
	Op Op `json:"op,omitempty"`
	// Key names the object: its name, as all these objects are
	// cluster-scoped.
	Key string `json:"key,omitempty"`
	// Version is the object's resourceVersion on AcceleratorQuota events:
	// an upsert's, or a delete's (the deletion's, or the last one known);
	// on a QuotaListed, the list's. The admission webhook reads how far
	// the state has seen from it.
	Version uint64 `json:"version,omitempty"`

	Quota   *Quota   `json:"quota,omitempty"`
	Node    *Node    `json:"node,omitempty"`
	Flavor  *Flavor  `json:"flavor,omitempty"`
	Queue   *Queue   `json:"queue,omitempty"`
	Config  *Config  `json:"config,omitempty"`
	Failure *Failure `json:"failure,omitempty"`
	Start   *Start   `json:"start,omitempty"`

	DeviceClass   *DeviceClass   `json:"deviceClass,omitempty"`
	ResourceSlice *ResourceSlice `json:"resourceSlice,omitempty"`
	Verdict       *Verdict       `json:"verdict,omitempty"`
	Outcome       *Outcome       `json:"outcome,omitempty"`
	Leadership    *Leadership    `json:"leadership,omitempty"`
	Drift         *Drift         `json:"drift,omitempty"`
	Member        *Member        `json:"member,omitempty"`
	Membership    *Membership    `json:"membership,omitempty"`
}

// Quota is the compact form of an AcceleratorQuota: its spec, and the
// capacity in its status, from which root's high-water marks are read back
// at start.
type Quota struct {
	Name string `json:"name"`
	// UID is the object's metadata.uid: it tells one life of a name from
	// the next.
	UID        string                       `json:"uid,omitempty"`
	Generation int64                        `json:"generation,omitempty"`
	Spec       v1beta1.AcceleratorQuotaSpec `json:"spec"`
	Capacity   []v1beta1.CapacityStatus     `json:"capacity,omitempty"`
	// Conditions are the conditions its status holds, as stamps: the state
	// keeps a condition's lastTransitionTime while its status stands, as
	// the object shows it (schema version 7).
	Conditions []Stamp `json:"conditions,omitempty"`
	// Deleting is metadata.deletionTimestamp being set: the object is
	// being deleted and waits only for its finalizers (schema version 10).
	// Admission refuses to put a node under it.
	Deleting bool `json:"deleting,omitempty"`
	// Holds is a management plane team's hold record (status.holds), and
	// Guarded whether the node carries the plane's copies finalizer
	// (schema version 12).
	Holds   *v1beta1.FleetHolds `json:"holds,omitempty"`
	Guarded bool                `json:"guarded,omitempty"`
	// Record is RecordOf the object's managedFields: the API server's own
	// record of who last wrote it, and when (schema version 13). Replay
	// matches a verdict's with it.
	Record string `json:"record,omitempty"`
}

// Stamp is one condition of a stored status: its type, its status (True or
// False) and its lastTransitionTime.
type Stamp struct {
	Type   string    `json:"type"`
	Status string    `json:"status"`
	Since  time.Time `json:"since"`
}

// Node is the compact form of a Kubernetes Node: what decides which
// ResourceFlavors it counts toward and what it contributes to them. A Node
// in an event is never modified afterwards, nor are its maps: the state
// keeps the record itself, not a copy (and the manager's Node informer
// cache holds the same one, events/sources.CachedNode).
type Node struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Capacity is status.capacity, every resource.
	Capacity map[string]resource.Quantity `json:"capacity,omitempty"`
	// Allocatable is status.allocatable, every resource.
	Allocatable map[string]resource.Quantity `json:"allocatable,omitempty"`
	// Ready is the Ready condition being True.
	Ready bool `json:"ready"`
	// Unschedulable is spec.unschedulable: the node is cordoned.
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// Flavor is the compact form of a Kueue ResourceFlavor.
type Flavor struct {
	Name       string            `json:"name"`
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
}

// Queue is the compact form of a Kueue ClusterQueue's status: its usage per
// (resource, flavor).
type Queue struct {
	Name string `json:"name"`
	// Managed is whether the ClusterQueue carries the manager's label. The
	// usage of a ClusterQueue the manager does not own is not a team's.
	Managed bool `json:"managed,omitempty"`
	// Usage is sorted by resource, then flavor.
	Usage []Usage `json:"usage,omitempty"`
}

// Usage is a ClusterQueue's use of one resource on one flavor.
type Usage struct {
	Resource string `json:"resource"`
	Flavor   string `json:"flavor"`
	// Admitted is status.flavorsUsage total: what admitted workloads use.
	Admitted resource.Quantity `json:"admitted"`
	// Reserved is status.flavorsReservation total.
	Reserved resource.Quantity `json:"reserved"`
	// Borrowed is status.flavorsUsage borrowed.
	Borrowed resource.Quantity `json:"borrowed"`
}

// Failure says why a measurement failed. A failed measurement refreshes
// nothing, so the observedAt stamps on root grow old and show it. With a
// Source (the informer whose list or watch fails: nodes, resourceslices,
// deviceclasses), the failure lasts until a MeasureRecovered of that
// source, and no stamp is refreshed meanwhile.
type Failure struct {
	Source string `json:"source,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Start is the payload of a start marker.
type Start struct {
	// Version is the binary's version (its module version and VCS revision).
	Version string `json:"version"`
	// Identity is the replica's leader-election identity.
	Identity string `json:"identity,omitempty"`
	// Args are the command-line arguments it was started with.
	Args []string `json:"args,omitempty"`
}

// Verdict is the payload of a Verdict event: one AdmissionReview of an
// AcceleratorQuota that the webhook judged on the tree's rules and that was
// not a dry run.
type Verdict struct {
	// UID is the admission request's uid. The API server may send one
	// request to more than one replica (a timeout, a retry): replay counts
	// a uid once.
	UID string `json:"uid"`
	// User and Groups are the requesting user, as the API server
	// authenticated them (the request's userInfo).
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
	// Operation is CREATE, UPDATE or DELETE.
	Operation string `json:"operation"`
	Allowed   bool   `json:"allowed"`
	// Code and Message are the denial's (403 for a rule); empty when
	// allowed.
	Code    int32  `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Warnings went back with an admitted write.
	Warnings []string `json:"warnings,omitempty"`
	// Old is the spec before the write (nil on CREATE, or when the API
	// server sent no old object); New the spec written (nil on DELETE).
	Old *v1beta1.AcceleratorQuotaSpec `json:"old,omitempty"`
	New *v1beta1.AcceleratorQuotaSpec `json:"new,omitempty"`
	// Replica is the identity of the replica that judged it.
	Replica string `json:"replica,omitempty"`
	// ObjectUID is the written object's metadata.uid (a CREATE's new
	// one), and Base the resourceVersion of the object an UPDATE or DELETE
	// was judged on: replay names the user as the author of a change only
	// when the change it then sees is this one.
	ObjectUID string `json:"objectUID,omitempty"`
	Base      string `json:"base,omitempty"`
	// Authenticated says the review came over a connection whose client
	// certificate the webhook's client CA signed: the API server's. Record
	// is RecordOf the managedFields of the object the review admits (none
	// on DELETE): the API server sets them before it calls webhooks, and
	// stores them with the object (schema version 13).
	Authenticated bool   `json:"authenticated,omitempty"`
	Record        string `json:"record,omitempty"`
}

// RecordOf is a short digest of an object's managedFields, each entry's
// manager, operation, apiVersion, time and subresource (not the fields it
// owns, whose encoding may differ between a review and the stored object):
// the API server's own record of who wrote the object and when, which it
// sets before it calls webhooks and stores unchanged. "" when there are
// none.
func RecordOf(entries []metav1.ManagedFieldsEntry) string {
	if len(entries) == 0 {
		return ""
	}
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		at := ""
		if e.Time != nil {
			at = e.Time.UTC().Format(time.RFC3339)
		}
		lines = append(lines, strings.Join([]string{e.Manager, string(e.Operation), e.APIVersion, at, e.Subresource}, "\x00"))
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:12])
}

// Verdicted is the webhook's verdict on a write of node.
func Verdicted(t time.Time, node string, v *Verdict) Event {
	return Event{Time: t, Kind: KindVerdict, Key: node, Verdict: v}
}

// Started is a start marker.
func Started(t time.Time, s *Start) Event {
	return Event{Time: t, Kind: KindStart, Start: s}
}

// QuotaUpserted is an AcceleratorQuota added or updated.
func QuotaUpserted(t time.Time, q *Quota) Event {
	return Event{Time: t, Kind: KindAcceleratorQuota, Op: OpUpsert, Key: q.Name, Quota: q}
}

// NodeUpserted is a Node added or updated.
func NodeUpserted(t time.Time, n *Node) Event {
	return Event{Time: t, Kind: KindNode, Op: OpUpsert, Key: n.Name, Node: n}
}

// FlavorUpserted is a ResourceFlavor added or updated.
func FlavorUpserted(t time.Time, f *Flavor) Event {
	return Event{Time: t, Kind: KindResourceFlavor, Op: OpUpsert, Key: f.Name, Flavor: f}
}

// QueueUpserted is a ClusterQueue added or its status updated.
func QueueUpserted(t time.Time, q *Queue) Event {
	return Event{Time: t, Kind: KindClusterQueue, Op: OpUpsert, Key: q.Name, Queue: q}
}

// Deleted is the object of the given kind and name deleted.
func Deleted(t time.Time, kind Kind, name string) Event {
	return Event{Time: t, Kind: kind, Op: OpDelete, Key: name}
}

// QuotasListing marks the start of a list of AcceleratorQuotas.
func QuotasListing(t time.Time) Event {
	return Event{Time: t, Kind: KindQuotaListing}
}

// QuotasListed marks the end of a list of AcceleratorQuotas taken at
// resourceVersion version: every object of it has been published.
func QuotasListed(t time.Time, version uint64) Event {
	return Event{Time: t, Kind: KindQuotaListed, Version: version}
}

// Tick is the timer: a measurement that finds the capacity stamps a report
// interval old writes them anew. A Tick before Synced measures nothing.
func Tick(t time.Time) Event {
	return Event{Time: t, Kind: KindTick}
}

// Synced marks the point in the stream where every informer's initial list
// has been delivered: each object the API server listed at start is in an
// event before it. The shell publishes it once, when every event handler
// reports its initial list handled. Until it the state takes no
// measurement, so that the partial view of an initial list (a third of the
// Nodes) can neither lower a high-water mark nor be reported on root; the
// first measurement is taken when it is applied.
func Synced(t time.Time) Event {
	return Event{Time: t, Kind: KindSynced}
}

// ConfigChanged is the configuration in force from t on.
func ConfigChanged(t time.Time, c Config) Event {
	n := c.Normalized()
	return Event{Time: t, Kind: KindConfig, Config: &n}
}

// MeasureFailed is a measurement that failed, such as a node list the API
// server refused.
func MeasureFailed(t time.Time, reason string) Event {
	return Event{Time: t, Kind: KindMeasureFailed, Failure: &Failure{Reason: reason}}
}

// SourceFailed is the start of a lasting failure of source's list or
// watch, and SourceRecovered its end.
func SourceFailed(t time.Time, source, reason string) Event {
	return Event{Time: t, Kind: KindMeasureFailed, Failure: &Failure{Source: source, Reason: reason}}
}

// SourceRecovered ends source's failure (SourceFailed).
func SourceRecovered(t time.Time, source string) Event {
	return Event{Time: t, Kind: KindMeasureRecovered, Failure: &Failure{Source: source}}
}

// IsObject reports whether events of kind k are about an object (and so
// carry an Op and a Key).
func (k Kind) IsObject() bool {
	switch k {
	case KindAcceleratorQuota, KindNode, KindResourceFlavor, KindClusterQueue, KindDeviceClass, KindResourceSlice:
		return true
	}
	return false
}

// payloads counts the payload fields set and names the first one.
func (e *Event) payloads() (int, string) {
	n, first := 0, ""
	for _, p := range []struct {
		set  bool
		name string
	}{
		{e.Quota != nil, "quota"}, {e.Node != nil, "node"}, {e.Flavor != nil, "flavor"},
		{e.Queue != nil, "queue"}, {e.Config != nil, "config"}, {e.Failure != nil, "failure"},
		{e.Start != nil, "start"},
		{e.DeviceClass != nil, "deviceClass"}, {e.ResourceSlice != nil, "resourceSlice"},
		{e.Verdict != nil, "verdict"}, {e.Outcome != nil, "outcome"}, {e.Leadership != nil, "leadership"},
		{e.Drift != nil, "drift"}, {e.Member != nil, "member"},
		{e.Membership != nil, "membership"},
	} {
		if p.set {
			if n == 0 {
				first = p.name
			}
			n++
		}
	}
	return n, first
}

// Validate reports the first thing wrong with the event's shape. The
// decoder refuses what Validate refuses, and the state ignores it.
func (e *Event) Validate() error {
	count, first := e.payloads()
	switch e.Kind {
	case KindAcceleratorQuota, KindNode, KindResourceFlavor, KindClusterQueue, KindDeviceClass, KindResourceSlice:
		if e.Key == "" {
			return fmt.Errorf("%s event #%d has no key: name the object", e.Kind, e.Seq)
		}
		switch e.Op {
		case OpDelete:
			if count != 0 {
				return fmt.Errorf("%s delete event #%d for %q carries a %s payload: a delete carries only the key", e.Kind, e.Seq, e.Key, first)
			}
			return nil
		case OpUpsert:
		default:
			return fmt.Errorf("%s event #%d for %q has op %q: use %q or %q", e.Kind, e.Seq, e.Key, e.Op, OpUpsert, OpDelete)
		}
		var name, want string
		switch e.Kind {
		case KindAcceleratorQuota:
			want = "quota"
			if e.Quota != nil {
				name = e.Quota.Name
			}
		case KindNode:
			want = "node"
			if e.Node != nil {
				name = e.Node.Name
			}
		case KindResourceFlavor:
			want = "flavor"
			if e.Flavor != nil {
				name = e.Flavor.Name
			}
		case KindClusterQueue:
			want = "queue"
			if e.Queue != nil {
				name = e.Queue.Name
			}
		case KindDeviceClass:
			want = "deviceClass"
			if e.DeviceClass != nil {
				name = e.DeviceClass.Name
			}
		case KindResourceSlice:
			want = "resourceSlice"
			if e.ResourceSlice != nil {
				name = e.ResourceSlice.Name
			}
		}
		if count != 1 || first != want {
			return fmt.Errorf("%s upsert event #%d for %q must carry exactly one payload, %q", e.Kind, e.Seq, e.Key, want)
		}
		if name != e.Key {
			return fmt.Errorf("%s upsert event #%d has key %q but its payload names %q: they must agree", e.Kind, e.Seq, e.Key, name)
		}
		return nil
	case KindVerdict:
		switch {
		case e.Op != "":
			return fmt.Errorf("verdict event #%d has an op: only object events carry one", e.Seq)
		case e.Key == "":
			return fmt.Errorf("verdict event #%d has no key: name the node written", e.Seq)
		case count != 1 || first != "verdict":
			return fmt.Errorf("verdict event #%d must carry exactly one payload, %q", e.Seq, "verdict")
		}
		switch e.Verdict.Operation {
		case "CREATE", "UPDATE", "DELETE":
		default:
			return fmt.Errorf("verdict event #%d has operation %q: use CREATE, UPDATE or DELETE", e.Seq, e.Verdict.Operation)
		}
		return nil
	case KindOutcome:
		return e.validateOutcome(count, first)
	case KindLeadership:
		return e.validateLeadership(count, first)
	case KindDrift:
		return e.validateDrift(count, first)
	case KindMember:
		return e.validateMember(count, first)
	case KindMembership:
		return e.validateMembership(count, first)
	case KindQuotaListing, KindQuotaListed:
		switch {
		case e.Op != "" || e.Key != "":
			return fmt.Errorf("%s event #%d has an op or a key: only object events carry them", e.Kind, e.Seq)
		case count != 0:
			return fmt.Errorf("%s event #%d carries a %s payload: a list marker carries none", e.Kind, e.Seq, first)
		case e.Kind == KindQuotaListing && e.Version != 0:
			return fmt.Errorf("%s event #%d carries a version: only the end of a list does", e.Kind, e.Seq)
		}
		return nil
	case KindTick, KindSynced, KindConfig, KindMeasureFailed, KindMeasureRecovered, KindStart:
		if e.Op != "" || e.Key != "" {
			return fmt.Errorf("%s event #%d has an op or a key: only object events carry them", e.Kind, e.Seq)
		}
		switch {
		case e.Kind == KindTick && count != 0:
			return fmt.Errorf("tick event #%d carries a %s payload: a tick carries none", e.Seq, first)
		case e.Kind == KindSynced && count != 0:
			return fmt.Errorf("synced event #%d carries a %s payload: a synced marker carries none", e.Seq, first)
		case e.Kind == KindConfig && (count != 1 || first != "config"):
			return fmt.Errorf("config event #%d must carry exactly one payload, %q", e.Seq, "config")
		case e.Kind == KindMeasureFailed && (count != 1 || first != "failure"):
			return fmt.Errorf("measure-failed event #%d must carry exactly one payload, %q", e.Seq, "failure")
		case e.Kind == KindMeasureRecovered && (count != 1 || first != "failure" || e.Failure.Source == ""):
			return fmt.Errorf("measure-recovered event #%d must carry exactly one payload, %q, naming its source", e.Seq, "failure")
		case e.Kind == KindStart && (count != 1 || first != "start"):
			return fmt.Errorf("start event #%d must carry exactly one payload, %q", e.Seq, "start")
		case e.Kind == KindConfig:
			if err := e.Config.Validate(); err != nil {
				return fmt.Errorf("config event #%d: %w", e.Seq, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("event #%d has unknown kind %q", e.Seq, e.Kind)
	}
}

// String is a one-line summary: "#7 Node upsert a100-1".
func (e Event) String() string {
	s := fmt.Sprintf("#%d %s", e.Seq, e.Kind)
	if e.Op != "" {
		s += " " + string(e.Op)
	}
	if e.Key != "" {
		s += " " + e.Key
	}
	return s
}

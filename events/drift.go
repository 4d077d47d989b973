package events

import (
	"fmt"
	"time"
)

// KindDrift is a Kueue object of a node's name changed by someone other
// than the manager: edited, deleted or created behind its back. The state
// reads nothing of it; the shell compares the node's objects again when it
// is applied, and writes back what differs. It is in the log so that a
// replay can say why the manager rewrote an object it had written before.
// Its Key is the node. It came with schema version 7.
const KindDrift Kind = "Drift"

// DriftChange is what happened to the object behind the manager's back.
type DriftChange string

// Changes a Drift event reports.
const (
	DriftCreated DriftChange = "created"
	DriftEdited  DriftChange = "edited"
	DriftDeleted DriftChange = "deleted"
)

// Drift is the payload of a Drift event: which object changed, and how.
type Drift struct {
	// Object is the object's kind: Cohort, ClusterQueue or LocalQueue.
	Object    string      `json:"object"`
	Namespace string      `json:"namespace,omitempty"`
	Name      string      `json:"name"`
	Change    DriftChange `json:"change"`
	// Version is the object's resourceVersion as the change left it (the
	// last one known, for a deletion).
	Version string `json:"version,omitempty"`
}

// Drifted is an object of node's name changed behind the manager's back.
func Drifted(t time.Time, node string, d Drift) Event {
	return Event{Time: t, Kind: KindDrift, Key: node, Drift: &d}
}

// validateDrift checks a Drift event's shape.
func (e *Event) validateDrift(count int, first string) error {
	switch {
	case e.Op != "":
		return fmt.Errorf("drift event #%d has an op: only object events carry one", e.Seq)
	case e.Key == "":
		return fmt.Errorf("drift event #%d has no key: name the node", e.Seq)
	case count != 1 || first != "drift":
		return fmt.Errorf("drift event #%d must carry exactly one payload, %q", e.Seq, "drift")
	}
	switch d := e.Drift; {
	case d.Object != "Cohort" && d.Object != "ClusterQueue" && d.Object != "LocalQueue":
		return fmt.Errorf("drift event #%d for %q names object kind %q: use Cohort, ClusterQueue or LocalQueue", e.Seq, e.Key, d.Object)
	case d.Name == "":
		return fmt.Errorf("drift event #%d for %q names no object", e.Seq, e.Key)
	case d.Change != DriftCreated && d.Change != DriftEdited && d.Change != DriftDeleted:
		return fmt.Errorf("drift event #%d for %q has change %q: use %q, %q or %q", e.Seq, e.Key, d.Change, DriftCreated, DriftEdited, DriftDeleted)
	}
	return nil
}

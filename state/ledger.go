package state

import (
	"maps"
	"strconv"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// The admission webhook keeps, in an AdmissionLedger, a Reservation for
// each tree write it admitted and has not yet seen land. These are the
// rule book's side of it: when the state shows a reserved write landed (or
// unable to land), which reservations can change a write's verdict, and
// the verdict of a write on every combination of the reserved writes that
// may still land. docs/webhook.md says why that is enough.

// Progress is the highest resourceVersion of the AcceleratorQuota events
// applied: the state holds every version of every AcceleratorQuota up to
// it, as the informer delivers them in order.
func (s *State) Progress() uint64 { return s.progress }

// Settled reports whether the state shows that the reserved write landed,
// or that it can no longer land. A CREATE has landed once the state holds
// the node with the reservation's uid. An UPDATE or DELETE judged on the
// version Base can land only as the version that follows it: once the
// state has seen Base and the node has moved past it, or is gone, it
// landed or never will. A reservation the state cannot place (no uid, no
// base) is never settled: it expires instead.
func (s *State) Settled(r *v1beta1.Reservation) bool {
	m := s.members[r.Node]
	if r.Operation == "CREATE" {
		return m != nil && r.UID != "" && m.uid == r.UID
	}
	base, err := strconv.ParseUint(r.Base, 10, 64)
	if err != nil || base == 0 || s.progress < base {
		return false
	}
	if m == nil || m.uid != r.UID {
		return true
	}
	return m.version > base
}

// Zone are the nodes whose facts a write of spec to node name (nil spec:
// a delete) reads or changes: the node and its old and new parent; and,
// for a write that changes the node's place or role (a create, a delete, a
// move, a new role), the ancestors of both parents, which decide places.
// Two writes whose zones do not meet cannot change each other's verdict.
func (s *State) Zone(name string, spec *v1beta1.AcceleratorQuotaSpec) map[string]bool {
	z := map[string]bool{name: true}
	m := s.members[name]
	var old, next shape
	if m != nil {
		old = m.shape
	}
	if spec != nil {
		next = shapeOf(name, spec)
	}
	structural := m == nil || spec == nil || old.parent != next.parent || old.role != next.role
	for _, p := range []string{old.parent, next.parent} {
		for cur := p; cur != "" && !z[cur]; {
			z[cur] = true
			if !structural {
				break
			}
			pm := s.members[cur]
			if pm == nil {
				break
			}
			cur = pm.shape.parent
		}
	}
	return z
}

// Related are the reservations of pending that can change the verdict of
// writing spec to name: those whose zone meets the write's, and those whose
// zone meets theirs, and so on, in the order given.
func (s *State) Related(name string, spec *v1beta1.AcceleratorQuotaSpec, pending []v1beta1.Reservation) []v1beta1.Reservation {
	zone := s.Zone(name, spec)
	zones := make([]map[string]bool, len(pending))
	for i := range pending {
		zones[i] = s.Zone(pending[i].Node, pending[i].Spec)
	}
	in := make([]bool, len(pending))
	for grew := true; grew; {
		grew = false
		for i, z := range zones {
			if in[i] || !meets(zone, z) {
				continue
			}
			in[i], grew = true, true
			maps.Copy(zone, z)
		}
	}
	var out []v1beta1.Reservation
	for i := range pending {
		if in[i] {
			out = append(out, pending[i])
		}
	}
	return out
}

func meets(a, b map[string]bool) bool {
	for n := range b {
		if a[n] {
			return true
		}
	}
	return false
}

// MaxUncertain bounds how many unsettled reservations one verdict weighs:
// it judges the write on each of their 2^n combinations.
const MaxUncertain = 3

// AdmitUncertain judges writing spec to name on tree (with marks, flavors
// and cfg) with each combination of the reserved writes that may land,
// other than none (State.Admit judges that one), and returns the first
// refusal, if any. Each combination costs an O(tree) judgement (Admit), so
// the caller passes a snapshot taken under the reducer's lock and judges
// outside it, and at most MaxUncertain reservations.
func AdmitUncertain(tree Tree, marks map[Pair]Amount, flavors map[string]bool, cfg events.Config,
	name string, spec *v1beta1.AcceleratorQuotaSpec, pending []v1beta1.Reservation) (Admission, bool) {
	for mask := 1; mask < 1<<len(pending); mask++ {
		t := maps.Clone(tree)
		if t == nil {
			t = Tree{}
		}
		for i, r := range pending {
			if mask&(1<<i) == 0 {
				continue
			}
			if r.Spec == nil {
				delete(t, r.Node)
			} else {
				t[r.Node] = r.Spec
			}
		}
		if a := Admit(t, marks, flavors, cfg, name, spec); !a.Allowed {
			return a, false
		}
	}
	return Admission{Allowed: true}, true
}

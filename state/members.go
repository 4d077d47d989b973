package state

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
)

// A management plane's members at a glance: root's status.members, which
// kubectl ome quota members prints. One entry per cluster the plane knows:
// its members, the clusters that left while holding copies, and those
// root's spec.goneClusters declares gone.

// Reasons of an entry of root's status.members. A member that does not
// answer because the plane's access checks refused the way to reach it
// (KubeconfigRefused, NoCredentialProvider, CredentialPluginFailed) has
// that word as its reason instead of ClusterUnreachable.
const (
	// MemberAnswering: it answers, nothing of it waits.
	MemberAnswering = "Answering"
	// MemberCopiesBehind: it answers, and lacks copies it should hold or
	// holds some made from an older generation of their node.
	MemberCopiesBehind = "CopiesBehind"
	// MemberRaisesWaiting: raises of its copies wait (lower before raise).
	MemberRaisesWaiting = "RaisesWaiting"
	// MemberHoldsOthersBack: raises of other members' copies wait for it
	// to release what it may hold above its share.
	MemberHoldsOthersBack = "HoldsOthersBack"
	// MemberUnreachable: the plane does not hear from it.
	MemberUnreachable = "ClusterUnreachable"
	// MemberNotReported: it never reported, and the member grace has not
	// passed: the fleet's Proportional splits wait for it.
	MemberNotReported = "NotReported"
	// MemberSplitOut: it never reported within the member grace, and is
	// left out of the Proportional splits until it does.
	MemberSplitOut = "SplitOut"
	// MemberStillAnswering: root's spec.goneClusters declares it gone
	// without force, but it answers, so it still counts.
	MemberStillAnswering = "StillAnswering"
	// MemberLeaving: it left the fleet and still holds copies.
	MemberLeaving = "ClusterLeaving"
	// MemberGone: declared gone and forgotten.
	MemberGone = "ClusterGone"
)

// RosterEntry is one cluster of a management plane's fleet at a glance.
type RosterEntry struct {
	Name      string
	State     v1beta1.MemberState
	Reachable bool
	// Since is when Reachable took its value; for a gone cluster, when
	// the plane forgot it.
	Since time.Time
	// LastReport is when it last reported, since the plane started; zero
	// when it has not.
	LastReport time.Time
	Reported   bool
	SplitOut   bool
	// Declared is set for a cluster that root's spec.goneClusters names
	// but that still counts, as it answers.
	Declared bool
	// Copies counts the copies it holds, as it last reported.
	Copies int
	// RaisesWaiting counts the raises of its copies that wait, and
	// ReleasesAwaited the raises of other members' copies that wait for
	// it to release (State.Waits).
	RaisesWaiting, ReleasesAwaited int
	// Reason and Message say where it stands and what to do.
	Reason, Message string
}

// reasonWord is the reason a message starts with, as the plane's access
// checks write them ("KubeconfigRefused: ..."): a word of two capitalised
// parts or more, then ": ".
var reasonWord = regexp.MustCompile(`^([A-Z][a-z]+(?:[A-Z][a-z]+)+): `)

// Roster lists every cluster a management plane knows, by name: its
// members, then the clusters that left it while holding copies, then
// those declared gone; nil in workload mode. It costs O(members + teams
// with raises that wait).
func (s *State) Roster() []RosterEntry {
	f := s.fleet
	if f == nil {
		return nil
	}
	// The waits, team by team in name order: per cluster, how many raises
	// of its copies wait, the first of them, and how many wait for it.
	raises, awaited := map[string]int{}, map[string]int{}
	first, firstFor := map[string]string{}, map[string]string{}
	for _, team := range slices.Sorted(maps.Keys(f.pending)) {
		m := s.members[team]
		if m == nil || m.hold == nil {
			continue
		}
		for _, c := range slices.Sorted(maps.Keys(m.hold.waits)) {
			w := m.hold.waits[c]
			raises[c]++
			if _, ok := first[c]; !ok {
				first[c] = team + ": " + w.String()
			}
			for _, h := range w.Holders {
				awaited[h]++
				if _, ok := firstFor[h]; !ok {
					firstFor[h] = fmt.Sprintf("%s's copy of %s (%s from %s to %s)", c, team, w.Pair, w.From, w.To)
				}
			}
		}
	}
	declared := map[string]bool{}
	for _, g := range f.goneSpec {
		if !f.gone[g.Name] {
			declared[g.Name] = true
		}
	}
	out := make([]RosterEntry, 0, len(f.names)+len(f.leaving)+len(f.gone))
	for _, name := range f.names {
		cl := f.clusters[name]
		e := RosterEntry{Name: name, State: v1beta1.MemberStateMember, Reachable: cl.reachable, Since: cl.since, LastReport: cl.reportedAt,
			Reported: f.reported[name], SplitOut: s.splitOut(name), Declared: declared[name], Copies: len(cl.copies),
			RaisesWaiting: raises[name], ReleasesAwaited: awaited[name]}
		e.Reason, e.Message = s.memberReason(&e, cl.message, first[name], firstFor[name])
		if note := InventoryNote(f.listed[name]); note != "" {
			e.Message = strings.TrimPrefix(e.Message+"; ", "; ") + note
		}
		out = append(out, e)
	}
	for _, name := range slices.Sorted(maps.Keys(f.leaving)) {
		cl := f.leaving[name]
		e := RosterEntry{Name: name, State: v1beta1.MemberStateLeaving, Reachable: cl.reachable, Since: cl.since, LastReport: cl.reportedAt,
			Reported: cl.heard, Declared: declared[name], Copies: len(cl.copies), ReleasesAwaited: awaited[name], Reason: MemberLeaving}
		why := ""
		if cl.left != "" {
			why = " (" + cl.left + ")"
		}
		if cl.reachable {
			e.Message = fmt.Sprintf("it left the fleet%s and still holds %d copies of the plane's nodes: the plane deletes them", why, len(cl.copies))
		} else {
			e.Message = fmt.Sprintf("it left the fleet%s and still holds %d copies of the plane's nodes, but the plane does not reach it to delete them (%s): "+
				"its cluster-admin can release them with kubectl ome quota release --origin %s; if the cluster is gone for good, forget it: kubectl ome quota forget %s",
				why, len(cl.copies), cl.message, s.cfg.Origin, name)
		}
		if e.Declared {
			e.Message += "; root's spec.goneClusters declares it gone, but it still answers, so what it holds still counts"
		}
		out = append(out, e)
	}
	for _, name := range slices.Sorted(maps.Keys(f.gone)) {
		force := ""
		for _, g := range f.goneSpec {
			if g.Name == name && g.Force {
				force = " with force"
			}
		}
		out = append(out, RosterEntry{Name: name, State: v1beta1.MemberStateGone, Since: f.goneSince[name], Reason: MemberGone,
			Message: fmt.Sprintf("root's spec.goneClusters declares it gone%s: the plane forgot it, stops reaching for it, and what it last held no longer counts "+
				"against the fleet's budgets; to take it back, kubectl ome quota forget --undo %s", force, name)})
	}
	return out
}

// memberReason is a member's reason and message: first why it does not
// answer, else what of it waits. why is its unreachable message, raise
// the first of its raises that waits, held the first raise that waits for
// it.
func (s *State) memberReason(e *RosterEntry, why, raise, held string) (string, string) {
	others := ""
	if e.ReleasesAwaited > 0 {
		others = fmt.Sprintf("%d raise(s) of other members' copies wait for it to release what it may hold above its share, first %s", e.ReleasesAwaited, held)
	}
	if !e.Reachable {
		reason := MemberUnreachable
		if m := reasonWord.FindStringSubmatch(why); m != nil {
			reason = m[1]
		}
		grace := s.cfg.MemberGrace.Duration
		var msg string
		switch {
		case !e.Reported && e.SplitOut:
			if reason == MemberUnreachable {
				reason = MemberSplitOut
			}
			msg = fmt.Sprintf("it has never reported, and the member grace (%s) has passed: the fleet's Proportional splits leave it out until it reports; the plane does not hear from it: %s", grace, why)
		case !e.Reported:
			if reason == MemberUnreachable {
				reason = MemberNotReported
			}
			wait := "until it does (the plane's member grace is 0: it waits for ever)"
			if grace > 0 {
				wait = fmt.Sprintf("until it does, or for the member grace (%s) at most", grace)
			}
			msg = "it has never reported: the fleet's Proportional splits wait for it " + wait + "; the plane does not hear from it: " + why
		default:
			msg = "the plane does not hear from it, so its shares and copies stay as they were: " + why
		}
		if others != "" {
			msg += "; " + others + ": if the cluster is gone for good, forget it (kubectl ome quota forget " + e.Name + ")"
		}
		return reason, msg
	}
	switch {
	case e.Declared:
		return MemberStillAnswering, "root's spec.goneClusters declares it gone without force, but it still answers the plane, so it stays a member and what it holds still counts: " +
			"it is forgotten once the plane no longer hears from it (kubectl ome quota forget --force " + e.Name + " forgets it now)"
	case e.RaisesWaiting > 0:
		msg := fmt.Sprintf("%d raise(s) of its copies wait, first %s", e.RaisesWaiting, raise)
		if others != "" {
			msg += "; " + others
		}
		return MemberRaisesWaiting, msg
	case others != "":
		return MemberHoldsOthersBack, others + ": they go once its lowered copies are read back"
	}
	return MemberAnswering, ""
}

// InventoryNote is what the fleet's inventory says of a member's control
// plane when it is not healthy ("" when it says nothing or True): a
// ClusterProfile's ControlPlaneHealthy condition.
func InventoryNote(m events.Membership) string {
	if m.Health != "False" && m.Health != "Unknown" {
		return ""
	}
	return fmt.Sprintf("its inventory (%s) reports its control plane healthy %s: %s", m.Source, m.Health, m.Message)
}

// Behind is the entry of a member that lacks behind copies it should hold,
// or holds them made from an older generation of their node (the fleet
// half of the projector counts them): an answering member then says so.
func (e RosterEntry) Behind(behind int) RosterEntry {
	if behind > 0 && e.Reason == MemberAnswering {
		e.Reason = MemberCopiesBehind
		e.Message = fmt.Sprintf("%d of the copies it should hold are missing or made from an older generation of their node: the plane writes them, "+
			"and the member's manager turns them into Kueue objects; if this lasts, the plane's log says why its writes fail", behind)
	}
	return e
}

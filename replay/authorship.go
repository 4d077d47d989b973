package replay

import (
	"fmt"
	"slices"
	"strconv"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"ome.io/quota-manager/api/v1beta1"
)

// Authorship of a verdict in a trail (TrailStep.Authorship). A Verdict
// event says who asked, as the review the webhook received says it: unless
// the webhook requires client certificates, anyone who can reach its port
// can send a review naming any user. So a verdict names its user as the
// author of a change only when the log then holds exactly the write it
// admitted, and a verdict that carries more weight (an authenticated one,
// or one whose record is the stored object's) is not outweighed by one
// that carries less.
const (
	// authorshipAuthor: admitted, and the write it admitted landed
	// (TrailStep.Landed); no other verdict claims that write.
	authorshipAuthor = "author"
	// authorshipClaimed: admitted, but the log holds no write that is the
	// one it admitted: a forged review, a write the API server then
	// refused (a conflict, a later webhook), or one not yet seen when the
	// log ends.
	authorshipClaimed = "claimed"
	// authorshipContested: admitted, and the write it admitted landed
	// (TrailStep.Landed), but another admitted verdict claims the same
	// write: it is the author's of neither.
	authorshipContested = "contested"
	// authorshipOutweighed: admitted, and the write it admitted landed
	// (TrailStep.Landed), but so did a verdict of more weight (weigh) of
	// another request, whose user is the author: the review may be forged.
	authorshipOutweighed = "outweighed"
	// authorshipUnverified: admitted, but the log cannot tell whether its
	// write landed (TrailStep.Note says why): the verdict asserts no
	// authorship.
	authorshipUnverified = "unverified"
	// authorshipRequest: denied. It changed nothing, so it is what its
	// user asked, if the review was theirs.
	authorshipRequest = "request"
)

// Why a verdict is unverified (TrailStep.Note).
const (
	// A log of a build before the webhook recorded them.
	noteNoIdentity = "no object uid or version recorded"
	// Writes recorded by a build before the informers recorded them.
	noteUnversioned = "the node's writes carry no uid or version"
	// The object changed while nothing recorded: its write may be among
	// those the log did not see.
	noteGap = "the next version was listed at a start, after a gap"
)

// claim is an admitted verdict waiting for the write it admitted.
type claim struct {
	step int    // its index in the steps
	base uint64 // an UPDATE's or DELETE's base version
}

// attribute matches the admitted verdicts of one node's trail, in the
// trail's order, with the writes of the log that follow them, and sets
// each verdict's Authorship (and Landed, Note) and each write's author
// (User, Groups) or its rival claims (ClaimedBy). An admitted verdict is
// decided by the first write that could be its own:
//
//   - CREATE: the first version of the object with the verdict's
//     ObjectUID; it is the creation when the log held no version of that
//     uid just before and its spec is the spec admitted.
//   - UPDATE: the first version of that uid above the verdict's Base; it
//     is the update when the log's version before it is Base, the spec
//     changed, and the spec is the one admitted.
//   - DELETE: the deletion of that uid; it is the verdict's when the last
//     version the log held before it is Base.
//
// A write that two admitted verdicts of different requests claim is the
// author's of the one that weighs more (weigh): the API server's record
// of the write, then its client certificate. When the heaviest claimants
// are more than one request, it is the author's of none of them. A
// claimant of less weight never makes the write's author not established:
// it is outweighed. Everything here is in the steps' order, so the result
// is the same on every run.
func attribute(steps []TrailStep) {
	var pending []claim
	matched := map[int][]int{} // write step -> the verdict steps it matches
	var writes []int           // the keys of matched, in order
	for i := range steps {
		s := &steps[i]
		switch s.What {
		case "verdict":
			v := s.verdict
			switch {
			case !v.Allowed:
				s.Authorship = authorshipRequest
			case v.ObjectUID == "" || (v.Operation != "CREATE" && v.Base == ""):
				s.Authorship, s.Note = authorshipUnverified, noteNoIdentity
			default:
				var base uint64
				if v.Operation != "CREATE" {
					var err error
					if base, err = strconv.ParseUint(v.Base, 10, 64); err != nil || base == 0 {
						// No version follows a base that is none.
						s.Authorship = authorshipClaimed
						continue
					}
				}
				pending = append(pending, claim{step: i, base: base})
			}
		case "write":
			w := s.write
			if w.Spec != nil && (w.Version == 0 || w.UID == "") {
				// A build that recorded neither: what is pending cannot
				// be told apart from this write.
				for _, c := range pending {
					steps[c.step].Authorship, steps[c.step].Note = authorshipUnverified, noteUnversioned
				}
				pending = nil
				continue
			}
			// A version listed at a start that the log did not hold
			// before: the object changed while nothing recorded, maybe
			// more than once.
			gap := w.Spec != nil && w.Listed && (w.Prev != w.Version || w.PrevUID != w.UID)
			keep := pending[:0]
			for _, c := range pending {
				v := steps[c.step].verdict
				var decided, ok bool
				switch {
				case v.Operation == "CREATE" && w.Spec != nil && w.UID == v.ObjectUID:
					decided, ok = true, w.PrevUID != w.UID && sameSpec(v.New, w.Spec)
				case v.Operation == "UPDATE" && w.Spec != nil && w.UID == v.ObjectUID && w.Version > c.base:
					decided = true
					ok = w.PrevUID == w.UID && w.Prev == c.base && len(w.Changes) > 0 && sameSpec(v.New, w.Spec)
				case v.Operation == "DELETE" && w.Spec == nil && w.PrevUID == v.ObjectUID:
					decided, ok = true, w.Prev == c.base
				}
				switch {
				case !decided:
					keep = append(keep, c)
				case gap:
					steps[c.step].Authorship, steps[c.step].Note = authorshipUnverified, noteGap
				case ok:
					if matched[i] == nil {
						writes = append(writes, i)
					}
					matched[i] = append(matched[i], c.step)
				default:
					steps[c.step].Authorship = authorshipClaimed
				}
			}
			pending = keep
		}
	}
	for _, c := range pending {
		steps[c.step].Authorship = authorshipClaimed
	}
	for _, w := range writes {
		vs := matched[w]
		// Only the heaviest claimants count; one request judged twice (a
		// retry to the same replica) is one claimant.
		top := 0
		for _, j := range vs {
			top = max(top, weigh(steps[j].verdict, steps[w].write))
		}
		type claimant struct{ uid, user string }
		var by []claimant
		for _, j := range vs {
			if weigh(steps[j].verdict, steps[w].write) < top {
				continue
			}
			if c := (claimant{steps[j].verdict.UID, steps[j].verdict.User}); !slices.Contains(by, c) {
				by = append(by, c)
			}
		}
		authorship := authorshipAuthor
		if len(by) > 1 {
			authorship = authorshipContested
		}
		author := -1
		for _, j := range vs {
			steps[j].Landed = steps[w].Seq
			switch {
			case weigh(steps[j].verdict, steps[w].write) < top:
				steps[j].Authorship = authorshipOutweighed
			case authorship == authorshipContested:
				steps[j].Authorship = authorship
				steps[w].ClaimedBy = append(steps[w].ClaimedBy, fmt.Sprintf("%s at %s", orNone(steps[j].User), stepSeq(steps[j])))
			default:
				steps[j].Authorship = authorship
				if author < 0 {
					author = j
				}
			}
		}
		if author >= 0 {
			v := steps[author].verdict
			steps[w].User, steps[w].Groups = v.User, v.Groups
		}
	}
}

// weigh is what an admitted verdict that matches write w weighs against
// others that match it too. Most: its record is the stored object's
// (events.RecordOf: the API server's own record of who wrote it and when,
// which a forger would have to foretell to the second); then: it came
// from an authenticated caller, the API server (events.Verdict's
// Authenticated). A verdict of neither, as every verdict of a log before
// schema version 13, weighs nothing.
func weigh(v *VerdictEntry, w *SpecChange) int {
	n := 0
	if v.Record != "" && v.Record == w.Record {
		n += 2
	}
	if v.Authenticated {
		n++
	}
	return n
}

// sameSpec compares an admitted spec with a stored one by meaning (an
// amount of "1000m" is one of "1").
func sameSpec(admitted, stored *v1beta1.AcceleratorQuotaSpec) bool {
	return admitted != nil && stored != nil && apiequality.Semantic.DeepEqual(*admitted, *stored)
}

// stepSeq places a step for people: "12", or "1:4" in another log.
func stepSeq(s TrailStep) string {
	if s.Log > 0 {
		return fmt.Sprintf("%d:%d", s.Log, s.Seq)
	}
	return fmt.Sprint(s.Seq)
}

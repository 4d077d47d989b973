package apply

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/projector"
)

// CopyWriter writes a management plane's copies (projector.Copies) to one
// member cluster's API server, and sweeps the copies of its origin that
// are no longer wanted. It only ever writes or deletes an AcceleratorQuota
// that carries its origin label: a node of the member's own under a fleet
// node's name is never touched, and neither is anything below it.
type CopyWriter struct {
	Origin string
	Quotas versioned.Interface
	// Parallel bounds the writes in flight at once (at least one): the
	// copies of one level of the tree go together, so that a move of many
	// teams costs a member about one round trip, not one per team.
	Parallel int
}

// CopyReport is how one pass left the member.
type CopyReport struct {
	// Written are the copies written, Swept those deleted, in the order
	// they were; Unchanged counts the copies found already in place.
	Written, Swept []string
	Unchanged      int
	// Conflicts are the fleet nodes not written because the member holds
	// a node of its own under their name (or under a parent's), with why.
	Conflicts map[string]string
	// Failed are the copies whose write or deletion the member refused,
	// with its answer.
	Failed map[string]string
	// Behind are the team copies not written because the member's copy is
	// not the one the plan was made from (the plane's state has not read
	// its latest version yet, or the member refused the write for that
	// reason): the member's next report plans them again.
	Behind []string
}

// Apply brings the member's copies to want, given every AcceleratorQuota
// the member holds (as its watch delivered them: they are only read): it
// writes, parents first, each copy that differs from the member's, and
// then deletes, children first, the copies of its origin that want
// neither lists nor holds. A refused write or deletion is in the report.
// A team's copy is written only on the version its plan was made from
// (its metadata.resourceVersion, which the API server checks), or created
// where the plan read none: a copy the watch shows at another version is
// left for the next plan (Behind).
func (w *CopyWriter) Apply(ctx context.Context, want projector.MemberCopies, objects []*v1beta1.AcceleratorQuota) CopyReport {
	rep := CopyReport{Conflicts: map[string]string{}, Failed: map[string]string{}}
	aqs := w.Quotas.OmeV1beta1().AcceleratorQuotas()
	have := make(map[string]*v1beta1.AcceleratorQuota, len(objects))
	for _, o := range objects {
		have[o.Name] = o
	}
	wanted := make(map[string]bool, len(want.Copies))
	blocked := map[string]bool{}
	// What to write is decided first, from what the member holds; the
	// writes then go level by level (a member refuses a node whose parent
	// it does not hold), those of one level at once.
	level := map[string]int{}
	var writes []*v1beta1.AcceleratorQuota
	for _, c := range want.Copies {
		wanted[c.Name] = true
		parent := c.Spec.ParentRef.Name
		if d, ok := level[parent]; ok {
			level[c.Name] = d + 1 // under a parent outside the plan: level 0
		}
		cur := have[c.Name]
		switch {
		case blocked[parent]:
			blocked[c.Name] = true
			rep.Conflicts[c.Name] = fmt.Sprintf("not copied: its parent %s on the member is not this plane's copy", parent)
			continue
		case cur != nil && cur.Labels[v1beta1.OriginLabel] != w.Origin:
			blocked[c.Name] = true
			rep.Conflicts[c.Name] = conflictMessage(cur, w.Origin)
			continue
		}
		if c.Spec.Role == v1beta1.RoleClusterQueue {
			// A team's copy is written on the version its plan read, or
			// created (with zero budgets) where the plan read none.
			if (c.ResourceVersion == "") != (cur == nil) || (cur != nil && cur.ResourceVersion != c.ResourceVersion) {
				rep.Behind = append(rep.Behind, c.Name)
				continue
			}
			if cur != nil {
				if f, ok := cur.Annotations[v1beta1.FenceAnnotation]; ok && c.Annotations[v1beta1.FenceAnnotation] == "" {
					c = c.DeepCopy()
					c.Annotations[v1beta1.FenceAnnotation] = f // a past fence stays, so that it costs no write
				}
			}
		}
		if cur != nil && copyInPlace(cur, c) {
			rep.Unchanged++
			continue
		}
		writes = append(writes, c)
	}
	errs := make([]error, len(writes))
	parallel := w.Parallel
	if parallel < 1 {
		parallel = 1
	}
	for lo := 0; lo < len(writes); {
		hi := lo + 1
		for hi < len(writes) && level[writes[hi].Name] == level[writes[lo].Name] {
			hi++
		}
		var g errgroup.Group
		g.SetLimit(parallel)
		for i := lo; i < hi; i++ {
			g.Go(func() error {
				c := writes[i]
				body, err := json.Marshal(c)
				if err == nil {
					force := true
					_, err = aqs.Patch(ctx, c.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
				}
				errs[i] = err
				return nil
			})
		}
		_ = g.Wait() // each write's error is in errs
		lo = hi
	}
	for i, c := range writes {
		switch err := errs[i]; {
		case err == nil:
			rep.Written = append(rep.Written, c.Name)
		case c.ResourceVersion != "" && (apierrors.IsConflict(err) || apierrors.IsNotFound(err)):
			rep.Behind = append(rep.Behind, c.Name)
		default:
			rep.Failed[c.Name] = err.Error()
		}
	}
	held := map[string]bool{}
	for _, n := range want.Held {
		held[n] = true
	}
	var sweep []*v1beta1.AcceleratorQuota
	for name, cur := range have {
		if cur.Labels[v1beta1.OriginLabel] == w.Origin && !wanted[name] && !held[name] {
			sweep = append(sweep, cur)
		}
	}
	depth := func(aq *v1beta1.AcceleratorQuota) int {
		d := 0
		for cur := aq; cur.Spec.ParentRef != nil && d <= len(have); d++ {
			if cur = have[cur.Spec.ParentRef.Name]; cur == nil {
				break
			}
		}
		return d
	}
	slices.SortFunc(sweep, func(a, b *v1beta1.AcceleratorQuota) int {
		if c := cmp.Compare(depth(b), depth(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	for _, cur := range sweep {
		uid := cur.UID // the copy seen, not one made since under its name
		err := aqs.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			rep.Swept = append(rep.Swept, cur.Name)
		case apierrors.IsConflict(err):
			// Made again since the list: the next pass judges the new one.
		default:
			rep.Failed[cur.Name] = err.Error()
		}
	}
	return rep
}

func conflictMessage(cur *v1beta1.AcceleratorQuota, origin string) string {
	if o := cur.Labels[v1beta1.OriginLabel]; o != "" {
		return fmt.Sprintf("the member holds %s as a copy of another plane (origin %q, this plane is %q): it is left as it is", cur.Name, o, origin)
	}
	return fmt.Sprintf("the member holds a node of its own named %s: it is never overwritten; rename one of the two", cur.Name)
}

// copyInPlace reports whether the member's object already is the copy:
// the same spec and the same marks.
func copyInPlace(cur, want *v1beta1.AcceleratorQuota) bool {
	for k, v := range want.Labels {
		if cur.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if cur.Annotations[k] != v {
			return false
		}
	}
	return apiequality.Semantic.DeepEqual(cur.Spec, want.Spec)
}

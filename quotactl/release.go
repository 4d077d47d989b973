package quotactl

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

type releaseOptions struct {
	*options
	origin string
	dryRun bool
}

func (o *options) releaseCommand() *cobra.Command {
	ro := &releaseOptions{options: o}
	c := &cobra.Command{
		Use:   "release --origin PLANE",
		Short: "Delete the copies a management plane wrote on this cluster, when the plane cannot",
		Long: `release deletes, on this member cluster, every copy of the fleet tree that the management
plane named PLANE projected here (label ome.io/quota-origin=PLANE), children first; this cluster's
quota manager then deletes their Kueue objects. It is for a cluster that left a plane's fleet while
the plane could not reach it, or for copies of an origin the plane no longer uses: a plane that
still counts this cluster as a member and reaches it writes its copies again.

This cluster's webhook refuses changes to a copy from anyone but the plane; it lets a release
through for a user who may "release" acceleratorquotas.ome.io (cluster-admin may), and records who
released what in its event log. Each copy is first marked with the annotation
ome.io/quota-release=PLANE, then deleted. A plain delete of a copy stays refused.`,
		Example: `  # What would be released
  kubectl ome quota release --origin fleet --dry-run

  # Release plane fleet's copies
  kubectl ome quota release --origin fleet`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if ro.origin == "" {
				return usageError(c, "release needs --origin: the plane whose copies to delete (the value of their ome.io/quota-origin label)")
			}
			if errs := validation.IsValidLabelValue(ro.origin); len(errs) > 0 {
				return usageError(c, "--origin=%q is not a label value: %s", ro.origin, errs[0])
			}
			cs, err := ro.clients()
			if err != nil {
				return err
			}
			return ro.run(c.Context(), c, cs)
		},
	}
	c.Flags().StringVar(&ro.origin, "origin", "", "The plane whose copies to release: the value of their ome.io/quota-origin label.")
	c.Flags().BoolVar(&ro.dryRun, "dry-run", false, "List the copies that would be released, and change nothing.")
	return c
}

func (ro *releaseOptions) run(ctx context.Context, c *cobra.Command, cs *clients) error {
	aqs := cs.quotas.OmeV1beta1().AcceleratorQuotas()
	list, err := aqs.List(ctx, metav1.ListOptions{LabelSelector: v1beta1.OriginLabel + "=" + ro.origin})
	if err != nil {
		return err
	}
	out := ro.streams.Out
	if len(list.Items) == 0 {
		fmt.Fprintf(out, "No copies of plane %q on this cluster.\n", ro.origin)
		return nil
	}
	copies := childrenFirst(list.Items)
	if ro.dryRun {
		for _, aq := range copies {
			fmt.Fprintf(out, "acceleratorquota.ome.io/%s released (dry run)\n", aq.Name)
		}
		return nil
	}
	mark, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1beta1.ReleaseAnnotation: ro.origin}}})
	if err != nil {
		return err
	}
	for _, aq := range copies {
		if aq.Annotations[v1beta1.ReleaseAnnotation] != ro.origin {
			if _, err := aqs.Patch(ctx, aq.Name, types.MergePatchType, mark, metav1.PatchOptions{}); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return fmt.Errorf("marking %s for release: %w", aq.Name, err)
			}
		}
		uid := aq.UID
		err := aqs.Delete(ctx, aq.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			fmt.Fprintf(out, "acceleratorquota.ome.io/%s released\n", aq.Name)
		default:
			return fmt.Errorf("deleting %s: %w", aq.Name, err)
		}
	}
	return nil
}

// childrenFirst orders copies so that each comes before its parent: the
// webhook refuses to delete a node that still has children.
func childrenFirst(items []v1beta1.AcceleratorQuota) []v1beta1.AcceleratorQuota {
	byName := make(map[string]*v1beta1.AcceleratorQuota, len(items))
	for i := range items {
		byName[items[i].Name] = &items[i]
	}
	depth := func(aq *v1beta1.AcceleratorQuota) int {
		d := 0
		for cur := aq; cur.Spec.ParentRef != nil && d <= len(items); d++ {
			if cur = byName[cur.Spec.ParentRef.Name]; cur == nil {
				break
			}
		}
		return d
	}
	out := slices.Clone(items)
	slices.SortFunc(out, func(a, b v1beta1.AcceleratorQuota) int {
		return cmp.Or(cmp.Compare(depth(&b), depth(&a)), cmp.Compare(a.Name, b.Name))
	})
	return out
}

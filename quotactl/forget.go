package quotactl

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

type forgetOptions struct {
	*options
	force, undo, dryRun bool
}

func (o *options) forgetCommand() *cobra.Command {
	fo := &forgetOptions{options: o}
	c := &cobra.Command{
		Use:   "forget CLUSTER [--force] | forget --undo CLUSTER",
		Short: "Declare a member cluster of a management plane gone for good, or take it back",
		Long: `forget declares, on a management plane, that member cluster CLUSTER is gone for good: it adds
CLUSTER to root's spec.goneClusters. The plane then forgets it: it stops reaching for it, leaves it
out of the splits, and what it last held (its copies as last read, and the hold records' bound)
no longer counts against the fleet's budgets, so that raises waiting for it to release go on.
An Explicit budget that still names it in perCluster is held until you move its share.

A cluster that still answers the plane is not gone: forget refuses it, and so does the plane's
webhook, unless --force, which forgets it while its Kueue may still admit work against the copies
it holds (release them there with kubectl ome quota release --origin PLANE). The write is judged
by the plane's webhook and recorded with your user in the plane's event log
(ome-quota-manager replay LOG --node root --history names you).

forget --undo CLUSTER takes the declaration back: the plane counts the cluster again if its
inventory lists it. Both are idempotent, and update root on the version they read, so that a
concurrent change of root is never overwritten.`,
		Example: `  # A cluster destroyed while the plane could not reach it
  kubectl ome quota forget west --context plane

  # Forget a cluster that still answers (its copies keep admitting there)
  kubectl ome quota forget west --force --context plane

  # Take it back
  kubectl ome quota forget --undo west --context plane`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(c, "forget needs exactly one CLUSTER, got %d", len(args))
			}
			if args[0] == "" {
				return usageError(c, "the cluster name is empty: name the member cluster to forget (kubectl ome quota members lists them)")
			}
			if len(args[0]) > v1beta1.MaxClusterNameLength {
				return usageError(c, "cluster name %q is %d characters long, more than the %d a member's name may have", args[0], len(args[0]), v1beta1.MaxClusterNameLength)
			}
			if fo.undo && fo.force {
				return usageError(c, "--undo takes a declaration back, and --force makes one: pass one of them")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			cs, err := fo.clients()
			if err != nil {
				return err
			}
			return fo.run(c.Context(), cs, args[0])
		},
	}
	c.Flags().BoolVar(&fo.force, "force", false, "Forget the cluster even while it answers the plane: what it holds stops counting though its Kueue may still admit work.")
	c.Flags().BoolVar(&fo.undo, "undo", false, "Take the declaration back: the plane counts the cluster again if its inventory lists it.")
	c.Flags().BoolVar(&fo.dryRun, "dry-run", false, "Have the plane's API server and webhook judge the write, and change nothing.")
	return c
}

// forgetPlan is what forget makes of root as read: the goneClusters to
// write, and what to say; write is false when root already says it.
type forgetPlan struct {
	gone  []v1beta1.GoneCluster
	write bool
	say   string
}

// planForget decides forget (or --undo) of cluster on root as read; an
// error says why it is refused. It reads root's status.members, which the
// plane keeps: the webhook judges the write again on the plane's own view.
func planForget(root *v1beta1.AcceleratorQuota, cluster string, force, undo bool) (forgetPlan, error) {
	cur := root.Spec.GoneClusters
	i := slices.IndexFunc(cur, func(g v1beta1.GoneCluster) bool { return g.Name == cluster })
	if undo {
		if i < 0 {
			return forgetPlan{say: fmt.Sprintf("cluster %s is not declared gone: nothing to take back", cluster)}, nil
		}
		return forgetPlan{gone: slices.Delete(slices.Clone(cur), i, i+1), write: true,
			say: fmt.Sprintf("cluster %s taken back: the plane counts it again if its inventory lists it (kubectl ome quota members)", cluster)}, nil
	}
	if i >= 0 && (cur[i].Force || !force) {
		return forgetPlan{say: fmt.Sprintf("cluster %s is declared gone already", cluster)}, nil
	}
	j := slices.IndexFunc(root.Status.Members, func(m v1beta1.MemberStatus) bool { return m.Cluster == cluster })
	if j < 0 && i < 0 {
		known := make([]string, 0, len(root.Status.Members))
		for _, m := range root.Status.Members {
			known = append(known, m.Cluster)
		}
		return forgetPlan{}, fmt.Errorf("the plane knows no cluster %s: its clusters are %s; check the name (kubectl ome quota members)", cluster, listed(known))
	}
	answering := j >= 0 && root.Status.Members[j].Reachable && root.Status.Members[j].State != v1beta1.MemberStateGone
	if answering && !force {
		return forgetPlan{}, fmt.Errorf("cluster %s still answers the plane, so it is not gone and what it holds still counts against the fleet's budgets: "+
			"shut it down or revoke the plane's access to it first, or pass --force to forget it now, while its Kueue may still admit work against the copies it holds", cluster)
	}
	next := slices.Clone(cur)
	if i >= 0 {
		next[i].Force = true
	} else {
		next = append(next, v1beta1.GoneCluster{Name: cluster, Force: force})
	}
	say := fmt.Sprintf("cluster %s declared gone: the plane forgets it, and what it held no longer counts against the fleet's budgets", cluster)
	if answering {
		say += "; it still answers, so its Kueue may still admit work against the copies it holds: release them there with kubectl ome quota release --origin PLANE (the plane's --origin)"
	}
	return forgetPlan{gone: next, write: true, say: say}, nil
}

func listed(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return fmt.Sprint(names)
}

func (fo *forgetOptions) run(ctx context.Context, cs *clients, cluster string) error {
	aqs := cs.quotas.OmeV1beta1().AcceleratorQuotas()
	for attempt := 0; ; attempt++ {
		root, err := planeRoot(ctx, cs)
		if err != nil {
			return err
		}
		plan, err := planForget(root, cluster, fo.force, fo.undo)
		if err != nil {
			return err
		}
		if !plan.write {
			fmt.Fprintln(fo.streams.Out, plan.say)
			return nil
		}
		root.Spec.GoneClusters = plan.gone
		opts := metav1.UpdateOptions{}
		if fo.dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		// root carries the version it was read at: the API server refuses
		// the write if root changed since, and forget reads it again.
		_, err = aqs.Update(ctx, root, opts)
		switch {
		case apierrors.IsConflict(err) && attempt < 5:
			continue
		case err != nil:
			return err
		}
		if fo.dryRun {
			plan.say += " (dry run)"
		}
		fmt.Fprintln(fo.streams.Out, plan.say)
		return nil
	}
}

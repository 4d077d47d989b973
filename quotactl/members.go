package quotactl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// MembersReport is `kubectl ome quota members -o json|yaml`: root's
// status.members on a management plane, as the plane last wrote it.
type MembersReport struct {
	metav1.TypeMeta `json:",inline"`
	Members         []v1beta1.MemberStatus `json:"members"`
}

// DeepCopyObject implements runtime.Object.
func (r *MembersReport) DeepCopyObject() runtime.Object { return deepCopyJSON(r) }

type membersOptions struct {
	*options
	output string
}

func (o *options) membersCommand() *cobra.Command {
	mo := &membersOptions{options: o}
	c := &cobra.Command{
		Use:   "members",
		Short: "List a management plane's member clusters, and how each stands",
		Long: `members prints, on a management plane, every cluster of its fleet as the plane last wrote it
on root's status.members: whether the plane hears from it and since when, its last report,
whether it ever reported (a member that has not is left out of the Proportional splits once
the plane's member grace passes), the copies it holds and those it is behind on, the raises of
its copies that wait (lower before raise), the raises of other members' copies that wait for
it to release, and why. Clusters that left the fleet while holding copies, and those declared
gone (kubectl ome quota forget), are listed too. Point it at the plane, not at a member.`,
		Example: `  # The plane's members at a glance
  kubectl ome quota members --context plane

  # The same, as a versioned report
  kubectl ome quota members --context plane -o yaml`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError(c, "members takes no arguments, got %d: %s", len(args), strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(c, mo.output); err != nil {
				return err
			}
			cs, err := mo.clients()
			if err != nil {
				return err
			}
			root, err := planeRoot(c.Context(), cs)
			if err != nil {
				return err
			}
			rep := &MembersReport{TypeMeta: typeMeta("MembersReport"), Members: root.Status.Members}
			if done, err := printReport(c, mo.output, rep, mo.streams.Out); done {
				return err
			}
			return printMembers(mo.streams.Out, rep.Members, mo.now(), palette(mo.colorOn(mo.streams.Out)))
		},
	}
	addOutputFlag(c.Flags(), &mo.output)
	return c
}

// errNotPlane is the answer of a command that needs a management plane,
// pointed at a cluster whose root lists no members.
var errNotPlane = errors.New("root's status lists no member clusters: this cluster's quota manager is not a management plane (it runs in workload mode, or has not written root's status yet). " +
	"A management plane's commands read its root: point kubectl at the plane, e.g. --context PLANE")

// planeRoot reads root and checks that it is a management plane's.
func planeRoot(ctx context.Context, cs *clients) (*v1beta1.AcceleratorQuota, error) {
	root, err := cs.quotas.OmeV1beta1().AcceleratorQuotas().Get(ctx, v1beta1.RootName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("this cluster has no root AcceleratorQuota: the quota manager is not installed here, or has not started yet; point kubectl at the management plane, e.g. --context PLANE")
	}
	if err != nil {
		return nil, err
	}
	if len(root.Status.Members) == 0 {
		if members := (&cluster{quotas: []v1beta1.AcceleratorQuota{*root}}).planeMembers(); members != nil {
			return nil, fmt.Errorf("root's status lists the plane's members in its capacity (%s) but not in status.members: the plane's quota manager is older than this kubectl ome; upgrade it", strings.Join(members, ", "))
		}
		return nil, errNotPlane
	}
	return root, nil
}

// printMembers prints the members as a table, then what each one that
// is not simply answering has to say.
func printMembers(w io.Writer, members []v1beta1.MemberStatus, now time.Time, p palette) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tSTATE\tREACHABLE\tSINCE\tLAST REPORT\tREPORTED\tCOPIES\tBEHIND\tWAITING\tHOLDING BACK\tREASON")
	ago := func(t *metav1.Time) string {
		if t == nil {
			return "-"
		}
		return age(now.Sub(t.Time))
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	for _, m := range members {
		reported := yes(m.Reported)
		if m.SplitOut {
			reported = "no, split out"
		}
		reason := m.Reason
		switch {
		case m.Reason == "Answering":
			reason = p.good(reason)
		case m.State == v1beta1.MemberStateGone:
		case !m.Reachable:
			reason = p.bad(reason)
		default:
			reason = p.warn(reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", m.Cluster, m.State, yes(m.Reachable), ago(m.Since), ago(m.LastReport),
			reported, m.Copies, m.CopiesBehind, m.RaisesWaiting, m.ReleasesAwaited, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	first := true
	for _, m := range members {
		if m.Message == "" {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		fmt.Fprintf(w, "%s: %s\n", m.Cluster, m.Message)
	}
	return nil
}

package quotactl

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/test/testutil/golden"
)

var membersNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func at(ago time.Duration) *metav1.Time {
	t := metav1.NewTime(membersNow.Add(-ago))
	return &t
}

// planeRootObj is a plane's root with the members its status lists.
func planeRootObj(gone []v1beta1.GoneCluster, members ...v1beta1.MemberStatus) *v1beta1.AcceleratorQuota {
	return &v1beta1.AcceleratorQuota{ObjectMeta: metav1.ObjectMeta{Name: "root", ResourceVersion: "7"},
		Spec:   v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, GoneClusters: gone},
		Status: v1beta1.AcceleratorQuotaStatus{Members: members}}
}

// A fleet with each kind of member: answering, holding others back while
// cut off, never reported and split out, leaving, declared gone.
var fleetMembers = []v1beta1.MemberStatus{
	{Cluster: "east", State: v1beta1.MemberStateMember, Reachable: true, Since: at(3 * time.Hour), LastReport: at(40 * time.Second), Reported: true,
		Copies: 4, RaisesWaiting: 1, Reason: "RaisesWaiting",
		Message: "1 raise(s) of its copies wait, first fleet-a: raise of nvidia.com/gpu@a100 from 5 to 6: waits for west to release 1 (it may hold 4, its share is 3; it does not answer)"},
	{Cluster: "north", State: v1beta1.MemberStateMember, Since: at(20 * time.Minute), SplitOut: true, Reason: "SplitOut",
		Message: "it has never reported, and the member grace (5m0s) has passed: the fleet's Proportional splits leave it out until it reports; the plane does not hear from it: dial tcp 10.0.0.9:6443: connect: connection refused"},
	{Cluster: "south", State: v1beta1.MemberStateMember, Reachable: true, Since: at(3 * time.Hour), LastReport: at(5 * time.Minute), Reported: true, Copies: 4,
		Reason: "Answering"},
	{Cluster: "west", State: v1beta1.MemberStateMember, Since: at(7 * time.Minute), LastReport: at(7 * time.Minute), Reported: true, Copies: 4, CopiesBehind: 1,
		ReleasesAwaited: 1, Reason: "ClusterUnreachable",
		Message: "the plane does not hear from it, so its shares and copies stay as they were: dial tcp 10.0.0.7:6443: i/o timeout; 1 raise(s) of other members' copies wait for it to release what it may hold above its share, first east's copy of fleet-a (nvidia.com/gpu@a100 from 5 to 6): if the cluster is gone for good, forget it (kubectl ome quota forget west)"},
	{Cluster: "old", State: v1beta1.MemberStateLeaving, Reachable: true, Since: at(time.Hour), LastReport: at(time.Minute), Reported: true, Copies: 2, Reason: "ClusterLeaving",
		Message: "it left the fleet (its ClusterProfile fleet/old was deleted) and still holds 2 copies of the plane's nodes: the plane deletes them"},
	{Cluster: "lost", State: v1beta1.MemberStateGone, Since: at(2 * 24 * time.Hour), Reason: "ClusterGone",
		Message: "root's spec.goneClusters declares it gone: the plane forgot it, stops reaching for it, and what it last held no longer counts against the fleet's budgets; to take it back, kubectl ome quota forget --undo lost"},
}

func TestMembersTable(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, printMembers(&out, fleetMembers, membersNow, palette(false)))
	golden.Check(t, "members.txt", out.String())

	// -o yaml is the versioned report.
	out.Reset()
	rep := &MembersReport{TypeMeta: typeMeta("MembersReport"), Members: fleetMembers[:1]}
	require.NoError(t, (&printers.YAMLPrinter{}).PrintObj(rep, &out))
	golden.Check(t, "members.yaml", out.String())
}

// forget reads root's status.members and spec.goneClusters: it refuses a
// cluster that answers unless forced and one the plane does not know, is
// idempotent, and takes a declaration back with --undo.
func TestPlanForget(t *testing.T) {
	root := planeRootObj([]v1beta1.GoneCluster{{Name: "lost"}}, fleetMembers...)
	gone := func(g ...v1beta1.GoneCluster) []v1beta1.GoneCluster { return g }
	for name, c := range map[string]struct {
		cluster      string
		force, undo  bool
		want         []v1beta1.GoneCluster // nil: no write
		say, refused string
	}{
		"a member that does not answer": {cluster: "west", want: gone(v1beta1.GoneCluster{Name: "lost"}, v1beta1.GoneCluster{Name: "west"}),
			say: "cluster west declared gone: the plane forgets it, and what it held no longer counts against the fleet's budgets"},
		"a member that never answered": {cluster: "north", want: gone(v1beta1.GoneCluster{Name: "lost"}, v1beta1.GoneCluster{Name: "north"})},
		"a member that answers": {cluster: "east",
			refused: "cluster east still answers the plane, so it is not gone and what it holds still counts against the fleet's budgets: shut it down or revoke the plane's access to it first, or pass --force to forget it now, while its Kueue may still admit work against the copies it holds"},
		"a member that answers, forced": {cluster: "east", force: true, want: gone(v1beta1.GoneCluster{Name: "lost"}, v1beta1.GoneCluster{Name: "east", Force: true}),
			say: "cluster east declared gone: the plane forgets it, and what it held no longer counts against the fleet's budgets; it still answers, so its Kueue may still admit work against the copies it holds: release them there with kubectl ome quota release --origin PLANE (the plane's --origin)"},
		"a leaving cluster that answers": {cluster: "old", refused: "cluster old still answers the plane"},
		"a cluster the plane does not know": {cluster: "nowhere",
			refused: "the plane knows no cluster nowhere: its clusters are [east north south west old lost]; check the name (kubectl ome quota members)"},
		"declared already":         {cluster: "lost", say: "cluster lost is declared gone already"},
		"declared already, forced": {cluster: "lost", force: true, want: gone(v1beta1.GoneCluster{Name: "lost", Force: true})},
		"taken back":               {cluster: "lost", undo: true, want: []v1beta1.GoneCluster{}, say: "cluster lost taken back: the plane counts it again if its inventory lists it (kubectl ome quota members)"},
		"taken back, not declared": {cluster: "west", undo: true, say: "cluster west is not declared gone: nothing to take back"},
	} {
		t.Run(name, func(t *testing.T) {
			plan, err := planForget(root, c.cluster, c.force, c.undo)
			if c.refused != "" {
				require.Error(t, err)
				require.True(t, strings.HasPrefix(err.Error(), c.refused), "refused with %q, want it to start with %q", err, c.refused)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want != nil, plan.write, "writes")
			if c.want != nil {
				require.Empty(t, cmp.Diff(c.want, plan.gone, cmpopts.EquateEmpty()), "goneClusters (-want +got)")
			}
			if c.say != "" {
				require.Equal(t, c.say, plan.say)
			}
		})
	}
	require.Equal(t, []v1beta1.GoneCluster{{Name: "lost"}}, root.Spec.GoneClusters, "root as read is left alone")
}

// The usage errors say what is wrong, before any request; pointed at a
// cluster that is not a plane, members says where to point it (the real
// API path is test/fleet's TestForgetAGoneCluster).
func TestMembersAndForgetUsage(t *testing.T) {
	noCluster(t)
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"members with an argument": {[]string{"quota", "members", "east"},
			"error: members takes no arguments, got 1: east\nSee 'kubectl ome quota members --help' for usage.\n"},
		"members -o wide": {[]string{"quota", "members", "-o", "wide"},
			"error: unable to match a printer suitable for the output format \"wide\", allowed formats are: json,yaml\nSee 'kubectl ome quota members --help' for usage.\n"},
		"forget without a cluster": {[]string{"quota", "forget"},
			"error: forget needs exactly one CLUSTER, got 0\nSee 'kubectl ome quota forget --help' for usage.\n"},
		"forget of an empty name": {[]string{"quota", "forget", ""},
			"error: the cluster name is empty: name the member cluster to forget (kubectl ome quota members lists them)\nSee 'kubectl ome quota forget --help' for usage.\n"},
		"forget --undo --force": {[]string{"quota", "forget", "--undo", "--force", "west"},
			"error: --undo takes a declaration back, and --force makes one: pass one of them\nSee 'kubectl ome quota forget --help' for usage.\n"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runWith("", c.args...)
			require.Equal(t, 1, r.code)
			require.Empty(t, r.out)
			require.Equal(t, c.want, r.errOut)
		})
	}
	for _, args := range [][]string{{"quota", "members", "--help"}, {"quota", "forget", "--help"}} {
		r := runWith("", args...)
		require.Equal(t, 0, r.code, args)
		require.Contains(t, r.out, "Examples:\n  ", args)
	}
}

package replay

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"ome.io/quota-manager/api/v1beta1"
)

// A write of root's spec.goneClusters is a change the history names, so
// that the verdict of kubectl ome quota forget is matched with its write.
func TestSpecChangesGoneClusters(t *testing.T) {
	root := func(gone ...v1beta1.GoneCluster) *v1beta1.AcceleratorQuotaSpec {
		return &v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort, GoneClusters: gone}
	}
	west, westForced, east := v1beta1.GoneCluster{Name: "west"}, v1beta1.GoneCluster{Name: "west", Force: true}, v1beta1.GoneCluster{Name: "east"}
	for name, c := range map[string]struct {
		old, new *v1beta1.AcceleratorQuotaSpec
		want     []string
	}{
		"declared":        {root(), root(west), []string{"goneClusters +west"}},
		"declared forced": {root(east), root(east, westForced), []string{"goneClusters +west (force)"}},
		"forced later":    {root(west), root(westForced), []string{"goneClusters west force false -> true"}},
		"taken back":      {root(east, west), root(east), []string{"goneClusters -west"}},
		"unchanged":       {root(west), root(west), nil},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, specChanges(c.old, c.new)); diff != "" {
				t.Errorf("specChanges (-want +got):\n%s", diff)
			}
		})
	}
}

// Package aqtest builds AcceleratorQuota objects for tests in one line:
//
//	aqtest.Team("team-beta", "ml-research").Budget("nvidia.com/gpu", "a100", "8").Borrow("4").Obj()
package aqtest

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// Wrapper builds an AcceleratorQuota.
type Wrapper struct{ aq v1beta1.AcceleratorQuota }

// Make starts a node with a role and, unless parent is empty, a parent.
func Make(name string, role v1beta1.Role, parent string) *Wrapper {
	w := &Wrapper{aq: v1beta1.AcceleratorQuota{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.SchemeGroupVersion.String(), Kind: "AcceleratorQuota"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1beta1.AcceleratorQuotaSpec{Role: role},
	}}
	if parent != "" {
		w.aq.Spec.ParentRef = &v1beta1.ParentReference{Name: parent}
	}
	return w
}

// Root is the tree's root.
func Root() *Wrapper { return Make(v1beta1.RootName, v1beta1.RoleCohort, "") }

// Cohort is a Cohort node under parent.
func Cohort(name, parent string) *Wrapper { return Make(name, v1beta1.RoleCohort, parent) }

// Team is a ClusterQueue node under parent.
func Team(name, parent string) *Wrapper { return Make(name, v1beta1.RoleClusterQueue, parent) }

// Budget adds a budget with a nominal amount.
func (w *Wrapper) Budget(res, flavor, nominal string) *Wrapper {
	w.aq.Spec.Budgets = append(w.aq.Spec.Budgets, v1beta1.Budget{ResourceName: res, ResourceFlavor: flavor, Nominal: resource.MustParse(nominal)})
	return w
}

// Borrow sets the last budget's borrowingLimit.
func (w *Wrapper) Borrow(q string) *Wrapper {
	v := resource.MustParse(q)
	w.aq.Spec.Budgets[len(w.aq.Spec.Budgets)-1].BorrowingLimit = &v
	return w
}

// Lend sets the last budget's lendingLimit.
func (w *Wrapper) Lend(q string) *Wrapper {
	v := resource.MustParse(q)
	w.aq.Spec.Budgets[len(w.aq.Spec.Budgets)-1].LendingLimit = &v
	return w
}

// Share adds a cluster's share to the last budget's perCluster.
func (w *Wrapper) Share(cluster, nominal string) *Wrapper {
	b := &w.aq.Spec.Budgets[len(w.aq.Spec.Budgets)-1]
	b.PerCluster = append(b.PerCluster, v1beta1.ClusterShare{Cluster: cluster, Nominal: resource.MustParse(nominal)})
	return w
}

// Obj returns a copy of the object built so far.
func (w *Wrapper) Obj() *v1beta1.AcceleratorQuota { return w.aq.DeepCopy() }

// GuideTree is the guide's tree below root: ml-research (24 A100 GPUs),
// team-alpha (16) and team-beta (8, borrowing up to 4).
func GuideTree() []*v1beta1.AcceleratorQuota {
	return []*v1beta1.AcceleratorQuota{
		Cohort("ml-research", "root").Budget("nvidia.com/gpu", "a100", "24").Obj(),
		Team("team-alpha", "ml-research").Budget("nvidia.com/gpu", "a100", "16").Obj(),
		Team("team-beta", "ml-research").Budget("nvidia.com/gpu", "a100", "8").Borrow("4").Obj(),
	}
}

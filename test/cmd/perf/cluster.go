package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/test/localcluster"
)

// use makes c the control plane the bench works on: its clients, the
// ResourceFlavor, the namespaces, the Nodes and the watcher.
func (b *bench) use(ctx context.Context, c *localcluster.Cluster) error {
	b.c, b.logDir = c, c.Dir
	b.cfg = rest.CopyConfig(c.Config)
	b.cfg.QPS, b.cfg.Burst = 2000, 4000
	b.kube = kubernetes.NewForConfigOrDie(b.cfg)
	b.kueue = kueueclient.NewForConfigOrDie(b.cfg)
	b.aqs = versioned.NewForConfigOrDie(b.cfg)
	b.nsNames = nil
	return b.setup(ctx)
}

// fresh replaces the control plane with a new one holding the Nodes and
// the tree aqs, so that a run starts where every other run starts: an API
// server that has just started, not one that has just written and deleted
// 21,000 objects (see docs/performance.md on why that matters).
func (b *bench) fresh(ctx context.Context, aqs []*v1beta1.AcceleratorQuota) error {
	b.stopWatcher()
	_ = b.c.Stop()
	logf("a fresh control plane for the next run...")
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: true})
	if err != nil {
		return err
	}
	if err := b.use(ctx, c); err != nil {
		return err
	}
	if err := b.createTree(ctx, aqs); err != nil {
		return err
	}
	b.quiesce(ctx)
	return nil
}

func (b *bench) setup(ctx context.Context) error {
	if _, err := b.kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range b.sh.namespaces {
		ns := fmt.Sprintf("team-ns-%02d", i)
		b.nsNames = append(b.nsNames, ns)
		if err := b.c.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	logf("writing %d GPU Nodes...", b.sh.nodes)
	if err := b.writeNodes(ctx, 0, b.sh.nodes); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	b.w, b.stopWatcher = newWatcher(wctx, b.cfg), cancel
	return nil
}

// gpusPerNode and the budgets: every team 2 GPUs, every Cohort its teams'
// sum, all within the Nodes' capacity.
const gpusPerNode = 8

func (b *bench) writeNodes(ctx context.Context, from, to int) error {
	return parallel(ctx, to-from, 32, func(i int) error {
		n := localcluster.GPUNode(fmt.Sprintf("gpu-%05d", from+i), gpusPerNode)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}}
		created, err := b.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		q := resource.MustParse(strconv.Itoa(gpusPerNode))
		rl := corev1.ResourceList{"nvidia.com/gpu": q, corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
		created.Status = corev1.NodeStatus{Capacity: rl, Allocatable: rl, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		_, err = b.kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

func parallel(ctx context.Context, n, workers int, f func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range min(workers, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func cohortName(c int) string { return fmt.Sprintf("c-%02d", c) }

func teamName(c, t int) string { return fmt.Sprintf("t-%02d-%02d", c, t) }

// tree is the AcceleratorQuotas of Cohorts [from, to), with root when from
// is 0.
func (b *bench) tree(from, to int) []*v1beta1.AcceleratorQuota {
	var out []*v1beta1.AcceleratorQuota
	if from == 0 {
		out = append(out, aqtest.Root().Obj())
	}
	for c := from; c < to; c++ {
		out = append(out, aqtest.Cohort(cohortName(c), "root").Budget("nvidia.com/gpu", "a100", strconv.Itoa(2*b.sh.teamsPerCohort)).Obj())
		for t := range b.sh.teamsPerCohort {
			out = append(out, aqtest.Team(teamName(c, t), cohortName(c)).Budget("nvidia.com/gpu", "a100", "2").Obj())
		}
	}
	return out
}

func (b *bench) createTree(ctx context.Context, aqs []*v1beta1.AcceleratorQuota) error {
	// Parents first: Cohorts, then teams.
	var cohorts, teams []*v1beta1.AcceleratorQuota
	for _, a := range aqs {
		if a.Spec.Role == v1beta1.RoleCohort {
			cohorts = append(cohorts, a)
		} else {
			teams = append(teams, a)
		}
	}
	for _, set := range [][]*v1beta1.AcceleratorQuota{cohorts, teams} {
		if err := parallel(ctx, len(set), 32, func(i int) error {
			_, err := b.aqs.OmeV1beta1().AcceleratorQuotas().Create(ctx, set[i], metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// desired is the Kueue objects of a tree, as the manager projects them.
func (b *bench) desired(aqs []*v1beta1.AcceleratorQuota) *projector.Output {
	in := projector.Input{EnrolledNamespaces: b.nsNames, CoverResources: projector.DefaultCoverResources()}
	for _, a := range aqs {
		parent := ""
		if a.Spec.ParentRef != nil {
			parent = a.Spec.ParentRef.Name
		}
		in.Nodes = append(in.Nodes, projector.Node{Name: a.Name, Role: a.Spec.Role, Parent: parent, Budgets: a.Spec.Budgets, Ready: true})
	}
	return projector.Project(in)
}

// reset deletes the managed Kueue objects and clears the nodes' statuses,
// so that the next run starts from nothing.
func (b *bench) reset(ctx context.Context) error {
	logf("deleting the Kueue objects and clearing the statuses...")
	kq := b.kueue.KueueV1beta2()
	sel := metav1.ListOptions{LabelSelector: v1beta1.ManagedByLabel + "=" + v1beta1.ManagedByValue}
	// One namespace's collection at a time is deleted one object after
	// another (the API server's --delete-collection-workers is 1): all
	// namespaces at once.
	if err := parallel(ctx, len(b.nsNames), len(b.nsNames), func(i int) error {
		return kq.LocalQueues(b.nsNames[i]).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	}); err != nil {
		return err
	}
	if err := kq.ClusterQueues().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	if err := kq.Cohorts().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	names := b.w.aqNames()
	if err := parallel(ctx, len(names), 32, func(i int) error {
		_, err := b.aqs.OmeV1beta1().AcceleratorQuotas().Patch(ctx, names[i], types.MergePatchType, []byte(`{"status":null}`), metav1.PatchOptions{}, "status")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for b.w.objects() > 0 || b.w.materialized() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("reset: %d managed objects and %d Materialized nodes left", b.w.objects(), b.w.materialized())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.quiesce(ctx)
	b.w.restart()
	return nil
}

// quiesce waits until the control plane is idle (etcd, kube-apiserver and
// Kueue together under 10% of a core over 2 s), at most 3 minutes: Kueue
// handles the deletion of 21,000 objects long after the API server has
// answered, and the next run would otherwise pay for the last one's
// cleanup (the first runs start from an idle control plane).
func (b *bench) quiesce(ctx context.Context) {
	waited := localcluster.Quiesce(ctx, b.c.Processes(), 3*time.Minute)
	logf("control plane idle after %s", waited.Round(100*time.Millisecond))
}

func (b *bench) setBudget(ctx context.Context, team, nominal string) (int64, error) {
	patch := fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"%s"}]}}`, nominal)
	aq, err := b.aqs.OmeV1beta1().AcceleratorQuotas().Patch(ctx, team, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return 0, err
	}
	return aq.Generation, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"ome.io/quota-manager/api/client/clientset/versioned"
	typed "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/localcluster"
)

// origin is the plane's --origin: the label of its copies on the members.
const origin = "fleet"

const (
	gpu    = "nvidia.com/gpu"
	flavor = "a100"
)

// fleet is the hub, whose etcd every member's API server shares, and the
// members, each with its Node, its ResourceFlavor and its manager.
type fleet struct {
	cfg     config
	hub     *localcluster.Cluster
	hubAQs  typed.AcceleratorQuotaInterface
	members []*member
	bin     string
	logDir  string
	binDir  string
}

// member is one member cluster and the bench's watch of it.
type member struct {
	name string
	c    *localcluster.Cluster
	mgr  *localcluster.Manager // nil when it runs none
	w    *memberWatch
	aqs  typed.AcceleratorQuotaInterface
}

func memberName(i int) string { return fmt.Sprintf("member-%02d", i) }

func teamName(i int) string { return fmt.Sprintf("team-%02d", i) }

// startFleet starts the hub, builds the manager, and starts the members,
// a few at a time. On error the fleet returned, if any, still has to be
// stopped.
func startFleet(ctx context.Context, cfg config) (*fleet, error) {
	f := &fleet{cfg: cfg}
	var err error
	if f.binDir, err = os.MkdirTemp("", "fleetbench-bin-"); err != nil {
		return nil, err
	}
	if f.logDir, err = os.MkdirTemp("", "fleetbench-logs-"); err != nil {
		return f, err
	}
	logf("building the manager; starting the hub (etcd and kube-apiserver)...")
	if f.bin, err = localcluster.BuildManager(ctx, f.binDir); err != nil {
		return f, err
	}
	if f.hub, err = localcluster.Start(ctx, localcluster.Options{}); err != nil {
		return f, err
	}
	f.hubAQs = versioned.NewForConfigOrDie(f.hub.Config).OmeV1beta1().AcceleratorQuotas()
	logf("starting %d member API servers on the hub's etcd, %d with a workload manager...", cfg.members, cfg.managers)
	f.members = make([]*member, cfg.members)
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range cfg.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			m, err := f.startMember(ctx, i)
			mu.Lock()
			defer mu.Unlock()
			f.members[i] = m
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", memberName(i), err))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return f, err
	}
	logf("%d members up", cfg.members)
	return f, nil
}

// startMember starts member i: its API server under an etcd prefix of its
// own, its GPU Node and ResourceFlavor, its manager, and the bench's watch.
func (f *fleet) startMember(ctx context.Context, i int) (*member, error) {
	m := &member{name: memberName(i)}
	var err error
	m.c, err = localcluster.Start(ctx, localcluster.Options{Etcd: f.hub.EtcdURL(), EtcdPrefix: "/fleetbench/" + m.name})
	if err != nil {
		return m, err
	}
	m.aqs = m.c.AQs
	if _, err := localcluster.ApplyNode(ctx, m.c.Kube, localcluster.GPUNode("gpu-0", f.cfg.gpus)); err != nil {
		return m, err
	}
	if _, err := m.c.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, localcluster.A100Flavor(), metav1.CreateOptions{}); err != nil {
		return m, err
	}
	if i < f.cfg.managers {
		// A manager with no enrolled namespace writes nothing to Kueue.
		if err := m.c.EnsureNamespace(ctx, "bench"); err != nil {
			return m, err
		}
		if m.mgr, err = m.c.StartManager(ctx, f.bin, m.name, f.logDir, "--webhook=false", "--leader-elect=false", "--enrolled-namespaces=bench"); err != nil {
			return m, err
		}
	}
	m.w, err = watchMember(ctx, m.c.Config, m.mgr != nil)
	return m, err
}

// stop stops every process of the fleet and removes its folders.
func (f *fleet) stop() {
	logf("stopping the fleet...")
	var wg sync.WaitGroup
	for _, m := range f.members {
		if m == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.w != nil {
				m.w.stop()
			}
			if m.mgr != nil {
				m.mgr.Stop()
			}
			if err := m.c.Stop(); err != nil {
				logf("stopping %s: %v", m.name, err)
			}
		}()
	}
	wg.Wait()
	if err := f.hub.Stop(); err != nil {
		logf("stopping the hub: %v", err)
	}
	_ = os.RemoveAll(f.binDir)
	if f.cfg.keepLogs {
		logf("managers' logs kept in %s", f.logDir)
	} else {
		_ = os.RemoveAll(f.logDir)
	}
}

// startPlane lists the first n members for a plane in namespace ns of the
// hub (each member's admin kubeconfig in a Secret, and the members'
// ConfigMap) and starts the plane.
func (f *fleet) startPlane(ctx context.Context, n int) (*localcluster.Manager, error) {
	ns := fmt.Sprintf("fleet-%02d", n)
	if err := f.hub.EnsureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	entries := map[string]string{}
	for _, m := range f.members[:n] {
		data, err := os.ReadFile(m.c.Kubeconfig)
		if err != nil {
			return nil, err
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.name + "-kubeconfig"}, Data: map[string][]byte{"kubeconfig": data}}
		if _, err := f.hub.Kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		entries[m.name] = m.name + "-kubeconfig"
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ome-quota-manager-members"}, Data: entries}
	if _, err := f.hub.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	args := []string{"--mode=management", "--webhook=false", "--leader-elect=false", "--origin=" + origin,
		"--members-from=secrets", "--members-namespace=" + ns}
	for _, a := range f.cfg.planeArgs {
		if strings.HasPrefix(a, "--event-log=") {
			a = fmt.Sprintf("%s-%02d", a, n) // a folder per plane
		}
		args = append(args, a)
	}
	return f.hub.StartManager(ctx, f.bin, fmt.Sprintf("plane-%02d", n), f.logDir, args...)
}

// budget is each team's fleet budget for n members: n(n+1), so that an
// even split (n+1 each) and the split after one member's capacity doubles
// (2n for it, n for each other) are both whole.
func budget(n int) int { return n * (n + 1) }

// createTree creates the fleet tree on the hub once the plane has created
// root: the teams under root, each with a Proportional budget.
func (f *fleet) createTree(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for i := range f.cfg.teams {
		aq := aqtest.Team(teamName(i), v1beta1.RootName).Budget(gpu, flavor, strconv.Itoa(budget(n))).Obj()
		for {
			_, err := f.hubAQs.Create(ctx, aq, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("creating %s on the hub: %w", aq.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// setBudget patches one team's fleet budget.
func (f *fleet) setBudget(ctx context.Context, team string, nominal int) error {
	patch := fmt.Sprintf(`{"spec":{"budgets":[{"resourceName":%q,"resourceFlavor":%q,"nominal":"%d"}]}}`, gpu, flavor, nominal)
	_, err := f.hubAQs.Patch(ctx, team, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// deleteTree deletes the fleet tree; the plane deletes the copies before
// it lets each team go. It waits until no team is left on the hub and no
// copy on the members, then deletes root.
func (f *fleet) deleteTree(ctx context.Context, n int) error {
	for i := range f.cfg.teams {
		if err := f.hubAQs.Delete(ctx, teamName(i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	err := waitUntil(ctx, 3*time.Minute, func() string {
		list, err := f.hubAQs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		if len(list.Items) > 1 {
			return fmt.Sprintf("%d AcceleratorQuotas left on the hub", len(list.Items))
		}
		for _, m := range f.members[:n] {
			if c := m.w.copies(); c > 0 {
				return fmt.Sprintf("%s still holds %d copies", m.name, c)
			}
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("deleting the fleet tree: %w", err)
	}
	if _, err := f.hubAQs.Patch(ctx, v1beta1.RootName, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := f.hubAQs.Delete(ctx, v1beta1.RootName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// waitUntil polls cond every 200 ms until it returns "" or limit passes,
// and then returns what it said last.
func waitUntil(ctx context.Context, limit time.Duration, cond func() string) error {
	deadline := time.Now().Add(limit)
	for {
		why := cond()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", limit, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

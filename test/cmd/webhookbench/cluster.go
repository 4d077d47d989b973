package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/webhook"
)

type write struct{ cohort, team string }

// start starts a manager, with the webhook on port (0: without it), and
// waits until it is ready.
func (b *bench) start(ctx context.Context, port int) (*localcluster.Manager, error) {
	args := append([]string{"--leader-elect=false"}, b.extra...)
	if port == 0 {
		args = append(args, "--webhook=false")
	} else {
		args = append(args, localcluster.WebhookFlags(port)...)
	}
	if b.explain {
		// The webhook logs a "judged" line per review (its base and
		// outcome), which measure reads back.
		args = append(args, "-v=2")
	}
	return b.c.StartManagerEnv(ctx, b.bin, fmt.Sprintf("bench-%d", port), b.c.Dir, b.env, args...)
}

// grow creates Cohorts of ten teams of 1 GPU under root until the tree
// holds n nodes, 16 writes at a time, with no webhook configured.
func (b *bench) grow(ctx context.Context, n int) error {
	var cohorts, teams []write
	for i := b.size; i < n-1; i++ { // root is one of n
		c := fmt.Sprintf("bench-cohort-%04d", i/11)
		if i%11 == 0 {
			cohorts = append(cohorts, write{cohort: c})
		} else {
			teams = append(teams, write{cohort: c, team: fmt.Sprintf("%s-team-%d", c, i%11)})
		}
	}
	// Each Cohort before its teams.
	for _, wave := range [][]write{cohorts, teams} {
		if err := parallel(ctx, 16, len(wave), func(i int) error {
			w := wave[i]
			obj := aqtest.Cohort(w.cohort, "root").Budget("nvidia.com/gpu", "a100", "10").Obj()
			if w.team != "" {
				obj = aqtest.Team(w.team, w.cohort).Budget("nvidia.com/gpu", "a100", "1").Obj()
			}
			_, err := b.aqs.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	b.size = n - 1
	return nil
}

func parallel(ctx context.Context, workers, n int, f func(int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return err
		case <-ctx.Done():
			close(next)
			wg.Wait()
			return ctx.Err()
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// setWebhook installs or removes the webhook configuration and waits until
// the API server acts on it: a write of a probe label is judged by the
// webhook, or not.
func (b *bench) setWebhook(ctx context.Context, m *localcluster.Manager, on bool) error {
	vwc := b.c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	name := webhook.DefaultConfigName
	if b.null != nil {
		// The manager's configuration (made anew at each size) goes,
		// kept as the model of the null webhook's.
		name = nullConfigName
		cfg, err := vwc.Get(ctx, webhook.DefaultConfigName, metav1.GetOptions{})
		if err == nil {
			b.saved = cfg.DeepCopy()
			b.null.point(b.saved)
			err = vwc.Delete(ctx, webhook.DefaultConfigName, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	cfg, err := vwc.Get(ctx, name, metav1.GetOptions{})
	switch {
	case on && apierrors.IsNotFound(err):
		saved := b.saved.DeepCopy()
		saved.ResourceVersion = ""
		if _, err := vwc.Create(ctx, saved, metav1.CreateOptions{}); err != nil {
			return err
		}
	case !on && err == nil:
		if b.null == nil {
			b.saved = cfg
		}
		if err := vwc.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		before, err := b.answered(ctx, m, "CREATE")
		if err != nil {
			return err
		}
		// A dry-run create reaches the webhook whenever it is installed (a
		// label does not: the configuration admits writes that leave the
		// spec alone without calling it) and stores nothing.
		_, err = b.aqs.Create(ctx, aqtest.Cohort("bench-probe", "root").Obj(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			continue // the CA bundle is not injected yet
		}
		after, err := b.answered(ctx, m, "CREATE")
		if err != nil {
			return err
		}
		if on == (after > before) {
			return nil
		}
	}
	return fmt.Errorf("the API server did not start or stop calling the webhook (on=%v) within a minute", on)
}

// settle waits until the manager's state holds n nodes and its writes have
// stopped for two seconds.
func settle(ctx context.Context, m *localcluster.Manager, n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	last, quiet := -1.0, 0
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		nodes, err := m.Metric(ctx, "ome_quota_nodes")
		if err != nil {
			return err
		}
		writes, err := m.Metric(ctx, "ome_quota_backend_writes_total")
		if err != nil {
			return err
		}
		if int(nodes) != n || writes != last {
			last, quiet = writes, 0
			continue
		}
		if quiet++; quiet >= 2 {
			return nil
		}
	}
	return fmt.Errorf("the manager did not settle on %d nodes in 10 minutes", n)
}

// quiesce waits, at most 3 minutes, until the control plane and the
// manager are idle (together under 10% of a core over 2 s): the manager
// settles once its own writes stop, but Kueue goes on reconciling a tree
// just built (a thousand ClusterQueues and more) for a while, and writes
// measured meanwhile share the 2 cores with that work, the webhook's more
// than the others (each crosses three processes).
func (b *bench) quiesce(ctx context.Context, m *localcluster.Manager) {
	pids := b.processes(m)
	delete(pids, "webhookbench")
	waited := localcluster.Quiesce(ctx, pids, 3*time.Minute)
	fmt.Fprintf(os.Stderr, "control plane idle after %s\n", waited.Round(100*time.Millisecond))
}

// processes are the processes whose CPU a write costs: etcd,
// kube-apiserver and Kueue, and the manager; the bench itself is
// "webhookbench".
func (b *bench) processes(m *localcluster.Manager) map[string]int {
	out := b.c.Processes()
	out["manager"], out["webhookbench"] = m.Pid(), os.Getpid()
	return out
}

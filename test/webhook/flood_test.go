package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	quotaclient "ome.io/quota-manager/api/client"
	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/webhook"
)

// floodSpec is a team's spec under Cohort flood with 16 budgets of 256
// perCluster shares each, the most the CRD allows (about 250 KB).
func floodSpec() string {
	var budgets []string
	for b := range 16 {
		var shares []string
		for c := range 256 {
			shares = append(shares, fmt.Sprintf(`{"clusterName":"member-%03d","nominal":"0"}`, c))
		}
		budgets = append(budgets, fmt.Sprintf(`{"resourceName":"example.com/r%02d","resourceFlavor":"a100","nominal":"0","perCluster":[%s]}`, b, strings.Join(shares, ",")))
	}
	return fmt.Sprintf(`{"role":"ClusterQueue","parentRef":{"name":"flood"},"budgets":[%s]}`, strings.Join(budgets, ","))
}

// forger sends forged reviews of every kind at a webhook port, with no
// credentials, until its context ends, and counts what it sent and what
// was answered.
type forger struct {
	port     int
	caPEM    []byte
	keep     string // flood-keep as a review carries it
	sent     atomic.Int64
	answered atomic.Int64
	held     atomic.Int64 // connections opened and left silent
}

func (f *forger) run(ctx context.Context, t *testing.T) *sync.WaitGroup {
	var wg sync.WaitGroup
	p := newPoster(t, f.port)
	big := floodSpec()
	kinds := []func(i int) []byte{
		// An update of a version the API server never stored.
		func(int) []byte {
			return review("UPDATE", "flood-keep", "mallory", aqJSON("flood-keep", "u", "999999999999",
				`{"role":"ClusterQueue","parentRef":{"name":"flood"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"8"}]}`), f.keep)
		},
		// A delete of a team that stays.
		func(int) []byte { return review("DELETE", "flood-keep", "mallory", "", f.keep) },
		// Creates of teams that would take the Cohort's room, each under a
		// name of its own.
		func(i int) []byte {
			return review("CREATE", fmt.Sprintf("flood-ghost-%d", i), "mallory", aqJSON(fmt.Sprintf("flood-ghost-%d", i), fmt.Sprintf("g%d", i), "",
				`{"role":"ClusterQueue","parentRef":{"name":"flood"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"6"}]}`), "")
		},
		// Creates of the largest spec the CRD allows.
		func(i int) []byte {
			return review("CREATE", fmt.Sprintf("flood-wide-%d", i), "mallory", aqJSON(fmt.Sprintf("flood-wide-%d", i), fmt.Sprintf("w%d", i), "", big), "")
		},
	}
	for k, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; ctx.Err() == nil; i += len(kinds) {
				f.sent.Add(1)
				if _, _, err := p.post(ctx, webhook.Path, kind(i), 5*time.Second); err == nil {
					f.answered.Add(1)
				}
			}
		}()
	}
	// Slow large bodies: a review's headers, then 300 KiB at 20 KiB a
	// second, on connections of their own.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.caPEM)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				f.sent.Add(1)
				if f.slowBody(ctx, pool) {
					f.answered.Add(1)
				}
			}
		}()
	}
	// Connections that never say anything, 200 at a time (the webhook
	// holds at most 256 open; more would queue the forged reviews above
	// behind them), each opened again when the webhook closes it.
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", f.port), time.Second)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				f.held.Add(1)
				go func() { <-ctx.Done(); c.Close() }()
				_, _ = c.Read(make([]byte, 1)) // until the webhook closes it
				c.Close()
			}
		}()
	}
	return &wg
}

// slowBody sends one review slowly; it reports whether an HTTP answer came.
func (f *forger) slowBody(ctx context.Context, pool *x509.CertPool) bool {
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", f.port))
	if err != nil {
		time.Sleep(50 * time.Millisecond)
		return false
	}
	defer c.Close()
	const size = 300 << 10
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", webhook.Path, size); err != nil {
		return false
	}
	chunk := make([]byte, 2<<10)
	for i := range chunk {
		chunk[i] = ' '
	}
	for sent := 0; sent < size && ctx.Err() == nil; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := c.Read(make([]byte, 64))
	return n > 0
}

// percentile is the p-th percentile of d (sorted in place).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// TestForgedFlood: for 60 s, a client with no credentials sends the
// webhook port forged reviews of every kind (updates of versions never
// stored, deletes of a team that stays, creates that would take a
// Cohort's room, creates of the widest spec the CRD allows, slow large
// bodies, and 200 connections that say nothing), while a script of
// genuine writes runs through the API server: creates, raises, lowerings
// and deletes, and a create that must be denied. The replica requires the
// API server's client certificate (--webhook-client-ca), as this
// package's API server presents one. No genuine write fails or is refused
// with "retry", the denial comes every time, the stored tree breaks no
// rule, no forged review is answered, the admission ledger never holds
// more than its byte bound nor any forged write, and the recorded trail
// names the forger nowhere. The genuine writes' p50 and p99, in the flood
// and in a quiet run of the same script just before, are logged.
func TestForgedFlood(t *testing.T) {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	logDir := t.TempDir()
	r := startReplica(t, "flood", port, "--event-log="+logDir, "--webhook-client-ca="+filepath.Join(webhookClient, "ca.crt"))
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	cs, err := versioned.NewForConfig(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "flood") })
	_, err = aqs.Create(ctx, aqtest.Cohort("flood", "root").Budget(gpu, "a100", "8").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	keep, err := aqs.Create(ctx, aqtest.Team("flood-keep", "flood").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	nominal := func(n string) []byte {
		return []byte(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"` + n + `"}]}}`)
	}
	// script runs the genuine writes again and again for d and returns
	// each one's time.
	var failures atomic.Int64
	script := func(d time.Duration) []time.Duration {
		var lat []time.Duration
		timed := func(what string, w func() error, want string) {
			start := time.Now()
			err := w()
			lat = append(lat, time.Since(start))
			switch {
			case want == "" && err != nil:
				failures.Add(1)
				t.Errorf("%s: %v", what, err)
			case want != "" && (err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want)):
				failures.Add(1)
				t.Errorf("%s: answered %v, want a denial saying %q", what, err, want)
			}
		}
		for end := time.Now().Add(d); time.Now().Before(end); {
			timed("create flood-t", func() error {
				_, err := aqs.Create(ctx, aqtest.Team("flood-t", "flood").Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
				return err
			}, "")
			timed("raise flood-keep", func() error {
				_, err := aqs.Patch(ctx, "flood-keep", types.MergePatchType, nominal("2"), metav1.PatchOptions{})
				return err
			}, "")
			timed("create flood-big", func() error {
				_, err := aqs.Create(ctx, aqtest.Team("flood-big", "flood").Budget(gpu, "a100", "7").Obj(), metav1.CreateOptions{})
				return err
			}, "is 8 but its children total")
			timed("lower flood-keep", func() error {
				_, err := aqs.Patch(ctx, "flood-keep", types.MergePatchType, nominal("1"), metav1.PatchOptions{})
				return err
			}, "")
			timed("delete flood-t", func() error { return aqs.Delete(ctx, "flood-t", metav1.DeleteOptions{}) }, "")
		}
		return lat
	}

	cpu := func() time.Duration {
		d, err := localcluster.CPUTime(r.Pid())
		require.NoError(t, err)
		return d
	}
	cpu0 := cpu()
	quiet := script(15 * time.Second)
	cpu1 := cpu()
	require.Zero(t, failures.Load(), "the quiet run failed")

	f := &forger{port: port, caPEM: getSecret(t).Data["ca.crt"],
		keep: aqJSON("flood-keep", string(keep.UID), keep.ResourceVersion,
			`{"role":"ClusterQueue","parentRef":{"name":"flood"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1"}]}`)}
	floodCtx, stop := context.WithCancel(ctx)
	forgers := f.run(floodCtx, t)
	// The ledger, looked at every second: under its byte bound, and
	// holding nothing forged.
	var ledgerMax atomic.Int64
	var looks atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for floodCtx.Err() == nil {
			led, err := cs.OmeV1beta1().AdmissionLedgers().Get(ctx, "ome-quota-manager", metav1.GetOptions{})
			if err == nil {
				b, _ := json.Marshal(led.Spec.Reservations)
				if n := int64(len(b)); n > ledgerMax.Load() {
					ledgerMax.Store(n)
				}
				for _, res := range led.Spec.Reservations {
					if strings.HasPrefix(res.Node, "flood-ghost") || strings.HasPrefix(res.Node, "flood-wide") {
						t.Errorf("the ledger holds a forged write: %+v", res)
					}
				}
				looks.Add(1)
			}
			time.Sleep(time.Second)
		}
	}()
	flood := script(60 * time.Second)
	cpu2 := cpu()
	stop()
	forgers.Wait()
	<-watched

	t.Logf("forged reviews sent: %d, answered: %d; silent connections opened: %d", f.sent.Load(), f.answered.Load(), f.held.Load())
	t.Logf("genuine writes: quiet run %d, p50 %v, p99 %v; in the flood %d, p50 %v, p99 %v (p99 %.2fx the quiet run's)",
		len(quiet), percentile(quiet, 0.5), percentile(quiet, 0.99), len(flood), percentile(flood, 0.5), percentile(flood, 0.99),
		float64(percentile(flood, 0.99))/float64(percentile(quiet, 0.99)))
	t.Logf("the replica's CPU: %.0f%% of a core in the quiet run, %.0f%% in the flood",
		100*(cpu1-cpu0).Seconds()/15, 100*(cpu2-cpu1).Seconds()/60)
	t.Logf("the ledger's reservations, encoded, at most %d bytes over %d looks", ledgerMax.Load(), looks.Load())
	require.Zero(t, failures.Load(), "genuine writes failed in the flood")
	require.Greater(t, f.sent.Load(), int64(100), "the forger sent too little to prove anything")
	require.Zero(t, f.answered.Load(), "forged reviews were answered")
	require.Positive(t, looks.Load())
	require.Less(t, ledgerMax.Load(), int64(1<<20), "the ledger passed its byte bound")
	require.Empty(t, storedViolations(t, aqs, "flood"))
	got, err := aqs.Get(ctx, "flood-keep", metav1.GetOptions{})
	require.NoError(t, err, "flood-keep, which the forger deleted")
	require.Equal(t, "1", got.Spec.Budgets[0].Nominal.String())

	// The trail: stop the replica so that its log is whole, then replay.
	r.Stop()
	out, err := exec.Command(cluster.ManagerBin, "replay", logDir, "--node", "flood-keep", "--history").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "mallory", "the trail names the forger")
	require.Contains(t, string(out), "admin", "the genuine writes are not in the trail: the check above proves nothing")
	// A replica on the same port again, for the clean-up's deletes.
	startReplica(t, "flood-after", port)
	deleteByPrefix(t, aqs, "flood")
}

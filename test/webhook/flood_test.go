package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
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
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/store"
	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/webhook"
)

// floodSpec is a team's spec under cohort with 16 budgets of 256
// perCluster shares each, the most the CRD allows (about 250 KB).
func floodSpec(cohort string) string {
	var budgets []string
	for b := range 16 {
		var shares []string
		for c := range 256 {
			shares = append(shares, fmt.Sprintf(`{"clusterName":"member-%03d","nominal":"0"}`, c))
		}
		budgets = append(budgets, fmt.Sprintf(`{"resourceName":"example.com/r%02d","resourceFlavor":"a100","nominal":"0","perCluster":[%s]}`, b, strings.Join(shares, ",")))
	}
	return fmt.Sprintf(`{"role":"ClusterQueue","parentRef":{"name":%q},"budgets":[%s]}`, cohort, strings.Join(budgets, ","))
}

// forger sends forged reviews of every kind at a webhook port, with no
// credentials, until its context ends, and counts what it sent and what
// was answered. It runs in a process of its own at the lowest CPU
// priority (startForger): an attacker's client runs on its own machine,
// not on the replica's cores, and a forger competing for the test's two
// cores would measure itself.
type forger struct {
	Port     int
	CAPEM    []byte
	Cohort   string // the Cohort the genuine writes go under
	KeepName string // the team the forger deletes
	Keep     string // that team as a review carries it
	Flood    time.Duration

	sent, answered, held atomic.Int64
}

// forgerCounts are what a forger process reports when it ends.
type forgerCounts struct{ Sent, Answered, Held int64 }

// forgerEnv names the environment variable that makes this test binary
// a forger: its value is the forger as JSON (TestMain).
const forgerEnv = "OME_TEST_FORGER"

// forgerMain runs the forger described by cfg for its Flood and prints
// its counts as JSON.
func forgerMain(cfg string) int {
	var f forger
	if err := json.Unmarshal([]byte(cfg), &f); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Flood)
	defer cancel()
	f.run(ctx).Wait()
	_ = json.NewEncoder(os.Stdout).Encode(forgerCounts{f.sent.Load(), f.answered.Load(), f.held.Load()})
	return 0
}

// startForger runs f in a process of its own, niced to 19, and returns a
// function that waits for its end and returns its counts.
func startForger(t *testing.T, f *forger) func() forgerCounts {
	t.Helper()
	cfg, err := json.Marshal(f)
	require.NoError(t, err)
	var out, errOut bytes.Buffer
	cmd := exec.Command("nice", "-n", "19", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), forgerEnv+"="+string(cfg))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	return func() forgerCounts {
		require.NoError(t, cmd.Wait(), "the forger: %s", errOut.String())
		var c forgerCounts
		require.NoError(t, json.Unmarshal(out.Bytes(), &c), "the forger's counts: %q", out.String())
		return c
	}
}

func (f *forger) run(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.CAPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}
	p := &poster{url: fmt.Sprintf("https://127.0.0.1:%d", f.Port), client: &http.Client{Transport: tr}}
	big := floodSpec(f.Cohort)
	kinds := []func(i int) []byte{
		// An update of a version the API server never stored.
		func(int) []byte { return f.forgedUpdate() },
		// A delete of a team that stays.
		func(int) []byte { return f.forgedDelete() },
		// Creates of teams that would take the Cohort's room, each under a
		// name of its own.
		func(i int) []byte {
			name := fmt.Sprintf("%s-ghost-%d", f.Cohort, i)
			return review("CREATE", name, "mallory", aqJSON(name, fmt.Sprintf("g%d", i), "",
				`{"role":"ClusterQueue","parentRef":{"name":"`+f.Cohort+`"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"6"}]}`), "")
		},
		// Creates of the largest spec the CRD allows.
		func(i int) []byte {
			name := fmt.Sprintf("%s-wide-%d", f.Cohort, i)
			return review("CREATE", name, "mallory", aqJSON(name, fmt.Sprintf("w%d", i), "", big), "")
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
				c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", f.Port), time.Second)
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

// forgedUpdate is a forged review of an update of the team that stays,
// at a version the API server never stored.
func (f *forger) forgedUpdate() []byte {
	return review("UPDATE", f.KeepName, "mallory", aqJSON(f.KeepName, "u", "999999999999",
		`{"role":"ClusterQueue","parentRef":{"name":"`+f.Cohort+`"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"8"}]}`), f.Keep)
}

// forgedDelete is a forged review of a delete of the team that stays.
func (f *forger) forgedDelete() []byte {
	return review("DELETE", f.KeepName, "mallory", "", f.Keep)
}

// lastWord sends the two forged reviews of the team that stays once more,
// each waited for, and returns how many were answered. Sent after the
// flood and the genuine writes, they are the newest verdicts of the log
// where forged reviews are judged, so the trail has some of the forger's
// on that team to show, whichever older ones the flood turned over.
func (f *forger) lastWord() int {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.CAPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	p := &poster{url: fmt.Sprintf("https://127.0.0.1:%d", f.Port), client: &http.Client{Transport: tr}}
	answered := 0
	for _, body := range [][]byte{f.forgedUpdate(), f.forgedDelete()} {
		if _, _, err := p.post(context.Background(), webhook.Path, body, 10*time.Second); err == nil {
			answered++
		}
	}
	return answered
}

// slowBody sends one review slowly; it reports whether an HTTP answer came.
func (f *forger) slowBody(ctx context.Context, pool *x509.CertPool) bool {
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", f.Port))
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
	res := floodRun(t, floodConfig{name: "flood", quiet: 15 * time.Second, flood: 60 * time.Second, minSent: 1000,
		flags: []string{"--webhook-client-ca=" + clusterCA()}})
	t.Logf("genuine writes: quiet run %d, p50 %v, p99 %v; in the flood %d, p50 %v, p99 %v (p99 %.2fx the quiet run's)",
		len(res.quiet), percentile(res.quiet, 0.5), percentile(res.quiet, 0.99), len(res.flood), percentile(res.flood, 0.5), percentile(res.flood, 0.99),
		float64(percentile(res.flood, 0.99))/float64(percentile(res.quiet, 0.99)))
	t.Logf("the replica's CPU: %.0f%% of a core in the quiet run, %.0f%% in the flood", 100*res.quietCPU, 100*res.floodCPU)
	require.Zero(t, res.retries, "genuine writes were refused with retry")
	require.Zero(t, res.answered, "forged reviews were answered")
	require.Zero(t, res.forgedReserved, "the ledger held forged writes")
	require.NotContains(t, res.history, "mallory", "the trail names the forger")
}

// TestForgedFloodWithoutClientCertificates: the same forged reviews for
// 30 s at a replica that asks for no client certificate (the default),
// recording into an event log of 512 KiB. The forger's writes are judged:
// those the rules admit fill the admission ledger, so genuine writes are
// refused with "retry" until the forged reservations expire (30 s here),
// and each is sent again until it is answered. Still: none is
// over-admitted, the ledger never passes its byte bound, the verdicts
// flood only their own sixteenth of the log (its oldest segments go, the
// main log keeps its first event), and the trail names the forger as the
// author of nothing. The forger's last two reviews of the team that stays
// come after the flood and the genuine writes, so the trail holds some of
// its verdicts however many older ones the flood turned over.
func TestForgedFloodWithoutClientCertificates(t *testing.T) {
	res := floodRun(t, floodConfig{name: "nocert", flood: 30 * time.Second, retry: true,
		flags: []string{"--webhook-reservation-expiry=30s", "--apiserver-request-timeout=20s", "--event-log-max-bytes=524288"}})
	t.Logf("genuine writes in the flood: %d, refused with retry %d times before they were answered", len(res.flood), res.retries)
	require.Positive(t, res.answered, "no forged review was judged: the flood proves nothing")
	require.Positive(t, res.forgedReserved, "no forged write was reserved: the ledger's bounds were not tried")
	require.Contains(t, res.history, "mallory", "the forged reviews are not in the trail: the check below proves nothing")
	for _, line := range strings.Split(res.history, "\n") {
		if strings.Contains(line, "mallory") {
			require.False(t, strings.Contains(line, "landed as") || strings.Contains(line, "written"), "the trail names the forger as an author: %q", line)
		}
	}
	rep, err := store.Read(filepath.Join(res.logDir, store.VerdictsDir), 0, func(events.Event) error { return nil })
	require.NoError(t, err)
	require.Greater(t, rep.First, uint64(1), "the verdicts did not fill their share: the main log's check proves nothing")
	main, err := store.Read(res.logDir, 0, func(events.Event) error { return nil })
	require.NoError(t, err)
	require.Equal(t, uint64(1), main.First, "the main log lost its first events to the flood")
	t.Logf("log of verdicts: events %d to %d kept; main log: events %d to %d", rep.First, rep.Last, main.First, main.Last)
}

// floodConfig is one run of floodRun.
type floodConfig struct {
	name         string // the replica's and its nodes' prefix
	quiet, flood time.Duration
	flags        []string // the replica's, beside --event-log
	// minSent is how many forged reviews prove the flood was one, where
	// nothing else does: with client certificates none is answered.
	// Without them, what the forged reviews did (answered, reserved, the
	// log of verdicts turned over) is the proof, whatever their number on
	// a loaded machine.
	minSent int64
	// retry sends a genuine write again while the webhook says "retry"
	// (for up to 2 minutes), counting each refusal; otherwise a refusal
	// is a failure.
	retry bool
}

// floodResult is what floodRun saw; it has checked the rest.
type floodResult struct {
	quiet, flood       []time.Duration // each genuine write's time
	quietCPU, floodCPU float64         // the replica's, in cores
	retries            int64           // genuine writes refused with "retry"
	answered           int64           // forged reviews answered
	forgedReserved     int64           // forged reservations seen in the ledger
	history            string          // replay --node KEEP --history
	logDir             string
}

// floodRun starts a replica with cfg.flags, runs the genuine script for
// cfg.quiet, then again for cfg.flood while a forger floods the replica's
// port, and checks what every run must hold: no genuine write failed, the
// denial came every time, the stored tree breaks no rule, the team the
// forger deleted is there as the script left it, and the ledger never
// passed its byte bound. It stops the replica and returns the trail of
// that team.
func floodRun(t *testing.T, cfg floodConfig) floodResult {
	ctx := context.Background()
	ensureSecret(t)
	port := freePort(t)
	installConfig(t, port)
	res := floodResult{logDir: t.TempDir()}
	r := startReplica(t, cfg.name, port, append([]string{"--event-log=" + res.logDir}, cfg.flags...)...)
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	cs, err := versioned.NewForConfig(cluster.Config)
	require.NoError(t, err)
	c, keepName, tName, bigName := cfg.name, cfg.name+"-keep", cfg.name+"-t", cfg.name+"-big"
	t.Cleanup(func() { deleteByPrefix(t, aqs, c) })
	_, err = aqs.Create(ctx, aqtest.Cohort(c, "root").Budget(gpu, "a100", "8").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)
	keep, err := aqs.Create(ctx, aqtest.Team(keepName, c).Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
	require.NoError(t, err)

	nominal := func(n string) []byte {
		return []byte(`{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"` + n + `"}]}}`)
	}
	// script runs the genuine writes again and again for d and returns
	// each one's time.
	var failures, retries atomic.Int64
	script := func(d time.Duration) []time.Duration {
		var lat []time.Duration
		timed := func(what string, w func() error, want string) {
			start := time.Now()
			err := w()
			for deadline := start.Add(2 * time.Minute); cfg.retry && isRetry(err) && time.Now().Before(deadline); err = w() {
				retries.Add(1)
				time.Sleep(200 * time.Millisecond)
			}
			if isRetry(err) {
				retries.Add(1)
			}
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
			timed("create "+tName, func() error {
				_, err := aqs.Create(ctx, aqtest.Team(tName, c).Budget(gpu, "a100", "1").Obj(), metav1.CreateOptions{})
				return err
			}, "")
			timed("raise "+keepName, func() error {
				_, err := aqs.Patch(ctx, keepName, types.MergePatchType, nominal("2"), metav1.PatchOptions{})
				return err
			}, "")
			timed("create "+bigName, func() error {
				_, err := aqs.Create(ctx, aqtest.Team(bigName, c).Budget(gpu, "a100", "7").Obj(), metav1.CreateOptions{})
				return err
			}, "is 8 but its children total")
			timed("lower "+keepName, func() error {
				_, err := aqs.Patch(ctx, keepName, types.MergePatchType, nominal("1"), metav1.PatchOptions{})
				return err
			}, "")
			timed("delete "+tName, func() error { return aqs.Delete(ctx, tName, metav1.DeleteOptions{}) }, "")
		}
		return lat
	}

	cpu := func() time.Duration {
		d, err := localcluster.CPUTime(r.Pid())
		require.NoError(t, err)
		return d
	}
	cpu0 := cpu()
	res.quiet = script(cfg.quiet)
	cpu1 := cpu()
	require.Zero(t, failures.Load(), "the quiet run failed")

	// The forger stops after cfg.flood, even while a genuine write it held
	// up is still being sent again.
	mallory := &forger{Port: port, Cohort: c, CAPEM: getSecret(t).Data["ca.crt"], KeepName: keepName, Flood: cfg.flood,
		Keep: aqJSON(keepName, string(keep.UID), keep.ResourceVersion,
			`{"role":"ClusterQueue","parentRef":{"name":"`+c+`"},"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"1"}]}`)}
	forgerDone := startForger(t, mallory)
	floodCtx, stop := context.WithTimeout(ctx, cfg.flood)
	defer stop()
	// The ledger, looked at every second: under its byte bound; its
	// forged writes counted.
	var ledgerMax, looks, forged atomic.Int64
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
					if strings.HasPrefix(res.Node, c+"-ghost") || strings.HasPrefix(res.Node, c+"-wide") {
						forged.Add(1)
					}
				}
				looks.Add(1)
			}
			time.Sleep(time.Second)
		}
	}()
	res.flood = script(cfg.flood)
	cpu2 := cpu()
	counts := forgerDone()
	<-watched
	if cfg.quiet > 0 {
		res.quietCPU = (cpu1 - cpu0).Seconds() / cfg.quiet.Seconds()
	}
	res.floodCPU = (cpu2 - cpu1).Seconds() / cfg.flood.Seconds()
	res.retries, res.answered, res.forgedReserved = retries.Load(), counts.Answered, forged.Load()

	t.Logf("forged reviews sent: %d, answered: %d; silent connections opened: %d", counts.Sent, counts.Answered, counts.Held)
	t.Logf("the ledger's reservations, encoded, at most %d bytes over %d looks; forged reservations seen %d times", ledgerMax.Load(), looks.Load(), forged.Load())
	require.Zero(t, failures.Load(), "genuine writes failed in the flood")
	require.GreaterOrEqual(t, counts.Sent, cfg.minSent, "the forger sent too little to prove anything")
	require.Positive(t, looks.Load())
	require.Less(t, ledgerMax.Load(), int64(1<<20), "the ledger passed its byte bound")
	require.Empty(t, storedViolations(t, aqs, c))
	got, err := aqs.Get(ctx, keepName, metav1.GetOptions{})
	require.NoError(t, err, "%s, which the forger deleted", keepName)
	require.Equal(t, "1", got.Spec.Budgets[0].Nominal.String())

	// The trail: the forger's last word, then stop the replica so that its
	// log is whole, and replay.
	lastAnswered := mallory.lastWord()
	t.Logf("the forger's last two reviews of %s: %d answered", keepName, lastAnswered)
	r.Stop()
	out, err := exec.Command(cluster.ManagerBin, "replay", res.logDir, "--node", keepName, "--history").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "admin", "the genuine writes are not in the trail")
	res.history = string(out)
	// A replica on the same port again, for the clean-up's deletes.
	startReplica(t, cfg.name+"-after", port)
	deleteByPrefix(t, aqs, c)
	return res
}

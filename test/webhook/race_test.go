package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
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
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/state"
	"ome.io/quota-manager/test/testutil"
)

// balancer stands for the webhook's Service in front of two replicas: it
// serves the replicas' own certificate on 127.0.0.1:port and sends each
// review to the next replica in turn, so that two writes sent together are
// judged by different replicas.
type balancer struct {
	port int
	srv  *http.Server
	sent [2]atomic.Int64
	// backends are the replicas' ports; a test may change them.
	backends [2]atomic.Int64
	// gate, while set (holdBurst), staggers the replicas' answers.
	gate atomic.Pointer[burstGate]
}

// burstGate makes a burst judged beside writes admitted and not yet landed
// on a machine of any speed: reviews for the first replica wait until the
// second has answered n, and the second's answers are kept from the API
// server (so the writes they admit do not land) until the first has
// answered one. Each wait lasts at most holdMax, well inside the API
// server's 10 s for a review, so a gate nobody opens slows a burst and
// fails no write.
type burstGate struct {
	n                     int64
	answered              atomic.Int64 // by the second replica
	enough, first         chan struct{}
	enoughOnce, firstOnce sync.Once
}

const holdMax = 3 * time.Second

func (g *burstGate) wait(c chan struct{}) {
	select {
	case <-c:
	case <-time.After(holdMax):
	}
}

func (g *burstGate) open() {
	g.enoughOnce.Do(func() { close(g.enough) })
	g.firstOnce.Do(func() { close(g.first) })
}

// holdBurst sets a gate for the next burst: the first replica judges its
// reviews beside at least n reservations of the second that have not
// landed. The returned func opens the gate and removes it.
func (b *balancer) holdBurst(n int64) func() {
	g := &burstGate{n: n, enough: make(chan struct{}), first: make(chan struct{})}
	b.gate.Store(g)
	return func() { b.gate.CompareAndSwap(g, nil); g.open() }
}

// backendHeader names, on a review sent on, the replica it went to.
const backendHeader = "X-Test-Replica"

func startBalancer(t *testing.T, port int, backends [2]int) *balancer {
	t.Helper()
	s := getSecret(t)
	cert, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(s.Data["ca.crt"]))
	b := &balancer{port: port}
	b.backends[0].Store(int64(backends[0]))
	b.backends[1].Store(int64(backends[1]))
	var next atomic.Int64
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := next.Add(1) % 2
			b.sent[i].Add(1)
			if g := b.gate.Load(); g != nil && i == 0 {
				g.wait(g.enough)
			}
			r.SetURL(&url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", b.backends[i].Load())})
			r.Out.Header.Set(backendHeader, strconv.FormatInt(i, 10))
		},
		ModifyResponse: func(resp *http.Response) error {
			g := b.gate.Load()
			switch {
			case g == nil:
			case resp.Request.Header.Get(backendHeader) == "0":
				g.firstOnce.Do(func() { close(g.first) })
			default:
				if g.answered.Add(1) == g.n {
					g.enoughOnce.Do(func() { close(g.enough) })
				}
				g.wait(g.first)
			}
			return nil
		},
		Transport: transport,
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	b.srv = &http.Server{Handler: proxy, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = b.srv.Close(); transport.CloseIdleConnections() })
	return b
}

// raceScenario is a pair of writes that each fit the tree alone and not
// together, prepared by setup for round i.
type raceScenario struct {
	name string
	// setup creates what the round needs and returns the two writes.
	setup func(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, i int) (a, b func(context.Context) error)
	// denial is what the loser's denial says.
	denial string
	// cohort is the name, for round i as %02d, of the Cohort (or node)
	// under which a round's burst writes.
	cohort string
	// lowering: the first write lowers a team's budget, which is admitted
	// without the record whatever else is written; the second needs it and
	// is admitted when judged after it, denied with denial before it.
	lowering bool
}

// TestConcurrentConflictingWrites fires pairs of writes that each fit alone
// and break a rule together, at two replicas through a balancer that sends
// the two writes of a pair to different replicas: two teams that overrun
// their Cohort together, two parent moves that form a cycle, a budget
// raise racing a sibling's create, and a Cohort's lowering racing its
// team's raise; 50 rounds of each. In every round exactly one write is
// admitted and the other is denied with the rule's message, and the tree
// stored in the API server breaks no rule. A fifth race, a team's lowering
// (admitted without the record) racing a sibling's raise that fits only
// after it, admits the lowering every time and the raise only when it was
// judged after the lowering, and stores no rule-breaking tree either.
func TestConcurrentConflictingWrites(t *testing.T) {
	r1, r2 := raceRounds(t, raceConfig{})
	for _, r := range []*replica{r1, r2} {
		require.Positive(t, r.metric(t, "ome_quota_webhook_ledger_total", `outcome="reserved"`), "%s reserved nothing", r.Name)
	}
	conflicts := r1.metric(t, "ome_quota_webhook_ledger_total", `outcome="conflict"`) +
		r2.metric(t, "ome_quota_webhook_ledger_total", `outcome="conflict"`)
	t.Logf("reservations that lost the compare-and-swap and were judged again: %v", conflicts)
}

// raceConfig varies the rounds of raceRounds.
type raceConfig struct {
	// rounds of each scenario (50, or $OME_RACE_ROUNDS).
	rounds int
	// env of each replica.
	env [2][]string
	// burst, when set, posts reviews straight to the replicas during every
	// round, for the Cohort c of the round.
	burst func(ctx context.Context, lb int, c string)
	// during runs once, in its own goroutine, while the rounds run; the
	// rounds go on until it returns.
	during func(r1, r2 *replica)
}

// raceRounds fires 50 rounds of each scenario at two replicas started
// with extra flags behind a balancer, and fails when a rule-breaking tree
// is stored, both writes of a round are admitted, or both are denied.
func raceRounds(t *testing.T, rc raceConfig) (r1, r2 *replica) {
	ctx := context.Background()
	ensureSecret(t)
	lb := freePort(t)
	installConfig(t, lb)
	r1, err := launch(t, "race-1", freePort(t), rc.env[0])
	require.NoError(t, err)
	r2, err = launch(t, "race-2", freePort(t), rc.env[1])
	require.NoError(t, err)
	b := startBalancer(t, lb, [2]int{r1.port, r2.port})
	aqs, err := quotaclient.AcceleratorQuotas(cluster.Config)
	require.NoError(t, err)
	t.Cleanup(func() { deleteByPrefix(t, aqs, "race-") })

	team := func(name, parent, nominal string) *v1beta1.AcceleratorQuota {
		return aqtest.Team(name, parent).Budget(gpu, "a100", nominal).Obj()
	}
	create := func(aq *v1beta1.AcceleratorQuota) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := aqs.Create(ctx, aq, metav1.CreateOptions{})
			return err
		}
	}
	patch := func(name, p string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := aqs.Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
			return err
		}
	}
	// nominal sets a node's one budget, of a100 GPUs.
	nominal := func(name, n string) func(context.Context) error {
		return patch(name, `{"spec":{"budgets":[{"resourceName":"nvidia.com/gpu","resourceFlavor":"a100","nominal":"`+n+`"}]}}`)
	}
	mustCreate := func(t *testing.T, aq *v1beta1.AcceleratorQuota) {
		t.Helper()
		// A replica stopped by the test may hold a setup write until the
		// API server gives up on it: send it again.
		var err error
		for deadline := time.Now().Add(time.Minute); ; {
			err = create(aq)(ctx)
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
			if err == nil || !(isUnreachable(err) || isRetry(err)) || time.Now().After(deadline) {
				break
			}
		}
		require.NoError(t, err, "creating %s", aq.Name)
	}
	scenarios := []raceScenario{{
		name:   "two creates overrun a Cohort together",
		cohort: "race-over-%02d",
		setup: func(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, i int) (func(context.Context) error, func(context.Context) error) {
			c := fmt.Sprintf("race-over-%02d", i)
			mustCreate(t, aqtest.Cohort(c, "root").Budget(gpu, "a100", "10").Obj())
			return create(team(c+"-a", c, "6")), create(team(c+"-b", c, "6"))
		},
		denial: "is 10 but its children total 12",
	}, {
		name:   "two parent moves form a cycle",
		cohort: "race-cyc-%02d-x",
		setup: func(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, i int) (func(context.Context) error, func(context.Context) error) {
			x, y := fmt.Sprintf("race-cyc-%02d-x", i), fmt.Sprintf("race-cyc-%02d-y", i)
			mustCreate(t, aqtest.Cohort(x, "root").Obj())
			mustCreate(t, aqtest.Cohort(y, "root").Obj())
			return patch(x, `{"spec":{"parentRef":{"name":"`+y+`"}}}`), patch(y, `{"spec":{"parentRef":{"name":"`+x+`"}}}`)
		},
		denial: "spec.parentRef leads back to this node",
	}, {
		name:   "a budget raise races a sibling's create",
		cohort: "race-sib-%02d",
		setup: func(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, i int) (func(context.Context) error, func(context.Context) error) {
			c := fmt.Sprintf("race-sib-%02d", i)
			mustCreate(t, aqtest.Cohort(c, "root").Budget(gpu, "a100", "10").Obj())
			mustCreate(t, team(c+"-a", c, "4"))
			return nominal(c+"-a", "8"),
				create(team(c+"-b", c, "4"))
		},
		denial: "is 10 but its children total 12",
	}, {
		// A Cohort's lowering is serialized like a raise: only a team's is
		// not.
		name:   "a Cohort's lowering races its team's raise",
		cohort: "race-low-%02d",
		setup: func(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, i int) (func(context.Context) error, func(context.Context) error) {
			c := fmt.Sprintf("race-low-%02d", i)
			mustCreate(t, aqtest.Cohort(c, "root").Budget(gpu, "a100", "10").Obj())
			mustCreate(t, team(c+"-a", c, "4"))
			return nominal(c, "6"),
				nominal(c+"-a", "8")
		},
		denial: "is 6 but its children total 8",
	}, {
		name:   "a team's lowering races a sibling's raise that needs it",
		cohort: "race-need-%02d",
		setup: func(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, i int) (func(context.Context) error, func(context.Context) error) {
			c := fmt.Sprintf("race-need-%02d", i)
			mustCreate(t, aqtest.Cohort(c, "root").Budget(gpu, "a100", "10").Obj())
			mustCreate(t, team(c+"-a", c, "6"))
			mustCreate(t, team(c+"-b", c, "4"))
			return nominal(c+"-a", "2"),
				nominal(c+"-b", "8")
		},
		denial:   "is 10 but its children total 14",
		lowering: true,
	}}

	rounds := rc.rounds
	if rounds == 0 {
		rounds = 50
	}
	if v := os.Getenv("OME_RACE_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	var duringDone chan struct{}
	if rc.during != nil {
		duringDone = make(chan struct{})
		go func() { defer close(duringDone); rc.during(r1, r2) }()
	}
	won := map[string][2]int{}
	for _, sc := range scenarios {
		for i := 0; i < rounds || (duringDone != nil && !closed(duringDone)); i++ {
			a, bw := sc.setup(t, aqs, i)
			var wg sync.WaitGroup
			var errs [2]error
			start := make(chan struct{})
			for k, w := range []func(context.Context) error{a, bw} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[k] = retried(ctx, w)
				}()
			}
			if rc.burst != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rc.burst(ctx, lb, fmt.Sprintf(sc.cohort, i))
				}()
			}
			close(start)
			wg.Wait()
			if rc.during != nil && (isUnreachable(errs[0]) || isUnreachable(errs[1])) {
				// A write sent to a stopped replica fails with the API
				// server's timeout: only what was stored is checked.
				if v := storedViolations(t, aqs, "race-"); len(v) > 0 {
					t.Fatalf("%s, round %d: the stored tree breaks rules: %v", sc.name, i, v)
				}
				continue
			}
			switch {
			case sc.lowering:
				if errs[0] != nil {
					t.Errorf("%s, round %d: the lowering was refused: %v", sc.name, i, errs[0])
				}
				w := won[sc.name]
				if errs[1] == nil {
					w[1]++ // judged after the lowering
				} else if !apierrors.IsForbidden(errs[1]) || !strings.Contains(errs[1].Error(), sc.denial) {
					t.Errorf("%s, round %d: the raise was refused with %v, want a denial saying %q", sc.name, i, errs[1], sc.denial)
				}
				won[sc.name] = w
			case errs[0] == nil && errs[1] == nil:
				t.Errorf("%s, round %d: both writes admitted", sc.name, i)
			case errs[0] != nil && errs[1] != nil:
				t.Errorf("%s, round %d: both writes denied, though each fits alone: %v; %v", sc.name, i, errs[0], errs[1])
			default:
				loser := errs[0]
				if loser == nil {
					loser = errs[1]
				}
				if !apierrors.IsForbidden(loser) || !strings.Contains(loser.Error(), sc.denial) {
					t.Errorf("%s, round %d: the loser was refused with %v, want a denial saying %q", sc.name, i, loser, sc.denial)
				}
				w := won[sc.name]
				if errs[0] == nil {
					w[0]++
				} else {
					w[1]++
				}
				won[sc.name] = w
			}
			if v := storedViolations(t, aqs, "race-"); len(v) > 0 {
				t.Fatalf("%s, round %d: the stored tree breaks rules: %v", sc.name, i, v)
			}
		}
	}
	if duringDone != nil {
		<-duringDone
	}
	t.Logf("first or second write admitted, per scenario: %v", won)
	t.Logf("reviews sent to each replica: %d, %d", b.sent[0].Load(), b.sent[1].Load())
	for _, r := range []*replica{r1, r2} {
		require.Positive(t, r.metric(t, "ome_quota_webhook_verdicts_total", `verdict="denied"`), "%s denied nothing: it was not judging", r.Name)
		t.Logf("%s: %v reviews, %.2fs in all; %v judged with reservations not yet seen to land", r.Name,
			r.metric(t, "ome_quota_webhook_review_seconds_count"), r.metric(t, "ome_quota_webhook_review_seconds_sum"),
			r.metric(t, "ome_quota_webhook_uncertain_total"))
	}
	return r1, r2
}

// storedViolations evaluates the tree as the API server stores it and
// returns the violations of the nodes whose name has prefix.
func storedViolations(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, prefix string) []state.Violation {
	t.Helper()
	l, err := aqs.List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	list := l.Items
	tree := state.Tree{}
	for i := range list {
		tree[list[i].Name] = &list[i].Spec
	}
	marks := map[state.Pair]state.Amount{{Resource: gpu, Flavor: "a100"}: 1 << 40}
	var out []state.Violation
	for _, v := range state.Evaluate(tree, marks, map[string]bool{"a100": true}, events.DefaultConfig()) {
		if strings.HasPrefix(v.Node, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// deleteByPrefix deletes the nodes whose name has prefix, children first.
// A deletion the webhook refuses with "retry" (it waits on a reservation
// of a replica that was stopped, which holds until it expires: 75 s) is
// tried again each second, for up to twice that bound.
func deleteByPrefix(t *testing.T, aqs aqtyped.AcceleratorQuotaInterface, prefix string) {
	ctx := context.Background()
	testutil.Eventually(t, 150*time.Second, func() string {
		l, err := aqs.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		list := l.Items
		parents := map[string]bool{}
		var mine []string
		for _, aq := range list {
			if strings.HasPrefix(aq.Name, prefix) {
				mine = append(mine, aq.Name)
				if aq.Spec.ParentRef != nil {
					parents[aq.Spec.ParentRef.Name] = true
				}
			}
		}
		if len(mine) == 0 {
			return ""
		}
		for _, n := range mine {
			if !parents[n] {
				if err := aqs.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Logf("deleting %s: %v", n, err)
				}
			}
		}
		return fmt.Sprintf("nodes with prefix %s are left: %v", prefix, mine)
	})
}

// retried runs w until it gets an answer other than the webhook's "retry"
// (503 or 429: a write judged while others it depends on were not yet seen
// to land), for at most 90 s.
func retried(ctx context.Context, w func(context.Context) error) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := w(ctx)
		if err == nil || !isRetry(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isRetry: the webhook refused the write for now, saying to retry.
func isRetry(err error) bool {
	return (apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err)) && strings.Contains(err.Error(), "retry")
}

// isUnreachable: the API server could not get an answer from the webhook.
func isUnreachable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "failed calling webhook")
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

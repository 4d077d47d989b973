package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/api/v1beta1/aqtest"
	"ome.io/quota-manager/metrics"
)

// hugeSpec is the spec of a ClusterQueue under root with budgets budgets,
// each on a flavor of its own, and perCluster shares on the first one.
func hugeSpec(budgets, perCluster int) string {
	var sb strings.Builder
	sb.WriteString(`{"role":"ClusterQueue","parentRef":{"name":"root"},"budgets":[`)
	for i := range budgets {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"resourceName":"r","resourceFlavor":"f%05d","nominal":"1"`, i)
		if i == 0 && perCluster > 0 {
			sb.WriteString(`,"perCluster":[`)
			for c := range perCluster {
				if c > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `{"cluster":"c%05d","nominal":1}`, c)
			}
			sb.WriteByte(']')
		}
		sb.WriteByte('}')
	}
	sb.WriteString(`]}`)
	return sb.String()
}

// hugeReview is an AdmissionReview of op on team-x with the object's spec
// spec and, when old is not "", an old object with spec old: what a forged
// review of up to MaxRequestBytes can carry.
func hugeReview(op, spec, old string) []byte {
	obj := func(spec string) string {
		return `{"apiVersion":"ome.io/v1beta1","kind":"AcceleratorQuota","metadata":{"name":"team-x","uid":"o-1","resourceVersion":"7","generation":3},"spec":` + spec + `}`
	}
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-huge","kind":{"group":"ome.io","version":"v1beta1","kind":"AcceleratorQuota"},` +
		`"resource":{"group":"ome.io","version":"v1beta1","resource":"acceleratorquotas"},"operation":"` + op + `","name":"team-x","object":` + obj(spec)
	if old != "" {
		body += `,"oldObject":` + obj(old)
	}
	return []byte(body + `}}`)
}

// hugeReviews are forged reviews of at most MaxRequestBytes that break the
// CRD's limits, each with the start of the message that refuses it.
func hugeReviews(tb testing.TB) map[string]struct {
	body []byte
	msg  string
} {
	out := map[string]struct {
		body []byte
		msg  string
	}{
		"create/50000-budgets":     {hugeReview("CREATE", hugeSpec(50_000, 0), ""), "request.object: spec.budgets has more than 16 budgets"},
		"update/25000+25000":       {hugeReview("UPDATE", hugeSpec(25_000, 0), hugeSpec(24_999, 0)), "request.object: spec.budgets has more than 16 budgets"},
		"create/50000-perCluster":  {hugeReview("CREATE", hugeSpec(1, 50_000), ""), "request.object: spec.budgets[0].perCluster has more than 256 entries"},
		"create/3MiB-resourceName": {hugeReview("CREATE", strings.Replace(hugeSpec(1, 0), `"r"`, `"`+strings.Repeat("r", 3<<20-1024)+`"`, 1), ""), "request.object: spec.budgets[0].resourceName is 3144704 characters long"},
	}
	for name, tc := range out {
		if len(tc.body) > MaxRequestBytes {
			tb.Fatalf("%s: %d bytes, above MaxRequestBytes", name, len(tc.body))
		}
	}
	return out
}

// BenchmarkHugeReview is the cost of refusing a forged review that breaks
// the CRD's limits: 50,000 budgets in 3 MiB, and the like. It must stay well
// under 50 ms, and never reach the Judge.
func BenchmarkHugeReview(b *testing.B) {
	r := &Reviewer{
		Judge: func(context.Context, Write) (Verdict, error) {
			b.Fatal("the Judge was called")
			return Verdict{}, nil
		},
		Synced: func() bool { b.Fatal("Synced was called"); return false },
	}
	for name, tc := range hugeReviews(b) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				res := r.Review(context.Background(), tc.body)
				if resp := res.Review.Response; resp.Allowed || resp.Result.Code != 400 || !strings.HasPrefix(resp.Result.Message, tc.msg) {
					b.Fatalf("want a 400 starting %q, got %+v", tc.msg, resp.Result)
				}
			}
		})
	}
}

// floodServer is the webhook's handler on plain HTTP over loopback, with
// the bounds of New (MaxInFlight, one slot for large bodies), judging on
// the guide's tree under one lock, as the Ledger judges under the
// reducer's.
func floodServer(tb testing.TB) *httptest.Server {
	tb.Helper()
	o := DefaultOptions()
	o.CertHosts = []string{"127.0.0.1"}
	if err := o.Validate(); err != nil {
		tb.Fatal(err)
	}
	var reducer sync.Mutex
	judge := StaticJudge(func() *Inputs { return guideInputs() })
	r := &Reviewer{Synced: func() bool { return true }, Judge: func(ctx context.Context, w Write) (Verdict, error) {
		reducer.Lock()
		defer reducer.Unlock()
		return judge(ctx, w)
	}}
	s := &Server{opts: o, reviewer: r, certs: NewCerts(nil, o), metrics: metrics.New(),
		inFlight: make(chan struct{}, o.MaxInFlight), large: largeSlot(), callers: newCallers(&o.CertOptions)}
	b, err := issue(nil, nil, time.Now(), time.Hour, time.Hour, o.dnsNames, o.ips)
	if err != nil {
		tb.Fatal(err)
	}
	s.certs.load(logr.Discard(), b)
	srv := httptest.NewServer(s.Handler())
	tb.Cleanup(srv.Close)
	return srv
}

func post(c *http.Client, url string, body []byte) (int, error) {
	resp, err := c.Post(url+Path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// BenchmarkFlood is the latency of small reviews (a label write, admitted
// unjudged, and a budget write, judged) alone and while 50 clients keep
// sending forged reviews of 50,000 budgets in 3 MiB: it reports the 50th
// and 99th percentiles, and how many forged reviews were answered (200)
// per second of the flood.
func BenchmarkFlood(b *testing.B) {
	alpha16 := aqtest.GuideTree()[1]
	relabeled := alpha16.DeepCopy()
	relabeled.Labels = map[string]string{"team": "alpha"}
	alpha12 := aqtest.Team("team-alpha", "ml-research").Budget(gpu, "a100", "12").Obj()
	small := map[string][]byte{
		"label":  reviewOf(b, admissionv1.Update, "team-alpha", stored(relabeled), stored(alpha16), false),
		"budget": reviewOf(b, admissionv1.Update, "team-alpha", stored(alpha12), stored(alpha16), false),
	}
	huge := hugeReviews(b)["create/50000-budgets"].body
	for _, flood := range []int{0, 50} {
		for name, body := range small {
			b.Run(fmt.Sprintf("%s/flood=%d", name, flood), func(b *testing.B) {
				srv := floodServer(b)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var refused, answered atomic.Int64
				for range flood {
					wg.Go(func() {
						c := &http.Client{Transport: &http.Transport{}}
						defer c.CloseIdleConnections()
						for {
							select {
							case <-stop:
								return
							default:
							}
							if code, err := post(c, srv.URL, huge); err == nil {
								answered.Add(1)
								if code == http.StatusOK {
									refused.Add(1)
								}
							}
						}
					})
				}
				flooding := time.Now()
				time.Sleep(200 * time.Millisecond) // the flood under way
				c := &http.Client{Transport: &http.Transport{}}
				var took []time.Duration
				for b.Loop() {
					t0 := time.Now()
					if code, err := post(c, srv.URL, body); err != nil || code != http.StatusOK {
						b.Fatalf("status %d, %v", code, err)
					}
					took = append(took, time.Since(t0))
				}
				close(stop)
				elapsed := time.Since(flooding)
				wg.Wait()
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
				if flood > 0 {
					b.ReportMetric(float64(refused.Load())/elapsed.Seconds(), "forged-refused/s")
				}
			})
		}
	}
}

// BenchmarkCheckObjectLimits is the walk alone, on the object of a forged
// review (refused at the 17th budget) and on one within the limits whose
// 3 MiB are in a field no limit reads (walked whole).
func BenchmarkCheckObjectLimits(b *testing.B) {
	for name, tc := range map[string]struct {
		obj     string
		refused bool
	}{
		"50000-budgets": {`{"metadata":{"name":"team-x"},"spec":` + hugeSpec(50_000, 0) + `}`, true},
		"16-budgets-and-3MiB-distribution": {`{"metadata":{"name":"team-x"},"spec":{"distribution":{"x":"` + strings.Repeat("d", 3<<20) + `"},` +
			strings.TrimPrefix(hugeSpec(16, 256), "{") + `}`, false},
	} {
		raw := []byte(tc.obj)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := v1beta1.CheckObjectLimits(raw); (err != nil) != tc.refused {
					b.Fatal(err)
				}
			}
		})
	}
}

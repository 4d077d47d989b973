package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"

	"ome.io/quota-manager/test/localcluster"
	"ome.io/quota-manager/test/testutil/promtext"
	"ome.io/quota-manager/webhook"
)

// The API server's histogram of its calls of a webhook, and the labels
// that pick this webhook's calls of updates (the budget writes; the
// probe's dry runs are creates).
const (
	apiserverWebhook = "apiserver_admission_webhook_admission_duration_seconds"
	webhookUpdates   = `operation="UPDATE"`
)

// outcomes are the values of ome_quota_webhook_ledger_total's label.
var outcomes = []string{"reserved", "standing", "conflict", "failed", "denied", "lowering", "dry-run", "already", "unavailable"}

// hist is a histogram's cumulative buckets: the count of observations at
// most each upper bound (+Inf included).
type hist map[float64]float64

// buckets sums the cumulative buckets of a histogram, by upper bound, over
// the series whose labels include every one of match.
func buckets(f promtext.Families, family string, match ...string) hist {
	_, _, b := f.Histogram(family, match...)
	return hist(b)
}

func (h hist) sub(o hist) hist {
	out := hist{}
	for le, n := range h {
		out[le] = n - o[le]
	}
	return out
}

// count is the number of observations.
func (h hist) count() float64 { return h[math.Inf(1)] }

// within is the number of observations at most le, which must be one of
// the bounds.
func (h hist) within(le float64) float64 { return h[le] }

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: it finds the bucket that holds the q*count-th observation and
// interpolates linearly between its bounds (from 0 for the first bucket),
// as if the observations in it were spread evenly; in the +Inf bucket it
// answers the highest finite bound. lo and hi are that bucket's bounds:
// the quantile lies in (lo, hi] whatever the estimate. ok is false with no
// observations.
func (h hist) quantile(q float64) (est, lo, hi float64, ok bool) {
	les := slices.Sorted(maps.Keys(h))
	total := h.count()
	if total <= 0 || len(les) < 2 {
		return 0, 0, 0, false
	}
	rank := q * total
	below, prev := 0.0, 0.0
	for _, le := range les {
		n := h[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return prev, prev, le, true
			}
			if n == below {
				return le, prev, le, true
			}
			return prev + (le-prev)*(rank-below)/(n-below), prev, le, true
		}
		below, prev = n, le
	}
	return prev, prev, math.Inf(1), true
}

// histogram sums the sums and counts of a histogram's series whose
// labels include every one of match.
func histogram(f promtext.Families, family string, match ...string) (sum, count float64) {
	count, sum, _ = f.Histogram(family, match...)
	return sum, count
}

// counters are the figures that say where a write's time goes, read from
// the API server's and the manager's metrics.
type counters struct {
	calls, callSum     float64 // the API server's calls of the webhook for updates
	callHist           hist
	reviews, reviewSum float64 // the webhook's reviews (the probes' included)
	reviewHist         hist
	judged, judgeSum   float64 // its judgements of tree writes
	judgeHist          hist
	ledger             map[string]float64 // ome_quota_webhook_ledger_total by outcome
	uncertain          float64            // judged with related reservations unsettled
	puts, putSum       float64            // the API server's PUTs of the ledger
	puts5              float64            // of which within 5 ms
	patches, patchSum  float64            // the API server's PATCHes of AcceleratorQuotas
	// writes is the number of writes with the webhook the figures cover,
	// when they are a result's.
	writes int
}

func (b *bench) breakdown(ctx context.Context, m *localcluster.Manager) (counters, error) {
	var c counters
	raw, err := b.c.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return c, err
	}
	text, err := promtext.ParseString(string(raw))
	if err != nil {
		return c, err
	}
	ours := `name="` + webhook.WebhookName + `"`
	c.callSum, c.calls = histogram(text, apiserverWebhook, ours, webhookUpdates)
	c.callHist = buckets(text, apiserverWebhook, ours, webhookUpdates)
	c.putSum, c.puts = histogram(text, "apiserver_request_duration_seconds", `verb="PUT"`, `resource="admissionledgers"`, `subresource=""`)
	c.puts5 = buckets(text, "apiserver_request_duration_seconds", `verb="PUT"`, `resource="admissionledgers"`, `subresource=""`).within(0.005)
	c.patchSum, c.patches = histogram(text, "apiserver_request_duration_seconds", `verb="PATCH"`, `resource="acceleratorquotas"`, `subresource=""`)

	mt, err := managerMetrics(ctx, m)
	if err != nil {
		return c, err
	}
	c.reviewSum, c.reviews = histogram(mt, "ome_quota_webhook_review_seconds")
	c.reviewHist = buckets(mt, "ome_quota_webhook_review_seconds")
	c.judgeSum, c.judged = histogram(mt, "ome_quota_webhook_judge_seconds")
	c.judgeHist = buckets(mt, "ome_quota_webhook_judge_seconds")
	c.ledger = map[string]float64{}
	for _, o := range outcomes {
		c.ledger[o] = mt.Sum("ome_quota_webhook_ledger_total", `outcome="`+o+`"`)
	}
	c.uncertain = mt.Sum("ome_quota_webhook_uncertain_total")
	return c, nil
}

// managerMetrics is the manager's /metrics, read.
func managerMetrics(ctx context.Context, m *localcluster.Manager) (promtext.Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", m.MetricsPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", m.Name, err)
	}
	defer resp.Body.Close()
	return promtext.Parse(resp.Body)
}

func (c counters) sub(o counters) counters {
	out := counters{
		calls: c.calls - o.calls, callSum: c.callSum - o.callSum, callHist: c.callHist.sub(o.callHist),
		reviews: c.reviews - o.reviews, reviewSum: c.reviewSum - o.reviewSum, reviewHist: c.reviewHist.sub(o.reviewHist),
		judged: c.judged - o.judged, judgeSum: c.judgeSum - o.judgeSum, judgeHist: c.judgeHist.sub(o.judgeHist),
		ledger: map[string]float64{}, uncertain: c.uncertain - o.uncertain,
		puts: c.puts - o.puts, putSum: c.putSum - o.putSum, puts5: c.puts5 - o.puts5,
		patches: c.patches - o.patches, patchSum: c.patchSum - o.patchSum,
	}
	for k, v := range c.ledger {
		out.ledger[k] = v - o.ledger[k]
	}
	return out
}

// p99 describes a histogram's estimated p99 and the bucket it lies in:
// "1.91ms (in 0-5ms)".
func p99(h hist) string {
	est, lo, hi, ok := h.quantile(0.99)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%s (in %s-%s)", secs(est), secs(lo), secs(hi))
}

// secs writes a bound or an estimate in seconds as milliseconds, to three
// digits.
func secs(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "+Inf"
	case s >= 1:
		return strconv.FormatFloat(s, 'g', 3, 64) + "s"
	}
	return strconv.FormatFloat(1000*s, 'g', 3, 64) + "ms"
}

// print says where the time of one kind of write went: on is the number of
// writes with the webhook installed, off without.
func (c counters) print(n int, kind string, on, off int) {
	ms := func(sum, count float64) float64 { return 1000 * sum / max(count, 1) }
	per := func(x float64) float64 { return x / float64(max(on, 1)) }
	l := c.ledger
	fmt.Fprintf(os.Stderr, "n=%d, %s writes (%d with the webhook, %d without; the webhook also judges a dry-run probe per block):\n"+
		"  the API server: %d PATCHes of AcceleratorQuotas, mean %.2fms; %d webhook calls for updates (%.2f per write with the webhook), mean %.2fms, p99 %s, %d over 5ms, %d over 25ms\n"+
		"  the webhook: %d reviews, mean %.2fms, p99 %s; %d judgements, mean %.2fms, p99 %s\n"+
		"  the ledger: %d reserved (%.2f per write with the webhook), %d conflicts (lost compare-and-swaps, %.2f per write), %d uncertain judgements; "+
		"%d lowerings, %d already reserved, %d dry runs, %d denied, %d failed, %d unavailable; the API server's PUTs of the ledger: %d, mean %.2fms, %d over 5ms\n",
		n, kind, on, off,
		int(c.patches), ms(c.patchSum, c.patches), int(c.calls), per(c.calls), ms(c.callSum, c.calls), p99(c.callHist),
		int(c.calls-c.callHist.within(0.005)), int(c.calls-c.callHist.within(0.025)),
		int(c.reviews), ms(c.reviewSum, c.reviews), p99(c.reviewHist), int(c.judged), ms(c.judgeSum, c.judged), p99(c.judgeHist),
		int(l["reserved"]), per(l["reserved"]), int(l["conflict"]), per(l["conflict"]), int(c.uncertain),
		int(l["lowering"]), int(l["already"]), int(l["dry-run"]), int(l["denied"]), int(l["failed"]), int(l["unavailable"]),
		int(c.puts), ms(c.putSum, c.puts), int(c.puts-c.puts5))
}

// String is the line of a size's result on the API server's calls of the
// webhook during the budget writes.
func (c counters) String(n int) string {
	est, lo, hi, ok := c.callHist.quantile(0.99)
	if !ok {
		return fmt.Sprintf("aqs=%d: the API server called the webhook for no update", n)
	}
	bound := "above its highest bucket"
	if !math.IsInf(hi, 1) {
		bound = "at most " + secs(hi)
	}
	return fmt.Sprintf("aqs=%d: %s{name=%q,operation=\"UPDATE\"} over the %d budget writes with the webhook: %d calls, mean %.2fms, "+
		"p99 ~%s (linear within the bucket %s-%s that holds the 99th percentile, as histogram_quantile; %s for certain); "+
		"%.1f%% within 5ms, %.1f%% within 25ms; reservations per write %.2f, conflicts %d, uncertain %d",
		n, apiserverWebhook, webhook.WebhookName, c.writes, int(c.calls), 1000*c.callSum/max(c.calls, 1),
		secs(est), secs(lo), secs(hi), bound,
		100*c.callHist.within(0.005)/c.calls, 100*c.callHist.within(0.025)/c.calls,
		c.ledger["reserved"]/float64(max(c.writes, 1)), int(c.ledger["conflict"]), int(c.uncertain))
}

// Package promtext reads a Prometheus text exposition (a /metrics page)
// with Prometheus's own parser, for the tests and benchmark commands that
// read figures from the manager and the API server: the sum of a family's
// series, and a histogram's count, sum and cumulative buckets, over the
// series whose labels match.
package promtext

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Parse reads a text exposition.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics: %w", err)
	}
	return f, nil
}

// ParseString is Parse of a string.
func ParseString(s string) (Families, error) { return Parse(strings.NewReader(s)) }

// matches reports whether m's labels include every one of match, each
// written name="value"; a label that m lacks counts as "".
func matches(m *dto.Metric, match []string) bool {
	for _, want := range match {
		name, value, ok := strings.Cut(want, "=")
		if !ok {
			return false
		}
		value = strings.Trim(value, `"`)
		got := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				got = l.GetValue()
			}
		}
		if got != value {
			return false
		}
	}
	return true
}

// Sum sums the values of the series of family whose labels include every
// one of match (name="value"). As in the text, a histogram or summary X
// also reads as X_count and X_sum, and a histogram as X_bucket, whose
// le="B" picks the bucket whose upper bound, written as Prometheus writes
// it, starts with B; a summary's quantile="Q" picks its quantile Q.
func (f Families) Sum(family string, match ...string) float64 {
	if mf := f[family]; mf != nil {
		quantile, labels := take(match, "quantile")
		var sum float64
		for _, m := range mf.GetMetric() {
			if !matches(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Untyped != nil:
				sum += m.GetUntyped().GetValue()
			case m.Summary != nil && quantile != "":
				// A summary's series are its quantiles.
				for _, q := range m.GetSummary().GetQuantile() {
					if bound(q.GetQuantile()) == quantile {
						sum += q.GetValue()
					}
				}
			}
		}
		return sum
	}
	for _, part := range []string{"_count", "_sum", "_bucket"} {
		base, ok := strings.CutSuffix(family, part)
		if !ok || f[base] == nil {
			continue
		}
		le, labels := take(match, "le")
		var sum float64
		for _, m := range f[base].GetMetric() {
			if !matches(m, labels) {
				continue
			}
			switch {
			case m.Histogram != nil && part == "_count":
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.Histogram != nil && part == "_sum":
				sum += m.GetHistogram().GetSampleSum()
			case m.Histogram != nil && part == "_bucket":
				for _, b := range m.GetHistogram().GetBucket() {
					if strings.HasPrefix(bound(b.GetUpperBound()), le) {
						sum += float64(b.GetCumulativeCount())
					}
				}
			case m.Summary != nil && part == "_count":
				sum += float64(m.GetSummary().GetSampleCount())
			case m.Summary != nil && part == "_sum":
				sum += m.GetSummary().GetSampleSum()
			}
		}
		return sum
	}
	return 0
}

// take splits name's matcher (le, quantile: not labels once parsed) from
// the others.
func take(match []string, name string) (value string, labels []string) {
	for _, m := range match {
		if v, ok := strings.CutPrefix(m, name+"="); ok {
			value = strings.Trim(v, `"`)
		} else {
			labels = append(labels, m)
		}
	}
	return value, labels
}

// bound is an upper bound as the text writes it.
func bound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}

// Histogram sums, over the series of a histogram family whose labels
// include every one of match, the count, the sum, and the cumulative
// count at each upper bound (+Inf included).
func (f Families) Histogram(family string, match ...string) (count, sum float64, buckets map[float64]float64) {
	buckets = map[float64]float64{}
	mf := f[family]
	if mf == nil {
		return 0, 0, buckets
	}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		if h == nil || !matches(m, match) {
			continue
		}
		count += float64(h.GetSampleCount())
		sum += h.GetSampleSum()
		inf := false
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !inf {
			buckets[math.Inf(1)] += float64(h.GetSampleCount())
		}
	}
	return count, sum, buckets
}

package bench

import (
	"math"
	"sort"
)

// Summary holds the statistics reported for one latency metric, in
// milliseconds. Mean, median and standard deviation follow numpy's defaults
// as vLLM uses them: population standard deviation (ddof = 0) and percentiles
// by linear interpolation between closest ranks.
type Summary struct {
	Count  int     `json:"count"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Std    float64 `json:"std"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize computes a Summary over values given in milliseconds. The slice
// is sorted in place. An empty input yields zeros, as vLLM reports for a
// metric with no samples (np.mean(0)).
func Summarize(ms []float64) Summary {
	s := Summary{Count: len(ms)}
	if len(ms) == 0 {
		return s
	}
	sort.Float64s(ms)
	var sum float64
	for _, v := range ms {
		sum += v
	}
	s.Mean = sum / float64(len(ms))
	var sq float64
	for _, v := range ms {
		d := v - s.Mean
		sq += d * d
	}
	s.Std = math.Sqrt(sq / float64(len(ms)))
	s.Median = Percentile(ms, 50)
	s.P50 = s.Median
	s.P90 = Percentile(ms, 90)
	s.P95 = Percentile(ms, 95)
	s.P99 = Percentile(ms, 99)
	s.Min = ms[0]
	s.Max = ms[len(ms)-1]
	return s
}

// Percentile returns the p-th percentile (0..100) of sorted values using
// linear interpolation, numpy's default method. sorted must be ascending.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n == 1 {
		return sorted[0]
	}
	rank := p / 100 * float64(n-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	if lo < 0 {
		lo = 0
	}
	if hi >= n {
		hi = n - 1
	}
	frac := rank - float64(lo)
	return sorted[lo] + (sorted[hi]-sorted[lo])*frac
}

// Quantiles returns the values at 0, step, 2*step, ... 100 percent of sorted,
// the compact distribution the HTML report draws as a CDF.
func Quantiles(sorted []float64, step float64) []float64 {
	if len(sorted) == 0 {
		return nil
	}
	var out []float64
	for p := 0.0; p <= 100.0001; p += step {
		out = append(out, round3(Percentile(sorted, math.Min(p, 100))))
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

package bench

import (
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals returns n send offsets for an open-loop cell the way vLLM's
// bench serve draws them: gaps from Gamma(shape = burstiness, scale =
// 1/(rate*burstiness)), so burstiness 1 is a Poisson process, lower is
// burstier and +Inf is a constant rate; then the offsets are rescaled so
// the last one falls at n/rate, which keeps throughput comparable across
// seeds. An infinite rate sends everything at once.
func Arrivals(n int, rate, burstiness float64, rng *rand.Rand) []time.Duration {
	out := make([]time.Duration, n)
	if n == 0 || math.IsInf(rate, 1) {
		return out
	}
	cum := make([]float64, n)
	acc := 0.0
	for i := range cum {
		acc += gap(rate, burstiness, rng)
		cum[i] = acc
	}
	if acc > 0 {
		scale := float64(n) / rate / acc
		for i := range cum {
			cum[i] *= scale
		}
	}
	for i, c := range cum {
		out[i] = time.Duration(c * float64(time.Second))
	}
	return out
}

// gap draws one inter-arrival time in seconds.
func gap(rate, burstiness float64, rng *rand.Rand) float64 {
	if math.IsInf(burstiness, 1) {
		return 1 / rate
	}
	return gammaSample(burstiness, 1/(rate*burstiness), rng)
}

// gammaSample draws from Gamma(shape k, scale theta) by Marsaglia and
// Tsang's method, boosting shapes below one.
func gammaSample(k, theta float64, rng *rand.Rand) float64 {
	if k < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gammaSample(k+1, theta, rng) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v * theta
		}
	}
}

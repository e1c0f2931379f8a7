package bench

import (
	"math"
	"sort"
)

// Interval is the spread of one figure of a cell. For one run, Low and High
// bound its 95% confidence interval from the run's samples (see
// quantileCI and meanCI) and Min = Max = the figure. For a cell measured
// over several runs, Min and Max are the smallest and largest of the runs'
// figures and Low..High is the 95% interval of Student's t over them.
type Interval struct {
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Low  float64 `json:"ci95_low"`
	High float64 `json:"ci95_high"`
	// Open says the true upper bound is above High, which is then the
	// largest sample: too few samples to bound a tail percentile.
	Open bool `json:"ci95_high_open,omitempty"`
}

// upper is the interval's upper bound, +Inf when open.
func (iv Interval) upper() float64 {
	if iv.Open {
		return math.Inf(1)
	}
	return iv.High
}

// z95 is the two-sided 95% quantile of the standard normal distribution.
const z95 = 1.959963984540054

// quantileCI returns a distribution-free 95% confidence interval of the
// q-th quantile (0..1) of the population sorted was drawn from: the order
// statistics X(l) and X(u) with P(l ≤ B < u) ≥ 95% for B ~ Binomial(n, q),
// each tail at most 2.5% (exact for n ≤ 5000, the normal approximation
// above). When even the largest sample is not a 97.5% upper bound (the
// p99 of fewer than about 370 requests) open is set and hi is that largest
// sample: the true bound is higher, by an amount the sample cannot tell.
// Below, the bound is 0 when no sample is low enough. sorted must be
// ascending.
func quantileCI(sorted []float64, q float64) (lo, hi float64, open bool) {
	n := len(sorted)
	if n == 0 {
		return 0, 0, false
	}
	l, u := binomialRanks(n, q)
	if l >= 1 {
		lo = sorted[l-1]
	}
	if u > n {
		return lo, sorted[n-1], true
	}
	return lo, sorted[u-1], false
}

// binomialRanks returns the 1-based ranks l and u of quantileCI: l = 0
// when no rank is a lower bound, u = n+1 when none is an upper bound.
func binomialRanks(n int, q float64) (l, u int) {
	const tail = 0.025
	if n > 5000 {
		sd := math.Sqrt(float64(n) * q * (1 - q))
		l = int(math.Floor(float64(n)*q - z95*sd))
		u = int(math.Ceil(float64(n)*q+z95*sd)) + 1
		return max(l, 0), min(u, n+1)
	}
	// pmf(k) by the log-gamma form, cumulated from both ends.
	lq, lp := math.Log(q), math.Log1p(-q)
	lgn, _ := math.Lgamma(float64(n + 1))
	pmf := func(k int) float64 {
		a, _ := math.Lgamma(float64(k + 1))
		b, _ := math.Lgamma(float64(n - k + 1))
		return math.Exp(lgn - a - b + float64(k)*lq + float64(n-k)*lp)
	}
	// l: the largest rank with P(B ≤ l−1) ≤ tail.
	cdf := 0.0
	for k := 0; k <= n; k++ {
		cdf += pmf(k)
		if cdf > tail {
			l = k // P(B ≤ k−1) ≤ tail < P(B ≤ k)
			break
		}
	}
	// u: the smallest rank with P(B ≥ u) ≤ tail.
	sf := 0.0
	u = n + 1
	for k := n; k >= 0; k-- {
		sf += pmf(k)
		if sf > tail {
			u = k + 1 // P(B ≥ k+1) ≤ tail < P(B ≥ k)
			break
		}
	}
	return l, u
}

// meanCI returns the normal-approximation 95% interval of the mean.
func meanCI(vals []float64, mean float64) (lo, hi float64) {
	n := len(vals)
	if n < 2 {
		return mean, mean
	}
	var sq float64
	for _, v := range vals {
		sq += (v - mean) * (v - mean)
	}
	se := math.Sqrt(sq/float64(n-1)) / math.Sqrt(float64(n))
	return mean - z95*se, mean + z95*se
}

// runsInterval summarizes one figure over several runs: min, max and
// Student's t 95% interval of the mean of the runs' values, clamped at
// zero for figures that cannot be negative (all of bench's are).
func runsInterval(vals []float64) Interval {
	iv := Interval{Min: math.Inf(1), Max: math.Inf(-1)}
	var sum float64
	for _, v := range vals {
		iv.Min, iv.Max = math.Min(iv.Min, v), math.Max(iv.Max, v)
		sum += v
	}
	n := float64(len(vals))
	mean := sum / n
	if len(vals) < 2 {
		iv.Low, iv.High = mean, mean
		return iv
	}
	var sq float64
	for _, v := range vals {
		sq += (v - mean) * (v - mean)
	}
	half := studentT975(len(vals)-1) * math.Sqrt(sq/(n-1)) / math.Sqrt(n)
	iv.Low, iv.High = math.Max(0, mean-half), mean+half
	return iv
}

// median returns the median of vals (not modified).
func median(vals []float64) float64 {
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	return Percentile(s, 50)
}

// studentT975 is the 97.5% quantile of Student's t with df degrees of
// freedom (the half-width factor of a two-sided 95% interval).
func studentT975(df int) float64 { return studentTQuantile(0.975, float64(df)) }

// studentTQuantile inverts studentTCDF by bisection.
func studentTQuantile(p, df float64) float64 {
	lo, hi := 0.0, 1000.0
	for i := 0; i < 200; i++ {
		mid := (lo + hi) / 2
		if studentTCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// studentTCDF is the distribution function of Student's t.
func studentTCDF(t, df float64) float64 {
	x := df / (df + t*t)
	tail := 0.5 * regIncBeta(df/2, 0.5, x)
	if t >= 0 {
		return 1 - tail
	}
	return tail
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by
// its continued fraction (Numerical Recipes' betacf).
func regIncBeta(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	lga, _ := math.Lgamma(a)
	lgb, _ := math.Lgamma(b)
	lgab, _ := math.Lgamma(a + b)
	front := math.Exp(lgab - lga - lgb + a*math.Log(x) + b*math.Log(1-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

func betaCF(a, b, x float64) float64 {
	const eps, tiny = 1e-14, 1e-300
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		aa := fm * (b - fm) * x / ((qam + 2*fm) * (a + 2*fm))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + 2*fm) * (qap + 2*fm))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}

// welch tests whether two groups of run values differ: Welch's t-test,
// two-sided. ok is false when either group has fewer than two values.
func welch(a, b []float64) (p float64, ok bool) {
	if len(a) < 2 || len(b) < 2 {
		return 1, false
	}
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	na, nb := float64(len(a)), float64(len(b))
	se2 := va/na + vb/nb
	if se2 == 0 {
		if ma == mb {
			return 1, true
		}
		return 0, true
	}
	t := (mb - ma) / math.Sqrt(se2)
	df := se2 * se2 / ((va/na)*(va/na)/(na-1) + (vb/nb)*(vb/nb)/(nb-1))
	return 2 * (1 - studentTCDF(math.Abs(t), df)), true
}

func meanVar(v []float64) (mean, variance float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(v)-1)
}

// intervalTest tests whether two figures measured once each, with their
// 95% intervals from their own samples, differ: each interval's half on
// the side facing the other figure gives its standard error, and the
// difference is compared with the normal distribution, two-sided.
func intervalTest(a, b float64, ia, ib Interval) (p float64, ok bool) {
	halfA, halfB := ia.upper()-a, b-ib.Low
	if b < a {
		halfA, halfB = a-ia.Low, ib.upper()-b
	}
	if math.IsInf(halfA, 1) || math.IsInf(halfB, 1) {
		return 1, true // the tail is unbounded on the side that matters
	}
	if halfA < 0 || halfB < 0 || (ia.Low == 0 && ia.High == 0 && ib.Low == 0 && ib.High == 0) {
		return 1, false
	}
	se := math.Hypot(halfA, halfB) / z95
	if se == 0 {
		if a == b {
			return 1, true
		}
		return 0, true
	}
	z := math.Abs(b-a) / se
	return math.Erfc(z / math.Sqrt2), true
}

// Package sat is the saturating int64 arithmetic of reservations: a sum
// or product too large for an int64 stops at the largest (or smallest)
// value instead of wrapping around. A reservation that wrapped would turn
// an enormous request into a negative cost that every budget admits.
package sat

import "math"

// Add returns a+b, or math.MaxInt64 (math.MinInt64) where that overflows.
func Add(a, b int64) int64 {
	c := a + b
	switch {
	case a > 0 && b > 0 && c < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && c >= 0:
		return math.MinInt64
	}
	return c
}

// Mul returns a*b, or math.MaxInt64 (math.MinInt64) where that overflows.
func Mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		if (a < 0) != (b < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return c
}

// FromFloat rounds f to the nearest int64, saturating at the int64 range
// (Go's own conversion of an out-of-range float is implementation-defined:
// on amd64 it gives math.MinInt64). NaN, which no price can produce but a
// division by zero could, counts as the largest value: a reservation of
// unknown size is refused rather than admitted for free.
func FromFloat(f float64) int64 {
	f = math.Round(f)
	switch {
	case f != f || f >= math.MaxInt64: // float64(MaxInt64) is 2^63, itself out of range
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

package sat

import (
	"math"
	"testing"
)

func TestAdd_SaturatesInsteadOfWrapping(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 - 1, 1, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{math.MaxInt64, math.MinInt64, -1},
		{-5, 3, -2},
	} {
		if got := Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestMul_SaturatesInsteadOfWrapping(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{0, math.MaxInt64, 0},
		{3, 4, 12},
		{30000, 2147483648, 64424509440000},
		{64424509440000, 1 << 31, math.MaxInt64},
		{1 << 32, 1 << 31, math.MaxInt64}, // 2^63 does not fit
		{-1 << 40, 1 << 40, math.MinInt64},
		{-1 << 40, -1 << 40, math.MaxInt64},
		{-1, math.MinInt64, math.MaxInt64},
		{math.MinInt64, -1, math.MaxInt64},
		{math.MinInt64, 1, math.MinInt64},
	} {
		if got := Mul(c.a, c.b); got != c.want {
			t.Errorf("Mul(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestFromFloat_SaturatesAndRounds(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want int64
	}{
		{0.4, 0}, {0.5, 1}, {-0.5, -1}, {1e3, 1000},
		{6.4e19, math.MaxInt64}, {math.Inf(1), math.MaxInt64}, {math.NaN(), math.MaxInt64},
		{math.MaxInt64, math.MaxInt64}, {-6.4e19, math.MinInt64}, {math.Inf(-1), math.MinInt64},
		{9.007199254740993e15, 9007199254740992},
	} {
		if got := FromFloat(c.f); got != c.want {
			t.Errorf("FromFloat(%g) = %d, want %d", c.f, got, c.want)
		}
	}
}

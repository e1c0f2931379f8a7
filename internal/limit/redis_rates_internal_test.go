package limit

import (
	"math"
	"testing"
	"time"
)

// The replayed level is never above what the bucket can hold after those
// uses, and equals it for the patterns that matter: idle, a burst just
// now, a burst long enough ago, steady use at the refill rate.
func TestReplayLevel_IsALowerBoundOfTheBucket(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ago := func(s float64) time.Time { return now.Add(-time.Duration(s * float64(time.Second))) }
	reqs := func(u Use) int64 { return u.Requests }
	steady := make([]Use, 0, 60)
	for i := 0; i < 60; i++ {
		steady = append(steady, Use{At: ago(float64(i)), Requests: 1})
	}
	for _, c := range []struct {
		name     string
		uses     []Use
		inflight int64
		want     float64
	}{
		{"idle for a minute: full", nil, 0, 60},
		{"60 in the last second: empty", []Use{{At: now, Requests: 60}}, 0, 0},
		{"60 thirty seconds ago: half refilled", []Use{{At: ago(30), Requests: 60}}, 0, 30},
		{"60 a minute ago: full again", []Use{{At: ago(60), Requests: 60}}, 0, 60},
		{"steady at the refill rate: empty", steady, 0, 0},
		{"20 ago, 30 in flight", []Use{{At: ago(0), Requests: 20}}, 30, 10},
		{"more in flight than the limit: empty, not negative", nil, 90, 0},
		{"a use from the future counts now", []Use{{At: now.Add(time.Hour), Requests: 60}}, 0, 0},
	} {
		got := replayLevel(60, now, c.uses, reqs, c.inflight)
		if math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s: level %.3f, want %.3f", c.name, got, c.want)
		}
	}
}

package testenv

import (
	"testing"
	"time"
)

// Poll checks cond until it holds or within has passed, with a short
// back-off (from half a millisecond, doubling, to at most 25ms between
// checks), and reports how long it waited and whether cond held. cond is
// checked once more at the deadline. Use it where a test that times out
// reports more than a fixed sentence; otherwise use Eventually.
func Poll(within time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	deadline := start.Add(within)
	pause := 500 * time.Microsecond
	for {
		if cond() {
			return time.Since(start), true
		}
		left := time.Until(deadline)
		if left < 0 {
			return time.Since(start), false
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, 25*time.Millisecond)
	}
}

// Eventually waits, as Poll does, for cond to hold and returns how long that
// took; if it does not hold within the given time, the test fails with
// "what: not within <within>".
func Eventually(t testing.TB, within time.Duration, cond func() bool, what string) time.Duration {
	t.Helper()
	took, ok := Poll(within, cond)
	if !ok {
		t.Fatalf("%s: not within %v", what, within)
	}
	return took
}

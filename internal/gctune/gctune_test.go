package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		live, roots, floor uint64
		want               int
	}{
		{0, 0, 64 * mb, 100},                  // before the first collection: the runtime's own goal
		{1 * mb, 1 * mb, 64 * mb, maxPercent}, // 6300 % capped
		{16 * mb, 16 * mb, 64 * mb, 300},      // 16 → 64 MB
		{16 * mb, 24 * mb, 64 * mb, 200},      // 8 MB of stacks and globals scale with the percentage too
		{16 * mb, 0, 64 * mb, 300},            // roots are at least the live heap
		{32 * mb, 32 * mb, 64 * mb, 100},      // twice the live heap is the floor
		{40 * mb, 48 * mb, 64 * mb, 100},      // above: the default ratio
		{2000 * mb, 2000 * mb, 64 * mb, 100},
	} {
		if got := Percent(c.live, c.roots, c.floor, 100); got != c.want {
			t.Errorf("Percent(%d MB, %d MB, %d MB) = %d, want %d", c.live/mb, c.roots/mb, c.floor/mb, got, c.want)
		}
	}
}

// The tuner re-arms after each collection and sets the percentage the
// live heap asks for again; Stop restores the default.
func TestTunerFollowsCollections(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tu := Start(1 << 40) // a floor no test heap reaches: the cap applies
	if tu == nil {
		t.Fatal("Start returned nil with GOGC and GOMEMLIMIT unset")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		runtime.GC()
		return gogc() == maxPercent
	}, "the tuner to set the percentage after a collection")
	for round := 0; round < 3; round++ {
		debug.SetGCPercent(123) // changed behind its back
		tu.last.Store(123)
		testenv.Eventually(t, 10*time.Second, func() bool {
			runtime.GC()
			return gogc() == maxPercent
		}, "the tuner to set the percentage again after a collection")
	}
	tu.Stop()
	if got := gogc(); got != 100 {
		t.Fatalf("after Stop the percentage is %d, want 100", got)
	}
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func TestOperatorSettingWins(t *testing.T) {
	t.Setenv("GOGC", "200")
	if tu := Start(0); tu != nil {
		tu.Stop()
		t.Fatal("Start tuned with GOGC set")
	}
}

package bench

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(UpstreamChildEnv) == "1" {
		// Re-executed by StartUpstreamChild: be the upstream server.
		if err := ServeUpstreamChild(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkClientCapacity measures how many streamed chunks per second one
// core of the client ingests while its p99 timestamp error stays ≤ 1 ms.
// The upstream runs in a child process so that only the client's cost
// lands on the client's core. Run it alone on a quiet machine:
//
//	go test -run '^$' -bench ClientCapacity -benchtime 1x ./internal/bench/
func BenchmarkClientCapacity(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	base, stop, err := StartUpstreamChild(ctx, exe)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	for i := 0; i < b.N; i++ {
		steps, best, err := MeasureCapacity(ctx, CapacityOptions{BaseURL: base, OneCore: true, Step: 2 * time.Second, Progress: os.Stderr})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(best, "chunks/s@1ms")
		if len(steps) > 0 {
			b.ReportMetric(steps[len(steps)-1].ErrP99, "ms-p99-err-last-step")
		}
	}
}

func TestCapacity_ChildUpstreamAndErrorAccounting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, stop, err := StartUpstreamChild(ctx, exe)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// A low rate: the point is that the cross-process bookkeeping (request
	// ids, server write log, chunk matching) is right, not speed.
	steps, _, err := MeasureCapacity(ctx, CapacityOptions{BaseURL: base, Streams: 4, Rates: []float64{400}, Step: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	st := steps[0]
	t.Logf("%+v", st)
	if st.Failed != 0 || st.Chunks != 4*int(250*time.Millisecond/(10*time.Millisecond)) {
		t.Errorf("step %+v: want 4 streams × 25 chunks, no failures", st)
	}
	if st.ErrP50 < -1 || st.ErrP50 > 50 {
		t.Errorf("median cross-process timestamp error %.3f ms is implausible", st.ErrP50)
	}
}

package usage

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

type fakeRetainer struct {
	mu   sync.Mutex
	cuts []time.Time
	cut  chan struct{} // when set, hears of every run
}

func (f *fakeRetainer) DeleteUsageBefore(_ context.Context, t time.Time) (int64, error) {
	f.mu.Lock()
	f.cuts = append(f.cuts, t)
	f.mu.Unlock()
	if f.cut != nil {
		f.cut <- struct{}{}
	}
	return 1, nil
}

func TestRunRetention_DeletesOlderThanKeepAtStartAndEveryInterval(t *testing.T) {
	f := &fakeRetainer{cut: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { RunRetention(ctx, f, 48*time.Hour, 20*time.Millisecond, quiet); close(done) }()
	for i := 0; i < 2; i++ { // the run at start, then one an interval later
		select {
		case <-f.cut:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d runs after 10s, want one at start and more every interval", i)
		}
	}
	cancel()
	go func() { // a run under way when cancel lands
		for range f.cut {
		}
	}()
	<-done
	close(f.cut)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cuts) < 2 {
		t.Fatalf("%d runs, want one at start and more every interval", len(f.cuts))
	}
	if age := time.Since(f.cuts[0]); age < 48*time.Hour || age > 48*time.Hour+time.Minute {
		t.Fatalf("cutoff %v ago, want 48h", age)
	}
}

func TestRunRetention_ZeroKeepsEverything(t *testing.T) {
	f := &fakeRetainer{}
	RunRetention(context.Background(), f, 0, time.Millisecond, quiet) // returns at once
	if len(f.cuts) != 0 {
		t.Fatal("retention 0 deleted records")
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

package ledger

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

type recordingWriter struct {
	mu      sync.Mutex
	batches [][]usage.Record
	gate    chan struct{} // when set, each write waits for a token
	entered chan struct{} // when set, told when a write starts
}

func (w *recordingWriter) InsertUsage(ctx context.Context, recs []usage.Record) error {
	if w.entered != nil {
		select {
		case w.entered <- struct{}{}:
		default:
		}
	}
	if w.gate != nil {
		<-w.gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches = append(w.batches, append([]usage.Record(nil), recs...))
	return nil
}

func (w *recordingWriter) ids() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := map[string]int{}
	for _, b := range w.batches {
		for _, r := range b {
			m[r.ID]++
		}
	}
	return m
}

var ledgerLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestLedger_EveryRecordWrittenOnceInBoundedBatches(t *testing.T) {
	w := &recordingWriter{}
	l := NewLedger(w, Options{MaxBatch: 32, Interval: 5 * time.Millisecond}, ledgerLog)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				if err := l.Add(usage.Record{ID: fmt.Sprintf("%d-%d", g, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids := w.ids()
	if len(ids) != 8000 {
		t.Fatalf("%d distinct records written, want 8000", len(ids))
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("record %s written %d times", id, n)
		}
	}
	for _, b := range w.batches {
		if len(b) == 0 || len(b) > 32 {
			t.Fatalf("batch of %d records, want 1..32", len(b))
		}
	}
	if l.Depth() != 0 {
		t.Fatalf("depth %d after close", l.Depth())
	}
	if err := l.Add(usage.Record{ID: "late"}); err != ErrClosed {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
}

// A full queue makes Add wait (back-pressure, never a dropped record) until
// the writer catches up.
func TestLedger_FullQueueBlocksAddUntilTheWriterCatchesUp(t *testing.T) {
	w := &recordingWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	// No timed flush: a tick between two Adds would hand the writer part of
	// a batch and leave the test's own Adds blocked on a full queue. The
	// writer runs only on a full batch here.
	l := NewLedger(w, Options{Queue: 10, MaxBatch: 10, Interval: time.Hour}, ledgerLog)
	for i := 0; i < 10; i++ { // the writer takes these and waits at the gate
		if err := l.Add(usage.Record{ID: fmt.Sprint("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	select { // a full batch is written at once
	case <-w.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not start on a full batch")
	}
	for i := 0; i < 10; i++ { // fills the queue again
		if err := l.Add(usage.Record{ID: fmt.Sprint("b", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if d := l.Depth(); d != 10 {
		t.Fatalf("depth %d, want 10 queued (10 more being written)", d)
	}
	added := make(chan struct{})
	go func() { _ = l.Add(usage.Record{ID: "c"}); close(added) }()
	select {
	case <-added:
		t.Fatal("Add returned with a full queue")
	case <-time.After(50 * time.Millisecond):
	}
	close(w.gate) // the writer catches up
	select {
	case <-added:
	case <-time.After(5 * time.Second):
		t.Fatal("Add still blocked after the writer caught up")
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(w.ids()); n != 21 {
		t.Fatalf("%d records written, want 21", n)
	}
}

// An Add waiting on a full queue when Close begins is not refused: its
// record is written with the rest before Close returns.
func TestLedger_CloseWritesTheAddsWaitingOnAFullQueue(t *testing.T) {
	w := &recordingWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	// The writer runs on full batches only (no timed flush).
	l := NewLedger(w, Options{Queue: 4, MaxBatch: 4, Interval: time.Hour}, ledgerLog)
	for i := 0; i < 4; i++ { // taken by the writer, which waits at the gate
		if err := l.Add(usage.Record{ID: fmt.Sprint("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-w.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not start on a full batch")
	}
	for i := 0; i < 4; i++ { // fills the queue again
		if err := l.Add(usage.Record{ID: fmt.Sprint("b", i)}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { errs <- l.Add(usage.Record{ID: fmt.Sprint("c", i)}) }()
	}
	waiting := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.waiting
	}
	if _, ok := testenv.Poll(5*time.Second, func() bool { return waiting() == 3 }); !ok { // all three wait on the full queue
		t.Fatalf("%d Adds waiting, want 3", waiting())
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close(context.Background()) }()
	for i := 0; i < 3; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("a waiting Add got %v at close, want its record accepted", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiting Add still blocked after Close began")
		}
	}
	close(w.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if ids := w.ids(); len(ids) != 11 || ids["c0"] != 1 || ids["c2"] != 1 {
		t.Fatalf("written %v, want 11 records each once, c0..c2 among them", ids)
	}
	if err := l.Add(usage.Record{ID: "late"}); err != ErrClosed {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
}

type paceWriter struct {
	mu    sync.Mutex
	paced []bool // per write: was an easy pace asked for
	gate  chan struct{}
}

func (w *paceWriter) InsertUsage(ctx context.Context, recs []usage.Record) error {
	if w.gate != nil {
		<-w.gate
	}
	_, ok := ctx.Value(paceKey{}).(time.Duration)
	w.mu.Lock()
	w.paced = append(w.paced, ok)
	w.mu.Unlock()
	return nil
}

// A small backlog is written at an easy pace; a large one flat out.
func TestLedger_PacesOnlyASmallBacklog(t *testing.T) {
	w := &paceWriter{gate: make(chan struct{}, 1)}
	// No timed flush: the test wakes the writer itself (l.kick), so what
	// each write takes does not depend on when a ticker fires.
	l := NewLedger(w, Options{Interval: time.Hour, MaxBatch: 2 * PaceBacklog}, ledgerLog)
	defer l.Close(context.Background())
	w.gate <- struct{}{}
	for i := 0; i < 10; i++ {
		l.Add(usage.Record{ID: fmt.Sprint("a", i)})
	}
	l.kick <- struct{}{}
	waitWrites := func(n int) []bool {
		t.Helper()
		var p []bool
		testenv.Eventually(t, 5*time.Second, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			p = append([]bool(nil), w.paced...)
			return len(p) >= n
		}, fmt.Sprintf("%d writes", n))
		return p
	}
	if p := waitWrites(1); !p[0] {
		t.Fatal("a batch of 10 records was not paced")
	}
	// The writer takes one record and is held at the gate while a backlog
	// builds up.
	l.Add(usage.Record{ID: "b"})
	l.kick <- struct{}{}
	testenv.Eventually(t, 5*time.Second, func() bool { return l.Depth() == 0 }, "the writer took the record")
	for i := 0; i < PaceBacklog+1; i++ {
		l.Add(usage.Record{ID: fmt.Sprint("c", i)})
	}
	close(w.gate)
	l.kick <- struct{}{}
	p := waitWrites(3)
	if len(p) != 3 || !p[1] || p[2] {
		t.Fatalf("paced writes %v: want the single record paced and the backlog of %d not", p, PaceBacklog+1)
	}
}

func TestPace_RestsEveryPaceRowsOnlyWhenAsked(t *testing.T) {
	var rests []time.Duration
	paceSleep = func(d time.Duration) { rests = append(rests, d) }
	defer func() { paceSleep = time.Sleep }()
	ctx := context.WithValue(context.Background(), paceKey{}, 300*time.Microsecond)
	for i := 0; i < 3*PaceRows; i++ {
		Pace(ctx, i)
		Pace(context.Background(), i) // not asked: never rests
	}
	if len(rests) != 3 || rests[0] != 300*time.Microsecond {
		t.Fatalf("rests %v over %d rows, want 3 of 300µs", rests, 3*PaceRows)
	}
}

// A statement of many rows rests once, as long as the rests its rows
// would have taken one at a time.
func TestPaceRange_OneRestPerStatement(t *testing.T) {
	var rests []time.Duration
	paceSleep = func(d time.Duration) { rests = append(rests, d) }
	defer func() { paceSleep = time.Sleep }()
	ctx := context.WithValue(context.Background(), paceKey{}, 300*time.Microsecond)
	PaceRange(ctx, 0, 32)  // rows 0..31: four boundaries
	PaceRange(ctx, 32, 36) // 32..35: none
	PaceRange(ctx, 36, 44) // 36..43: one (at 40)
	PaceRange(context.Background(), 0, 64)
	want := []time.Duration{1200 * time.Microsecond, 300 * time.Microsecond}
	if fmt.Sprint(rests) != fmt.Sprint(want) {
		t.Fatalf("rests %v, want %v", rests, want)
	}
}

// An idle ledger's writer sleeps: no round runs until a record comes,
// then one runs an interval later without Flush, and the next record
// arms it again. (It used to look at an empty queue every interval.)
func TestLedger_TheWriterSleepsUntilARecordComes(t *testing.T) {
	for _, journaled := range []bool{false, true} {
		t.Run(fmt.Sprint("journaled=", journaled), func(t *testing.T) {
			w := &recordingWriter{entered: make(chan struct{}, 1)}
			opt := Options{Interval: time.Millisecond}
			if journaled {
				sp, err := OpenSpool(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				opt.Spool = sp
			}
			l := NewLedger(w, opt, ledgerLog)
			defer l.Close(context.Background())
			time.Sleep(30 * time.Millisecond) // thirty intervals
			if n := l.roundsRun.Load(); n != 0 {
				t.Fatalf("%d writer rounds with nothing queued, want 0", n)
			}
			for i := range 2 {
				if err := l.Add(usage.Record{ID: fmt.Sprint("r", i)}); err != nil {
					t.Fatal(err)
				}
				select {
				case <-w.entered:
				case <-time.After(10 * time.Second):
					t.Fatalf("record %d not written within 10s of its Add, no Flush asked", i)
				}
			}
			// entered is told when a write starts, before it is recorded.
			testenv.Eventually(t, 10*time.Second, func() bool {
				ids := w.ids()
				return ids["r0"] == 1 && ids["r1"] == 1
			}, "both records written once each")
		})
	}
}

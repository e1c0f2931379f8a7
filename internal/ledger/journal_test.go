package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// spoolLines returns every record line in the spool's segment files.
func spoolLines(t *testing.T, dir string) []usage.Record {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, segPrefix+"*"+segSuffix))
	if err != nil {
		t.Fatal(err)
	}
	var out []usage.Record
	for _, p := range segs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var r usage.Record
			if err := decodeRecord(line, &r); err != nil {
				t.Fatalf("bad spool line %q: %v", line, err)
			}
			out = append(out, r)
		}
	}
	return out
}

func openSpool(t *testing.T) (*Spool, string) {
	t.Helper()
	dir := t.TempDir()
	sp, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	return sp, dir
}

// Add returns only once its record is in a spool file: with the database
// writer stuck, every record whose Add returned is already on disk.
func TestLedger_AddReturnsOnceTheRecordIsInTheSpool(t *testing.T) {
	sp, dir := openSpool(t)
	w := &recordingWriter{gate: make(chan struct{})}
	l := NewLedger(w, Options{Spool: sp, Interval: time.Hour, MaxBatch: 2}, ledgerLog)
	for i := 0; i < 5; i++ {
		r := usage.Record{ClientRequestID: fmt.Sprint("c", i), Model: "m", Status: 200, Time: time.Now()}
		if err := l.Add(r); err != nil {
			t.Fatal(err)
		}
		lines := spoolLines(t, dir)
		if len(lines) != i+1 || lines[i].ClientRequestID != r.ClientRequestID || !usage.IsNewID(lines[i].ID) {
			t.Fatalf("after Add %d the spool holds %+v", i, lines)
		}
	}
	close(w.gate)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(w.ids()); n != 5 {
		t.Fatalf("%d records stored, want 5", n)
	}
	if left := spoolLines(t, dir); len(left) != 0 {
		t.Fatalf("%d records left in the spool after every one was stored", len(left))
	}
}

// Adds that arrive while a spool write is in progress share the next one
// (group commit): one write for all of them, not one each.
func TestLedger_ConcurrentAddsShareOneSpoolWrite(t *testing.T) {
	sp, dir := openSpool(t)
	var writes atomic.Int32
	hold, held := make(chan struct{}), make(chan struct{})
	sp.failWrite = func() error {
		if writes.Add(1) == 1 {
			close(held)
			<-hold
		}
		return nil
	}
	w := &recordingWriter{}
	l := NewLedger(w, Options{Spool: sp, Interval: time.Hour}, ledgerLog)
	first := make(chan error, 1)
	go func() { first <- l.Add(usage.Record{ClientRequestID: "first"}) }()
	<-held // the first Add is writing
	const n = 20
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { errs <- l.Add(usage.Record{ClientRequestID: fmt.Sprint("g", i)}) }()
	}
	waiting := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.group == nil {
			return 0
		}
		return bytes.Count(l.group.buf, []byte("\n"))
	}
	if _, ok := testenv.Poll(5*time.Second, func() bool { return waiting() == n }); !ok {
		t.Fatalf("%d Adds joined the next group, want %d", waiting(), n)
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := writes.Load(); got != 2 {
		t.Fatalf("%d spool writes for %d Adds, want 2 (the first, then one for the other %d)", got, n+1, n)
	}
	if lines := spoolLines(t, dir); len(lines) != n+1 {
		t.Fatalf("%d records in the spool, want %d", len(lines), n+1)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(w.ids()); got != n+1 {
		t.Fatalf("%d records stored, want %d", got, n+1)
	}
}

// Under concurrent load with a working database every record is stored
// once and the spool ends empty.
func TestLedger_JournaledRecordsStoredOnceAndSpoolEmptied(t *testing.T) {
	sp, dir := openSpool(t)
	w := &recordingWriter{}
	l := NewLedger(w, Options{Spool: sp, MaxBatch: 32, Interval: 2 * time.Millisecond}, ledgerLog)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if err := l.Add(usage.Record{ClientRequestID: "same"}); err != nil {
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
	if len(ids) != 4000 {
		t.Fatalf("%d distinct records stored, want 4000 (one per Add, whatever the client id)", len(ids))
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("record %s stored %d times", id, n)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if len(segs) != 0 {
		t.Fatalf("spool segments left: %v", segs)
	}
}

// A spool that cannot be written makes Add say so (the record is still
// stored when the database takes it) and the ledger unhealthy until a
// write works again.
func TestLedger_SpoolWriteFailureIsReportedAndTheRecordStillStored(t *testing.T) {
	sp, _ := openSpool(t)
	var fail atomic.Bool
	fail.Store(true)
	sp.failWrite = func() error {
		if fail.Load() {
			return errors.New("no space left on device")
		}
		return nil
	}
	w := &recordingWriter{}
	l := NewLedger(w, Options{Spool: sp, Interval: time.Hour}, ledgerLog)
	err := l.Add(usage.Record{ID: "a"})
	if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("Add with a failing spool: %v, want ErrNotDurable with the cause", err)
	}
	if herr := l.Healthy(); herr == nil || !strings.Contains(herr.Error(), "spool") {
		t.Fatalf("Healthy with a failing spool: %v", herr)
	}
	fail.Store(false)
	if err := l.Add(usage.Record{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if herr := l.Healthy(); herr != nil {
		t.Fatalf("Healthy after the spool works again: %v", herr)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := w.ids(); ids["a"] != 1 || ids["b"] != 1 {
		t.Fatalf("stored %v, want a and b once", ids)
	}
}

// Records whose spool write failed are not dropped when the database
// refuses them too: they go to a spool segment of their own once the disk
// works, or to the database once it does.
func TestLedger_RecordsNotInTheSpoolAreKeptThroughAnOutage(t *testing.T) {
	sp, _ := openSpool(t)
	var failSpool atomic.Bool
	failSpool.Store(true)
	sp.failWrite = func() error {
		if failSpool.Load() {
			return errors.New("disk full")
		}
		return nil
	}
	w := &flakyWriter{ids: map[string]int{}}
	w.down.Store(true)
	l := NewLedger(w, Options{Spool: sp, Interval: time.Hour, SpoolAfter: 1}, quiet)
	if err := l.Add(usage.Record{ID: "lost-on-disk"}); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("Add: %v, want ErrNotDurable", err)
	}
	l.kick <- struct{}{}
	// The writer cannot store the batch anywhere and keeps it; the disk
	// comes back first (Spool.Append does not use the failing hook).
	failSpool.Store(false)
	testenv.Eventually(t, 5*time.Second, sp.Pending, "the record reached the spool")
	w.down.Store(false)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d, _ := w.count(); d != 1 {
		t.Fatalf("%d records stored, want 1", d)
	}
}

type checkWriter struct {
	recordingWriter
	mu  sync.Mutex
	err error
}

func (c *checkWriter) CheckHealth(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *checkWriter) set(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// The database's own health check reaches Healthy within a check interval,
// in both directions.
func TestLedger_HealthyFollowsTheDatabaseCheck(t *testing.T) {
	w := &checkWriter{}
	l := NewLedger(w, Options{HealthInterval: 10 * time.Millisecond}, ledgerLog)
	defer l.Close(context.Background())
	waitHealth := func(bad bool) error {
		t.Helper()
		var err error
		if _, ok := testenv.Poll(5*time.Second, func() bool { err = l.Healthy(); return (err != nil) == bad }); !ok {
			t.Fatalf("Healthy() = %v after 5s, want bad=%v", err, bad)
		}
		return err
	}
	waitHealth(false)
	w.set(errors.New("connection refused"))
	if err := waitHealth(true); !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Healthy() = %v, want the cause", err)
	}
	w.set(nil)
	waitHealth(false)
}

type countHandler struct {
	mu    sync.Mutex
	lines []string
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.lines = append(h.lines, r.Level.String()+" "+r.Message)
	h.mu.Unlock()
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

// The alarm is loud but rate-limited: one error line when the trouble
// starts, one per AlarmEvery while it lasts, one line when it ends.
func TestHealth_AlarmRepeatsAtMostEveryInterval(t *testing.T) {
	ch := &countHandler{}
	var h health
	h.init(slog.New(ch), 30*time.Second, nil)
	t0 := time.Now()
	h.alarm(t0) // healthy: silent
	h.checked(errors.New("database file deleted"))
	for s := 0; s <= 65; s++ {
		h.alarm(t0.Add(time.Duration(s) * time.Second))
	}
	h.checked(nil)
	h.alarm(t0.Add(66 * time.Second))
	h.alarm(t0.Add(67 * time.Second))
	if len(ch.lines) != 4 || !strings.HasPrefix(ch.lines[0], "ERROR USAGE LEDGER NOT HEALTHY") ||
		!strings.Contains(ch.lines[0], "database file deleted") || !strings.HasPrefix(ch.lines[3], "INFO") {
		t.Fatalf("log lines %q, want 3 errors (0s, 30s, 60s) and one recovery line", ch.lines)
	}
}

// Segments left by an earlier run are written before NewLedger returns,
// skipping a torn last line, and deleted once stored.
func TestLedger_RecordsOfAnEarlierRunAreWrittenAtStart(t *testing.T) {
	dir := t.TempDir()
	sp, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Append([]usage.Record{{ID: "a"}, {ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	// A run killed mid-write: a segment with a torn last line.
	torn := appendRecord(nil, &usage.Record{ID: "c"})
	torn = append(torn, `{"ID":"d","Ti`...)
	if err := os.WriteFile(sp.segPath(sp.newSegment()), torn, 0o600); err != nil {
		t.Fatal(err)
	}
	// A file from the version before the journal, without client ids.
	legacy := `{"ID":"my-trace","Time":"2026-01-02T03:04:05Z","KeyID":"k","Status":200}` + "\n" +
		`{"ID":"req_0a1b2c3d_7","Time":"2026-01-02T03:04:05Z","KeyID":"k","Status":200}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, legacyActive), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	sp.Close() // the run ends

	sp2, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := &recordingWriter{}
	l := NewLedger(w, Options{Spool: sp2, Interval: time.Hour}, ledgerLog)
	ids := w.ids()
	if len(ids) != 5 || ids["a"] != 1 || ids["c"] != 1 || ids["my-trace"] != 1 {
		t.Fatalf("written at start: %v, want a, b, c and the two legacy records once each", ids)
	}
	for _, b := range w.batches {
		for _, r := range b {
			if want := usage.LegacyClientRequestID(r.ID); r.ID[0] != 'a' && r.ID[0] != 'b' && r.ID[0] != 'c' && r.ClientRequestID != want {
				t.Fatalf("legacy record %s: client request id %q, want %q", r.ID, r.ClientRequestID, want)
			}
		}
	}
	if sp2.Pending() {
		t.Fatal("spool still pending after the replay")
	}
	// A torn last line is what a crash leaves: the segment is deleted.
	if bad, _ := filepath.Glob(filepath.Join(dir, "*"+badSuffix)); len(bad) != 0 {
		t.Fatalf("segments kept aside: %v; a torn last line is no reason", bad)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// One process per spool directory: a second one is refused with a message
// that says what to do; after the first closes, the directory is free.
func TestOpenSpool_SecondProcessIsRefused(t *testing.T) {
	sp, dir := openSpool(t)
	if _, err := OpenSpool(dir); !errors.Is(err, ErrSpoolBusy) || !strings.Contains(err.Error(), "spool_dir") {
		t.Fatalf("second open: %v, want ErrSpoolBusy naming spool_dir", err)
	}
	sp.Close()
	sp2, err := OpenSpool(dir)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	sp2.Close()
}

// A complete line that is not a record is not what a crash leaves: its
// segment's records are stored, and the file is kept aside (not replayed)
// with a warning, rather than deleted with the line.
func TestSpool_AnUnreadableLineKeepsItsSegmentAside(t *testing.T) {
	dir := t.TempDir()
	sp, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	seg := appendRecord(nil, &usage.Record{ID: "a"})
	seg = append(seg, "not a record\n"...)
	seg = appendRecord(seg, &usage.Record{ID: "b"})
	if err := os.WriteFile(sp.segPath(sp.newSegment()), seg, 0o600); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	sp2, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	w := &recordingWriter{}
	if n, err := sp2.Drain(context.Background(), w, 10); err != nil || n != 2 {
		t.Fatalf("drained %d, %v; want the 2 records", n, err)
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "*"+badSuffix)); len(bad) != 1 {
		t.Fatalf("segments kept aside: %v; want the one with the unreadable line", bad)
	}
	if sp2.Pending() {
		t.Fatal("the kept-aside segment is still pending replay")
	}
}

package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// flakyWriter stores records by ID (ignoring duplicates, as stores do) and
// fails while down is set.
type flakyWriter struct {
	mu    sync.Mutex
	down  atomic.Bool
	ids   map[string]int
	calls atomic.Int64
}

func (w *flakyWriter) InsertUsage(_ context.Context, recs []usage.Record) error {
	w.calls.Add(1)
	if w.down.Load() {
		return errors.New("database unreachable")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range recs {
		w.ids[r.ID]++
	}
	return nil
}

func (w *flakyWriter) count() (distinct, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.ids {
		total += n
	}
	return len(w.ids), total
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestLedger_OutageSpoolsToDiskAndDrainsEachRecordOnce(t *testing.T) {
	dir := t.TempDir()
	sp, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := &flakyWriter{ids: map[string]int{}}
	w.down.Store(true)
	l := NewLedger(w, Options{Interval: 5 * time.Millisecond, MaxBatch: 25, Spool: sp, SpoolAfter: 2}, quiet)
	for i := 0; i < 500; i++ {
		if err := l.Add(usage.Record{ID: fmt.Sprintf("r%d", i), Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return l.Depth() == 0 && sp.Pending() },
		"records reaching the spool while the database was down")
	if d, _ := w.count(); d != 0 {
		t.Fatalf("%d records written while down", d)
	}
	w.down.Store(false)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	distinct, total := w.count()
	if distinct != 500 {
		t.Fatalf("%d distinct records stored, want 500", distinct)
	}
	// Replays are allowed (the store ignores them by ID) but every record
	// must be there; the spool must be empty.
	if sp.Pending() {
		t.Fatal("spool still holds records after the database returned")
	}
	t.Logf("500 records, %d writes reached the store (duplicates ignored by ID)", total)
}

func TestSpool_LeftoverFileIsDrainedByTheNextStart(t *testing.T) {
	dir := t.TempDir()
	sp, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Append([]usage.Record{{ID: "a"}, {ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	// A torn last line from a crash mid-append is skipped.
	segs, _ := filepath.Glob(filepath.Join(dir, segPrefix+"*"+segSuffix))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want 1", segs)
	}
	f, _ := os.OpenFile(segs[0], os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"ID":"c","Ti`)
	f.Close()
	sp.Close() // the process ends

	w := &flakyWriter{ids: map[string]int{}}
	sp2, err := OpenSpool(dir) // the next process
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	if !sp2.Pending() {
		t.Fatal("leftover spool not seen")
	}
	n, err := sp2.Drain(context.Background(), w, 100)
	if err != nil || n != 2 {
		t.Fatalf("drained %d (%v), want 2", n, err)
	}
	if d, _ := w.count(); d != 2 || sp2.Pending() {
		t.Fatalf("stored %d, pending %v", d, sp2.Pending())
	}
}

func TestSpool_FailedDrainKeepsRecordsForLater(t *testing.T) {
	sp, _ := OpenSpool(t.TempDir())
	_ = sp.Append([]usage.Record{{ID: "a"}})
	w := &flakyWriter{ids: map[string]int{}}
	w.down.Store(true)
	if _, err := sp.Drain(context.Background(), w, 10); err == nil {
		t.Fatal("drain into a down database reported success")
	}
	_ = sp.Append([]usage.Record{{ID: "b"}}) // new records during the outage
	w.down.Store(false)
	for sp.Pending() {
		if _, err := sp.Drain(context.Background(), w, 10); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := w.count(); d != 2 {
		t.Fatalf("stored %d, want 2", d)
	}
}

// A stored segment's file is emptied and renamed to be the next segment,
// not deleted and created again (creating a file costs about a millisecond
// of kernel time on some filesystems, the development VM's ext4 among
// them); it never shows as a segment to replay.
func TestSpool_StoredSegmentFileIsReusedForTheNext(t *testing.T) {
	sp, dir := openSpool(t)
	defer sp.Close()
	first := sp.newSegment()
	if err := sp.write(first, []byte("{\"id\":\"a\"}\n")); err != nil {
		t.Fatal(err)
	}
	sp.seal(first)
	before, err := os.Stat(sp.segPath(first))
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.remove(first); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sp.segPath(first)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stored segment still there: %v", err)
	}
	spare, err := os.Stat(filepath.Join(dir, spareName))
	if err != nil || spare.Size() != 0 {
		t.Fatalf("spare file: %v, size %d", err, spare.Size())
	}
	if segs, _ := sp.segments(); len(segs) != 0 || sp.Pending() {
		t.Fatalf("the spare counts as a segment: %v", segs)
	}
	second := sp.newSegment()
	if err := sp.write(second, []byte("{\"id\":\"b\"}\n")); err != nil {
		t.Fatal(err)
	}
	sp.seal(second)
	after, err := os.Stat(sp.segPath(second))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("the next segment is a new file, not the stored one's")
	}
	if b, _ := os.ReadFile(sp.segPath(second)); string(b) != "{\"id\":\"b\"}\n" {
		t.Fatalf("reused segment holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, spareName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("spare still there after reuse: %v", err)
	}
}

// Flush stores what was queued before it at once (the writer would wait
// an hour here), says so when the database refused it, and gives up when
// its context ends.
func TestLedger_FlushStoresWhatWasQueuedBeforeIt(t *testing.T) {
	sp, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &flakyWriter{ids: map[string]int{}}
	l := NewLedger(w, Options{Interval: time.Hour, Spool: sp, SpoolAfter: 2}, quiet)
	defer l.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatalf("flush of an empty ledger: %v", err)
	}
	for i := 0; i < 3; i++ {
		if err := l.Add(usage.Record{ID: fmt.Sprintf("f%d", i), Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if d, _ := w.count(); d != 3 {
		t.Fatalf("after Flush the database has %d of 3 records", d)
	}

	w.down.Store(true)
	if err := l.Add(usage.Record{ID: "refused", Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); !errors.Is(err, ErrNotStored) {
		t.Fatalf("flush while the database refuses: %v, want ErrNotStored", err)
	}

	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	w2 := &recordingWriter{gate: make(chan struct{})}
	l2 := NewLedger(w2, Options{Interval: time.Hour}, quiet)
	defer func() { close(w2.gate); l2.Close(context.Background()) }()
	if err := l2.Add(usage.Record{ID: "held"}); err != nil {
		t.Fatal(err)
	}
	if err := l2.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush past its deadline while the write hangs: %v", err)
	}
}

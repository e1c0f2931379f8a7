package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/ledger"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// addN adds n records and fails the test if an Add fails.
func addN(t *testing.T, l *ledger.Ledger, n int, tag string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = usage.NewID()
		if err := l.Add(usage.Record{ID: ids[i], ClientRequestID: fmt.Sprint(tag, i), Time: time.Now(), KeyID: "k", Model: "m", Status: 200}); err != nil {
			t.Fatalf("Add %s %d: %v", tag, i, err)
		}
	}
	return ids
}

// checkStored fails unless the database holds exactly the records ids,
// once each, and its rollups count each once.
func checkStored(t *testing.T, st *sqlite.Store, ids []string) {
	t.Helper()
	ctx := context.Background()
	recs, err := st.Recent(ctx, len(ids)+100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range recs {
		got[r.ID]++
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Fatalf("record %s stored %d times, want once (%d records stored, %d expected)", id, got[id], len(recs), len(ids))
		}
	}
	if len(recs) != len(ids) {
		t.Fatalf("%d records stored, want %d", len(recs), len(ids))
	}
	sum, err := st.Summary(ctx, usage.Filter{GroupBy: []string{"key"}})
	if err != nil || len(sum) != 1 || sum[0].Requests != int64(len(ids)) {
		t.Fatalf("rollups = %+v (%v), want %d requests", sum, err, len(ids))
	}
}

func openLedger(t *testing.T, dir string) (*sqlite.Store, *ledger.Ledger) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ledger.OpenSpool(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	// Default health interval (1s): the 5s bound below is the real one.
	return st, ledger.NewLedger(st, ledger.Options{Spool: sp, Interval: 10 * time.Millisecond}, quiet)
}

// The SQLite file deleted under a running ledger: Healthy turns to an
// error naming the cause within 5s, Adds keep succeeding into the spool,
// and when a database is back at the path (a restored backup) the records
// go there, each once.
func TestLedger_DeletedDatabaseIsUnhealthyWithin5sAndLosesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	st, l := openLedger(t, dir)
	defer st.Close()
	before := addN(t, l, 10, "before")
	testenv.Eventually(t, 5*time.Second, func() bool { r, _, _ := st.CountUsage(context.Background()); return r == 10 }, "records stored")
	if err := l.Healthy(); err != nil {
		t.Fatalf("healthy ledger reports %v", err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// No traffic: the periodic check alone must notice.
	took := testenv.Eventually(t, 5*time.Second, func() bool { return l.Healthy() != nil }, "Healthy reports the deleted database")
	if err := l.Healthy(); !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("Healthy() = %v, want the cause", err)
	}
	t.Logf("not healthy %s after the file was deleted: %v", took.Round(time.Millisecond), l.Healthy())
	during := addN(t, l, 100, "during") // every Add succeeds: the records are in the spool

	// A database appears at the path: a backup holding the first records.
	backup := filepath.Join(dir, "backup.db")
	b, err := sqlite.Open(context.Background(), backup)
	if err != nil {
		t.Fatal(err)
	}
	var old []usage.Record
	for _, id := range before {
		old = append(old, usage.Record{ID: id, Time: time.Now(), KeyID: "k", Model: "m", Status: 200})
	}
	if err := b.InsertUsage(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := os.Rename(backup, path); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return l.Healthy() == nil }, "Healthy after the database is back")
	after := addN(t, l, 10, "after")
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkStored(t, st, append(append(before, during...), after...))
}

// Records taken while the database is deleted reach the database the next
// start creates, each once.
func TestLedger_DeletedDatabaseRecordsReachTheNextStart(t *testing.T) {
	dir := t.TempDir()
	st, l := openLedger(t, dir)
	if err := os.Remove(filepath.Join(dir, "ledger.db")); err != nil {
		t.Fatal(err)
	}
	during := addN(t, l, 40, "during")
	testenv.Eventually(t, 5*time.Second, func() bool { return l.Healthy() != nil }, "Healthy reports the deleted database")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil { // the records stay in the spool
		t.Fatal(err)
	}
	st.Close()

	st2, l2 := openLedger(t, dir) // a new, empty database at the path
	defer st2.Close()
	checkStored(t, st2, during) // replayed before NewLedger returned
	if err := l2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "spool", "*.jsonl")); len(left) != 0 {
		t.Fatalf("spool files left: %v", left)
	}
}

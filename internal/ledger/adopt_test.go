package ledger

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// legacySpool leaves records in a spool directory, as a gateway of an
// earlier version killed while its database was away would.
func legacySpool(t *testing.T, dir string, recs ...usage.Record) {
	t.Helper()
	sp, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Append(recs); err != nil {
		t.Fatal(err)
	}
	sp.Close()
}

// The records of the old default spool move into the new one, whose
// ledger writes them, each once; the old directory is gone.
func TestSpool_AdoptMovesAnotherDirectorysRecordsAndTheLedgerWritesThem(t *testing.T) {
	root := t.TempDir()
	old := filepath.Join(root, "llmgate-spool")
	legacySpool(t, old, usage.Record{ID: "r1", KeyID: "key_a"}, usage.Record{ID: "r2", KeyID: "master"})
	legacySpool(t, old, usage.Record{ID: "r3", KeyID: "key_a"})
	sp, err := OpenSpool(filepath.Join(root, "llmgate.db.spool"))
	if err != nil {
		t.Fatal(err)
	}
	var asked map[string]bool
	n, err := sp.Adopt(old, func(ids map[string]bool) bool { asked = ids; return true })
	if err != nil || n != 3 {
		t.Fatalf("adopt: %d records, %v; want 3", n, err)
	}
	if !asked["key_a"] || !asked["master"] || len(asked) != 2 {
		t.Fatalf("asked about keys %v, want key_a and master", asked)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old directory is still there: %v", err)
	}
	w := &recordingWriter{}
	l := NewLedger(w, Options{Spool: sp, Interval: 5 * time.Millisecond}, ledgerLog)
	// Close writes what is left: the wait gives up quietly and the check
	// below says what is missing.
	testenv.Poll(5*time.Second, func() bool { return len(w.ids()) >= 3 })
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := w.ids(); len(ids) != 3 || ids["r1"] != 1 || ids["r2"] != 1 || ids["r3"] != 1 {
		t.Fatalf("written: %v, want r1, r2, r3 once each", ids)
	}
}

// Records the caller's database does not own, and a directory another
// process holds, stay where they are.
func TestSpool_AdoptLeavesAnotherDatabasesRecordsAndABusyDirectory(t *testing.T) {
	root := t.TempDir()
	old := filepath.Join(root, "llmgate-spool")
	legacySpool(t, old, usage.Record{ID: "r1", KeyID: "key_other"})
	sp, err := OpenSpool(filepath.Join(root, "a.db.spool"))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if n, err := sp.Adopt(old, func(map[string]bool) bool { return false }); !errors.Is(err, ErrForeignSpool) || n != 0 {
		t.Fatalf("foreign records: %d, %v; want ErrForeignSpool", n, err)
	}
	held, err := OpenSpool(old) // a running gateway of an earlier version
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Adopt(old, func(map[string]bool) bool { return true }); !errors.Is(err, ErrSpoolBusy) {
		t.Fatalf("held directory: %v, want ErrSpoolBusy", err)
	}
	held.Close()
	if segs, _ := (&Spool{dir: old}).segments(); len(segs) != 1 {
		t.Fatalf("%d segments left in the old directory, want its 1", len(segs))
	}
	if n, err := sp.Adopt(filepath.Join(root, "none"), nil); n != 0 || err != nil {
		t.Fatalf("a directory that does not exist: %d, %v", n, err)
	}
}

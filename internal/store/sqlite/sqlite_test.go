package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"llmgate/internal/usage"
)

// oldLedger makes a database as the version before client request ids
// left it: every migration before 0005, and rows keyed by request id.
func oldLedger(t *testing.T, path string, ids []string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(migrations, "migrations/*.sql")
	sort.Strings(names)
	for _, name := range names {
		if name >= "migrations/0005" {
			break
		}
		body, _ := migrations.ReadFile(name)
		if _, err := db.ExecContext(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, 0)`, name); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		if _, err := db.ExecContext(ctx, `INSERT INTO usage(id, ts, key_id, model, status) VALUES (?, ?, 'k', 'm', 200)`,
			id, time.Now().Add(time.Duration(i)*time.Millisecond).UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
}

// Rows written before the migration keep their id; their client request
// id is that id where a client made it, and empty where the gateway did.
func TestMigration_OldRowsKeepTheirIDAndGetTheClientOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	want := map[string]string{
		"req_0a1b2c3d_1":       "", // made up by the old gateway
		"req_0a1b2c3d_zz9":     "",
		"my-trace-42":          "my-trace-42", // the client's
		"req_0A1B2C3D_1":       "req_0A1B2C3D_1",
		"req_0a1b2c3d_":        "req_0a1b2c3d_",
		"req_0a1b2c3d_1-retry": "req_0a1b2c3d_1-retry",
		"req_xyz":              "req_xyz",
	}
	var ids []string
	for id := range want {
		ids = append(ids, id)
	}
	oldLedger(t, path, ids)
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.Recent(context.Background(), 100)
	if err != nil || len(recs) != len(want) {
		t.Fatalf("recent = %d records (%v), want %d", len(recs), err, len(want))
	}
	for _, r := range recs {
		if w, ok := want[r.ID]; !ok || r.ClientRequestID != w {
			t.Errorf("record %q: client request id %q, want %q", r.ID, r.ClientRequestID, w)
		}
		if got := usage.LegacyClientRequestID(r.ID); got != want[r.ID] {
			t.Errorf("LegacyClientRequestID(%q) = %q, the migration says %q", r.ID, got, want[r.ID])
		}
	}
	if got, err := s.ByClientRequestID(context.Background(), "my-trace-42", 10); err != nil || len(got) != 1 {
		t.Fatalf("lookup by client id = %v (%v)", got, err)
	}
}

func insertOne(s *Store) (usage.Record, error) {
	r := usage.Record{ID: usage.NewID(), Time: time.Now(), KeyID: "k", Model: "m", Status: 200}
	return r, s.InsertUsage(context.Background(), []usage.Record{r})
}

// A database file deleted under a running store is noticed: writes fail
// (nothing goes into the unreachable file), the health check names the
// cause, and once a database file is back at the path the store uses it.
func TestStore_DeletedFileFailsWritesUntilANewDatabaseAppears(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "llmgate.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := insertOne(s); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil { // the -wal and -shm files stay, as after "rm llmgate.db"
		t.Fatal(err)
	}
	if _, err := insertOne(s); !errors.Is(err, ErrFileGone) {
		t.Fatalf("insert into a deleted database: err = %v, want ErrFileGone", err)
	}
	if err := s.CheckHealth(ctx); !errors.Is(err, ErrFileGone) {
		t.Fatalf("health of a deleted database: %v, want ErrFileGone", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the store re-created the deleted file (%v): a new empty database must be the operator's choice", err)
	}

	// Another database is moved into place (a restored backup).
	other := filepath.Join(dir, "restored.db")
	o, err := Open(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := insertOne(o)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckHealth(ctx); err != nil {
		t.Fatalf("health with a database back at the path: %v", err)
	}
	r, err := insertOne(s)
	if err != nil {
		t.Fatalf("insert after the database returned: %v", err)
	}
	recs, err := s.Recent(ctx, 10)
	if err != nil || len(recs) != 2 || recs[0].ID != r.ID || recs[1].ID != kept.ID {
		t.Fatalf("records in the restored database = %+v (%v), want the restored one and the new one", recs, err)
	}
}

// A file replaced by another (rename over it) counts as gone too.
func TestStore_ReplacedFileIsNoticedBeforeTheNextWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "llmgate.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.WriteFile(filepath.Join(dir, "x"), bytes.Repeat([]byte("not a database\n"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "x"), path); err != nil {
		t.Fatal(err)
	}
	if _, err := insertOne(s); !errors.Is(err, ErrFileGone) {
		t.Fatalf("insert after the file was replaced: %v, want ErrFileGone", err)
	}
	err = s.CheckHealth(context.Background())
	if err == nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("a file that is not a database was accepted in place of the ledger (%d bytes: %.40q)", len(b), b)
	}

}

// A database deleted while in use leaves its -wal file behind; a new
// database at the path must not get the old pages from it (SQLite discards
// a WAL next to an empty file; this guards that the store relies on it).
func TestOpen_NewFileIgnoresTheWALOfADeletedDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmgate.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := insertOne(s); err != nil {
		t.Fatal(err)
	}
	wal, err := os.ReadFile(path + "-wal")
	if err != nil || len(wal) == 0 {
		t.Fatalf("no WAL to leave behind (%v)", err)
	}
	s.Close()
	// What a crash after "rm llmgate.db" leaves: the old WAL, no database.
	if err := os.WriteFile(path+"-wal", wal, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	s2, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open a new database next to an old WAL: %v", err)
	}
	defer s2.Close()
	if recs, err := s2.Recent(context.Background(), 10); err != nil || len(recs) != 0 {
		t.Fatalf("new database holds %d records (%v), want none from the deleted one", len(recs), err)
	}
}

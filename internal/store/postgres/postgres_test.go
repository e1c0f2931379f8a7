package postgres

import (
	"context"
	"database/sql"
	"io/fs"
	"sort"
	"strings"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

// Rows written before the migration keep their id; their client request
// id is that id where a client made it, and empty where the gateway did.
func TestMigration_OldRowsKeepTheirIDAndGetTheClientOne(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(migrations, "migrations/*.sql")
	sort.Strings(names)
	for _, name := range names {
		if name >= "migrations/0004" {
			break
		}
		body, _ := migrations.ReadFile(name)
		if _, err := db.ExecContext(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations VALUES ($1, 0)`, name); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"req_0a1b2c3d_1": "", "req_0a1b2c3d_zz9": "", "my-trace-42": "my-trace-42",
		"req_0A1B2C3D_1": "req_0A1B2C3D_1", "req_0a1b2c3d_": "req_0a1b2c3d_", "req_0a1b2c3d_1-retry": "req_0a1b2c3d_1-retry"}
	i := 0
	for id := range want {
		i++
		if _, err := db.ExecContext(ctx, `INSERT INTO usage(id, ts, key_id, model, status) VALUES ($1, $2, 'k', 'm', 200)`,
			id, time.Now().Add(time.Duration(i)*time.Millisecond).UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.Recent(ctx, 100)
	if err != nil || len(recs) != len(want) {
		t.Fatalf("recent = %d records (%v), want %d", len(recs), err, len(want))
	}
	for _, r := range recs {
		if w, ok := want[r.ID]; !ok || r.ClientRequestID != w {
			t.Errorf("record %q: client request id %q, want %q", r.ID, r.ClientRequestID, w)
		}
	}
}

// A server that does not answer is named in the error without the
// password of its URL, whichever form the password takes.
func TestOpen_UnreachableServerErrorHidesThePassword(t *testing.T) {
	for _, url := range []string{
		"postgres://llm:s3cret@127.0.0.1:1/x?connect_timeout=1",
		"postgres://llm@127.0.0.1:1/x?password=s3cret&connect_timeout=1",
	} {
		_, err := Open(context.Background(), url)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("Open(%s): err = %v, want it to name the URL with the password hidden", url, err)
		}
	}
}

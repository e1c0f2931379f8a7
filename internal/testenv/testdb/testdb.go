// Package testdb gives tests SQLite databases that are already migrated:
// one database is migrated per test process and each test gets a copy of
// its file, which opens in a few milliseconds where migrating a new file
// takes a hundred or more under the race detector.
package testdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"llmgate/internal/store/sqlite"
)

// migrated is the file of a freshly migrated database, read once.
var migrated struct {
	once sync.Once
	file []byte
	err  error
}

// SQLite writes a migrated, empty llmgate database to dir/name (dir is
// created if needed) and returns its path: the same database a gateway
// would create there on its first start, before it wrote anything.
func SQLite(t testing.TB, dir, name string) string {
	t.Helper()
	migrated.once.Do(func() { migrated.file, migrated.err = migrate() })
	if migrated.err != nil {
		t.Fatal(migrated.err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, migrated.file, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// migrate creates and migrates a database in a directory of its own and
// returns its file; closing the store checkpoints the WAL into it.
func migrate() ([]byte, error) {
	dir, err := os.MkdirTemp("", "llmgate-testdb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "llmgate.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("testdb: %s-wal holds %d bytes after close: the copy would lack them", path, fi.Size())
	}
	return os.ReadFile(path)
}

package storetest_test

import (
	"context"
	"path/filepath"
	"testing"

	"llmgate/internal/store/postgres"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/store/storetest"
	"llmgate/internal/testenv"
)

func TestStore_SQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "test.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestStore_Postgres(t *testing.T) {
	testenv.Postgres(t) // skip or fail early, before subtests
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, err := postgres.Open(context.Background(), testenv.Postgres(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

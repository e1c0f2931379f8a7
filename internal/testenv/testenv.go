// Package testenv gives tests the shared PostgreSQL and Redis servers named
// by LLMGATE_TEST_PG and LLMGATE_TEST_REDIS, isolated per test: a fresh
// PostgreSQL schema (selected through search_path) and a unique Redis key
// prefix. Without the variables tests skip loudly; in CI (CI=true) they fail,
// so a broken service setup can never pass silently.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

func need(t testing.TB, env, what string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	msg := "!!! " + env + " is not set: the " + what + " tests did NOT run. Set it (for example " +
		map[string]string{"LLMGATE_TEST_PG": "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
			"LLMGATE_TEST_REDIS": "redis://127.0.0.1:6379/0"}[env] + ") or run .ci/run"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Unique returns a short random identifier for names and prefixes.
func Unique() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Postgres returns a database URL whose connections use a fresh schema,
// dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	base := need(t, "LLMGATE_TEST_PG", "PostgreSQL")
	schema := "llmgate_t_" + Unique()
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		db.Close()
		t.Fatalf("create test schema on %s: %v", base, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		db.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Redis returns the Redis URL and a key prefix unique to this test.
func Redis(t testing.TB) (string, string) {
	t.Helper()
	return need(t, "LLMGATE_TEST_REDIS", "Redis"), "llmgate-test:" + Unique() + ":"
}

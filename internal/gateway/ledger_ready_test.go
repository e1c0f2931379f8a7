package gateway

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The SQLite file deleted under a serving gateway: /readyz turns not ready
// with the reason within 5s, requests are still answered, and their
// records wait in the spool.
func TestGateway_DeletedDatabaseMakesReadyzNotReadyWithin5s(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	if r := e.do("GET", "/readyz", "", ""); r.status != 200 {
		t.Fatalf("readyz before: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", false, "")); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	e.records(1)
	if err := os.Remove(e.db); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		r := e.do("GET", "/readyz", "", "")
		if r.status == 503 {
			if strings.Contains(r.body, e.db) || !strings.Contains(r.body, "usage ledger") {
				t.Fatalf("readyz without a key says %s: want a reason that names no file", r.body)
			}
			r = e.do("GET", "/readyz", testMaster, "")
			if r.status != 503 || !strings.Contains(r.body, "deleted") {
				t.Fatalf("readyz to the master key says %s, want the reason", r.body)
			}
			t.Logf("not ready %s after the delete: %s", time.Since(start).Round(time.Millisecond), r.body)
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("readyz still %d %s 5s after the database file was deleted", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", false, "")); r.status != 200 {
		t.Fatalf("chat while the database is gone: %d %s", r.status, r.body)
	}
}

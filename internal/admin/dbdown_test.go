package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/keys"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// errDown is what pgx says when PostgreSQL is down.
var errDown = errors.New("failed to connect to `user=llmgate database=llmgate_prod`: 10.0.0.5:5432 (db.internal): dial error: dial tcp 10.0.0.5:5432: connect: connection refused")

// downStore is an admin store whose database is unreachable.
type downStore struct{}

func (downStore) CreateKey(context.Context, *keys.Key) error              { return errDown }
func (downStore) ListKeys(context.Context) ([]*keys.Key, error)           { return nil, errDown }
func (downStore) GetKey(context.Context, string) (*keys.Key, error)       { return nil, errDown }
func (downStore) RevokeKey(context.Context, string, time.Time) error      { return errDown }
func (downStore) KeysVersion(context.Context) (int64, error)              { return 0, errDown }
func (downStore) GetSetting(context.Context, string) (string, error)      { return "", errDown }
func (downStore) SetSetting(context.Context, string, string) error        { return errDown }
func (downStore) UpdateKey(context.Context, *keys.Key) error              { return errDown }
func (downStore) RotateKey(context.Context, string, string, string) error { return errDown }
func (downStore) Recent(context.Context, int) ([]usage.Record, error)     { return nil, errDown }
func (downStore) Summary(context.Context, usage.Filter) ([]usage.SummaryRow, error) {
	return nil, errDown
}

// With the database down, every admin call answers a 503 in the OpenAI
// envelope that says to retry and names the request id (never a 500, never
// the database's words), and the log has the cause under that id.
func TestAdmin_DatabaseDownIsA503WithoutTheDatabasesWords(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	h := admin.New(admin.Options{Store: downStore{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Auth: func(*http.Request) (keys.Principal, error) { return keys.Principal{Master: true}, nil }})
	for i, c := range []struct{ method, path, body string }{
		{"GET", "/admin/keys", ""},
		{"POST", "/admin/keys", `{"name":"k"}`},
		{"GET", "/admin/keys/key_x", ""},
		{"PATCH", "/admin/keys/key_x", `{"rpm":5}`},
		{"DELETE", "/admin/keys/key_x", ""},
		{"POST", "/admin/keys/key_x/rotate", ""},
		{"GET", "/admin/usage", ""},
	} {
		id := "req-admin-" + string(rune('a'+i))
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		w := httptest.NewRecorder()
		w.Header().Set("X-Request-Id", id) // as the gateway's edge does
		h.ServeHTTP(w, r)
		b := w.Body.String()
		if w.Code != http.StatusServiceUnavailable || !strings.HasPrefix(b, `{"error":{`) || !strings.Contains(b, `"code":"database_unavailable"`) ||
			!strings.Contains(b, "retry") || !strings.Contains(b, "request "+id) {
			t.Fatalf("%s %s with the database down: %d %s, want a 503 database_unavailable naming request %s", c.method, c.path, w.Code, b, id)
		}
		for _, word := range []string{"llmgate_prod", "user=", "10.0.0.5", "db.internal", "connection refused"} {
			if strings.Contains(b, word) {
				t.Fatalf("%s %s: the client reads the database's %q: %s", c.method, c.path, word, b)
			}
		}
		if !strings.Contains(logs.String(), "request_id="+id) || !strings.Contains(logs.String(), "llmgate_prod") {
			t.Fatalf("%s %s: the log lacks the cause under %s:\n%s", c.method, c.path, id, logs)
		}
	}
}

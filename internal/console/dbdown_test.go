package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/store"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// errDown is what pgx says when PostgreSQL is down: the user, the
// database and the address, none of which a browser may read.
var errDown = errors.New("failed to connect to `user=llmgate database=llmgate_prod`: 10.0.0.5:5432 (db.internal): dial error: dial tcp 10.0.0.5:5432: connect: connection refused")

// downStore is the console's store with a database that can go away,
// at once or right after the next session is read (to reach the
// handlers' own queries).
type downStore struct {
	Store
	down         atomic.Bool
	afterSession atomic.Bool
}

func (d *downStore) fail() error {
	if d.down.Load() {
		return errDown
	}
	return nil
}

func (d *downStore) Summary(ctx context.Context, f usage.Filter) ([]usage.SummaryRow, error) {
	if err := d.fail(); err != nil {
		return nil, err
	}
	return d.Store.Summary(ctx, f)
}
func (d *downStore) Recent(ctx context.Context, n int) ([]usage.Record, error) {
	if err := d.fail(); err != nil {
		return nil, err
	}
	return d.Store.Recent(ctx, n)
}
func (d *downStore) ListKeys(ctx context.Context) ([]*keys.Key, error) {
	if err := d.fail(); err != nil {
		return nil, err
	}
	return d.Store.ListKeys(ctx)
}
func (d *downStore) CreateKey(ctx context.Context, k *keys.Key) error {
	if err := d.fail(); err != nil {
		return err
	}
	return d.Store.CreateKey(ctx, k)
}
func (d *downStore) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if err := d.fail(); err != nil {
		return err
	}
	return d.Store.RevokeKey(ctx, id, at)
}
func (d *downStore) GetSession(ctx context.Context, idHash string, now time.Time) (*store.Session, error) {
	if err := d.fail(); err != nil {
		return nil, err
	}
	defer func() {
		if d.afterSession.Swap(false) {
			d.down.Store(true)
		}
	}()
	return d.Store.GetSession(ctx, idHash, now)
}
func (d *downStore) CreateSession(ctx context.Context, s store.Session) error {
	if err := d.fail(); err != nil {
		return err
	}
	return d.Store.CreateSession(ctx, s)
}

// With the database down, every console call that needs it answers a 503
// that says to retry and names the request id; the database's words (user,
// database name, address) are in the log under that id, never on the page.
func TestConsole_DatabaseDownIsA503WithoutTheDatabasesWords(t *testing.T) {
	f := newFixture(t)
	logs := &testenv.SyncBuffer{}
	st := &downStore{Store: f.st}
	var n atomic.Int64
	c := New(Options{Store: st, Verify: f.ver.Verify, MasterHash: f.ver.MasterHash, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	// The gateway's edge gives every answer its request id first.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-console-"+strconv.FormatInt(n.Add(1), 10))
		c.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	admin, r := f.signIn(master)
	if r.status != http.StatusOK {
		t.Fatalf("sign-in: %d %s", r.status, r.body)
	}
	st.down.Store(true)
	check := func(what string, r resp) {
		t.Helper()
		id := r.header.Get("X-Request-Id")
		if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"code":"database_unavailable"`) ||
			!strings.Contains(r.body, "retry") || !strings.Contains(r.body, "request "+id) {
			t.Fatalf("%s with the database down: %d %s, want a 503 that says to retry and names request %s", what, r.status, r.body, id)
		}
		for _, w := range []string{"llmgate_prod", "user=", "10.0.0.5", "db.internal", "connection refused"} {
			if strings.Contains(r.body, w) {
				t.Fatalf("%s: the page reads the database's %q: %s", what, w, r.body)
			}
		}
		if !strings.Contains(logs.String(), "request_id="+id) {
			t.Fatalf("%s: no log line for request %s:\n%s", what, id, logs)
		}
	}
	for _, p := range []string{"/ui/api/me", "/ui/api/overview", "/ui/api/keys", "/ui/api/usage", "/ui/api/recent"} {
		check("GET "+p, admin.do(http.MethodGet, p, ""))
	}
	// Past the session check, each handler's own queries.
	for _, c := range []struct {
		method, path, body string
	}{
		{"GET", "/ui/api/overview", ""}, {"GET", "/ui/api/keys", ""}, {"GET", "/ui/api/usage", ""}, {"GET", "/ui/api/recent", ""},
		{"POST", "/ui/api/keys", `{"name":"k","budget_period":""}`}, {"POST", "/ui/api/keys/key_x/revoke", ""},
	} {
		st.down.Store(false)
		st.afterSession.Store(true)
		var r resp
		if c.method == "GET" {
			r = admin.do(c.method, c.path, c.body)
		} else {
			r = admin.post(c.path, c.body)
		}
		check(c.method+" "+c.path, r)
	}
	st.down.Store(true)
	_, r = f.signIn(master)
	check("sign-in", r)
	if !strings.Contains(logs.String(), "llmgate_prod") {
		t.Fatalf("the log lacks the database's error:\n%s", logs)
	}
}

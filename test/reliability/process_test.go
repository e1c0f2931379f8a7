package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/store/postgres"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+master) // /readyz gives its reason to the master key
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The database directory removed under a serving gateway: /readyz turns
// not ready, with the reason, within 5 s; requests are still answered and
// their records wait in the spool, which the next start (on a database
// made anew at the same path) writes out, each once.
func TestDeletedDatabase_NotReadyWithin5sAndItsRecordsWaitInTheSpool(t *testing.T) {
	gate(t)
	up := newUpstream(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(data, "llmgate.db")
	cfg := writeConfig(t, dir, db, filepath.Join(dir, "spool"), up, "")
	g := testenv.StartGateway(t, bin, "gw", cfg, master)
	c := newClient()
	if code, body := get(t, g.Base+"/readyz"); code != 200 {
		t.Fatalf("readyz before: %d %s", code, body)
	}
	if o := send(c, g.Base, master, "before-delete", false); !o.ok() {
		t.Fatalf("request before the delete: %d %v %s", o.status, o.err, o.wrong)
	}

	if err := os.RemoveAll(data); err != nil { // rm -rf of the database's directory
		t.Fatal(err)
	}
	deleted := time.Now()
	var code int
	var reason string
	if _, ok := testenv.Poll(5*time.Second, func() bool {
		code, reason = get(t, g.Base+"/readyz")
		return code == http.StatusServiceUnavailable
	}); !ok {
		t.Fatalf("/readyz still %d %s 5s after the database directory was deleted", code, reason)
	}
	notReady := time.Since(deleted)
	t.Logf("database directory deleted: /readyz 503 after %v: %s", notReady.Round(time.Millisecond), strings.TrimSpace(reason))
	if !strings.Contains(reason, "deleted") && !strings.Contains(reason, "gone") {
		t.Errorf("/readyz does not say the database is gone: %s", reason)
	}

	const whileGone = 5
	for i := 0; i < whileGone; i++ {
		if o := send(c, g.Base, master, fmt.Sprintf("while-gone-%d", i), i%2 == 0); !o.ok() {
			t.Fatalf("request %d while the database is gone: %d %v %s", i, o.status, o.err, o.wrong)
		}
	}
	g.Stop(t)
	if _, err := os.Stat(db); err == nil {
		t.Errorf("the stopping gateway made a database file at %s", db)
	}

	// The operator restores the directory; the next start makes a new
	// database there and writes what the spool kept.
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	g2 := testenv.StartGateway(t, bin, "gw-restarted", cfg, master)
	if code, body := get(t, g2.Base+"/readyz"); code != 200 {
		t.Fatalf("readyz after the restart: %d %s", code, body)
	}
	g2.Stop(t)
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs := recordsByClientID(t, st)
	found := 0
	for i := 0; i < whileGone; i++ {
		switch n := len(recs[fmt.Sprintf("while-gone-%d", i)]); n {
		case 1:
			found++
		default:
			t.Errorf("request while-gone-%d has %d records in the new database, want 1", i, n)
		}
	}
	t.Logf("%d requests answered while the database was gone; after a restart on a new database %d of them have their one record", whileGone, found)
}

// runCLI runs the llmgate binary with args, in an environment without the
// test's LLMGATE_ settings, and returns its stdout.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LLMGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("llmgate %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// A key created by `llmgate keys create`, a separate process, while the
// gateway runs: through the gateway's admin API, and straight into its
// database file (which the gateway learns of only from the store), the
// key's first request is answered 200, with no wait and no retry.
func TestNewKey_CreatedByAnotherProcessWorksOnItsFirstRequest(t *testing.T) {
	gate(t)
	up := newUpstream(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "llmgate.db")
	cfg := writeConfig(t, dir, db, filepath.Join(dir, "spool"), up, "")
	g := testenv.StartGateway(t, bin, "gw", cfg, master)
	c := newClient()
	// Warm the gateway's key cache with an unknown key, as a client
	// trying a mistyped key would, so the new key is not the first
	// lookup it makes.
	if o := send(c, g.Base, "sk-lg-not-a-key", "", false); o.status != http.StatusUnauthorized {
		t.Fatalf("unknown key: %d %v", o.status, o.err)
	}
	for _, via := range []struct {
		name string
		args []string
	}{
		{"the admin API (--url)", []string{"--url", g.Base, "--master-key", master}},
		{"the database file (--database)", []string{"--database", db}},
	} {
		out := runCLI(t, append([]string{"keys", "create", "--name", "first-request", "--format", "json"}, via.args...)...)
		created := time.Now()
		var is struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal([]byte(out), &is); err != nil || !strings.HasPrefix(is.Key, "sk-lg-") {
			t.Fatalf("keys create --format json printed %q (%v)", out, err)
		}
		o := send(c, g.Base, is.Key, "", false)
		t.Logf("key created through %s: first request %d after %v", via.name, o.status, time.Since(created).Round(time.Microsecond))
		if !o.ok() {
			t.Errorf("first request of a key created through %s: %d %v %s", via.name, o.status, o.err, o.wrong)
		}
	}
}

// Five requests sent at once with the same X-Request-Id are five requests:
// five answers echoing the id and five ledger records, each under its own
// record id.
func TestDuplicateRequestID_OneRecordPerRequest(t *testing.T) {
	gate(t)
	for _, db := range []string{"SQLite", "PostgreSQL"} {
		t.Run(db, func(t *testing.T) {
			up := newUpstream(t)
			dir := t.TempDir()
			database := filepath.Join(dir, "llmgate.db")
			if db == "PostgreSQL" {
				database = testenv.Postgres(t)
			}
			cfg := writeConfig(t, dir, database, filepath.Join(dir, "spool"), up, "")
			g := testenv.StartGateway(t, bin, "gw", cfg, master)
			const n = 5
			id := "dup-" + testenv.Unique()
			var wg sync.WaitGroup
			outcomes := make([]outcome, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outcomes[i] = send(newClient(), g.Base, master, id, i%2 == 1)
				}()
			}
			wg.Wait()
			for i, o := range outcomes {
				if !o.ok() {
					t.Fatalf("request %d: %d %v %s", i, o.status, o.err, o.wrong)
				}
			}
			g.Stop(t)
			var st interface {
				ByClientRequestID(ctx context.Context, id string, limit int) ([]usage.Record, error)
				Close() error
			}
			var err error
			if db == "PostgreSQL" {
				st, err = postgres.Open(context.Background(), database)
			} else {
				st, err = sqlite.Open(context.Background(), database)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			recs, err := st.ByClientRequestID(context.Background(), id, 100)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			for _, r := range recs {
				ids[r.ID] = true
			}
			t.Logf("%s: %d requests at once with X-Request-Id %s: %d answers echoing it, %d records, %d distinct record ids",
				db, n, id, n, len(recs), len(ids))
			if len(recs) != n || len(ids) != n {
				t.Fatalf("%d records (%d distinct ids) for %d requests, want one each", len(recs), len(ids), n)
			}
		})
	}
}

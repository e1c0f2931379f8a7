package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// heldEngine stands in for the engine manager as the tables' Leaser of
// backend "eng": each lease is announced on leased and returns once
// proceed is closed; each release's outcome goes to released.
type heldEngine struct {
	leased   chan string
	proceed  chan struct{}
	released chan error
}

func (h *heldEngine) Manages(backend string) bool { return backend == "eng" }

func (h *heldEngine) Lease(ctx context.Context, _, model string) (func(error) error, error) {
	h.leased <- model
	select {
	case <-h.proceed:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return func(err error) error {
		h.released <- err
		return err
	}, nil
}

// A reload while a request holds an engine lease builds a new table with
// new backends of its own, leasing from the same Leaser: the request in
// flight finishes on the old table's backend, which nothing changed, and
// gives its lease back; the next request leases through the new table.
// (Run with -race: a write to a backend a request reads is a data race.)
func TestReload_ARequestHoldingAnEngineLeaseKeepsItsUntouchedBackend(t *testing.T) {
	eng := newUpstream(t, "eng", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	write := func(src string) {
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("backends:\n  eng: {url: %s}\nmodels:\n  m: {backend: eng}\n", eng.URL))
	h := &heldEngine{leased: make(chan string, 4), proceed: make(chan struct{}), released: make(chan error, 4)}
	gw, r := startFileGWWith(t, path, io.Discard, h)
	old := gw.g.Tables.Load()
	oldBackend := old.Backend("eng")
	oldURL := oldBackend.BaseURL
	if old.Leaser("eng") != h {
		t.Fatal("the first table does not lease eng from the gateway's Leaser")
	}

	type result struct {
		code int
		body string
		err  error
	}
	held := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+gw.g.Addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+testMaster)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			held <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		held <- result{resp.StatusCode, string(b), err}
	}()
	if model := <-h.leased; model != "m" {
		t.Fatalf("lease for model %q, want m", model)
	}

	// New settings for eng: the new table makes a backend of its own.
	write(fmt.Sprintf("backends:\n  eng: {url: %s, timeout: 30s}\nmodels:\n  m: {backend: eng}\n  m2: {backend: eng}\n", eng.URL))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	cur := gw.g.Tables.Load()
	if cur == old || cur.Backend("eng") == oldBackend || cur.Leaser("eng") != h {
		t.Fatalf("reloaded table: new %v, new backend %v, leases eng from the Leaser %v", cur != old, cur.Backend("eng") != oldBackend, cur.Leaser("eng") == h)
	}
	if old.Backend("eng") != oldBackend || oldBackend.BaseURL != oldURL || old.Leaser("eng") != h {
		t.Fatalf("the old table changed: backend at %s (was %s), leaser %v", oldBackend.BaseURL, oldURL, old.Leaser("eng"))
	}

	close(h.proceed)
	if res := <-held; res.err != nil || res.code != http.StatusOK || !strings.Contains(res.body, "from eng") {
		t.Fatalf("the request held across the reload: %d %q %v", res.code, res.body, res.err)
	}
	if err := <-h.released; err != nil {
		t.Fatalf("the held request's lease was given back with %v", err)
	}
	if code, _, body := gw.chat("m2", false); code != http.StatusOK {
		t.Fatalf("m2 on the reloaded table: %d %s", code, body)
	}
	if model, err := <-h.leased, <-h.released; model != "m2" || err != nil {
		t.Fatalf("the reloaded table's lease: model %q released with %v; want m2 and no error", model, err)
	}
}

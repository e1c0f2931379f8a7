package relay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/relay"
	"llmgate/internal/router"
)

// The engine lease is the table's seam: a table built with a Leaser sends
// each request to a backend the Leaser manages through a lease, given back
// once with the answer's outcome; a request to another backend takes none;
// a lease that fails is the answer, and the backend is never called.
func TestRelay_ARequestToAnEngineBackendTakesItsLeaseFromTheTable(t *testing.T) {
	up := newFakeBackend(t, false)
	src := fmt.Sprintf(`routing: {retry_backoff: 1ms}
backends:
  eng: {url: %[1]s/v1}
  api: {url: %[1]s/v1}
models:
  on-eng: {backend: eng, upstream_model: ok-a}
  bad-eng: {backend: eng, upstream_model: err500-a}
  on-api: {backend: api, upstream_model: ok-a}
`, up.URL)
	cfg, err := config.Load(strings.NewReader(src), "lease.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var failStart atomic.Pointer[apierror.Error] // the engine's start fails with it
	engines := &fakeLeaser{backends: []string{"eng"}, onLease: func(context.Context, string, string) error {
		if e := failStart.Load(); e != nil {
			return e
		}
		return nil
	}}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leaser: engines})
	t.Cleanup(table.Close)
	if table.Leaser("eng") != engines || table.Leaser("api") != nil {
		t.Fatalf("the table's leasers: eng %v, api %v; want the fake for eng only", table.Leaser("eng"), table.Leaser("api"))
	}
	rl := relay.New(relay.Options{Ledger: &recLedger{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	served := make(chan struct{}, 1) // the relay returned: the lease is given back
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served <- struct{}{} }()
		serveRelay(rl, table, "lease")(w, r)
	}))
	t.Cleanup(srv.Close)
	chat := func(model string) (int, string) {
		code, _, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
		<-served
		return code, body
	}

	if code, body := chat("on-eng"); code != http.StatusOK {
		t.Fatalf("on-eng: %d %s", code, body)
	}
	leases, released := engines.taken()
	if strings.Join(leases, ",") != "eng on-eng" || len(released) != 1 || released[0] != nil {
		t.Fatalf("after a served request: leases %q released %v; want one lease of eng for on-eng, given back once with no error", leases, released)
	}
	if code, body := chat("on-api"); code != http.StatusOK {
		t.Fatalf("on-api: %d %s", code, body)
	}
	if leases, _ := engines.taken(); len(leases) != 1 {
		t.Fatalf("a request to a backend with no engine took a lease: %q", leases)
	}
	if code, _ := chat("bad-eng"); code != http.StatusBadGateway {
		t.Fatalf("bad-eng: %d, want the backend's failure as a 502", code)
	}
	if leases, released := engines.taken(); len(leases) != 2 || len(released) < 2 || released[len(released)-1] == nil {
		t.Fatalf("a failed answer: leases %q released %v; want its lease given back with the failure", leases, released)
	}

	calls := len(up.Calls())
	failStart.Store(apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_startup_timeout", "engine eng did not start"))
	if code, body := chat("on-eng"); code != http.StatusServiceUnavailable || !strings.Contains(body, "engine_startup_timeout") {
		t.Fatalf("a failed lease: %d %s; want its 503", code, body)
	}
	if got := len(up.Calls()); got != calls {
		t.Fatalf("the backend was called %d times after a failed lease", got-calls)
	}
}

package router

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/apierror"
)

// refusedErr is what an attempt at an engine that is not running fails
// with: the dial's ECONNREFUSED, wrapped as provider.Classify wraps it.
var refusedErr = apierror.New(http.StatusBadGateway, apierror.KindUpstream, "backend_unavailable", "refused").
	Wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})

// engine is a backend whose health URL (GET /v1/models) answers 200 while
// serving is set and 503 otherwise (an engine loading its model), and
// counts the checks it got.
func engine(t *testing.T) (url string, serving *atomic.Bool, checks *atomic.Int64) {
	serving, checks = &atomic.Bool{}, &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks.Add(1)
		if r.URL.Path != "/v1/models" || !serving.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"data":[]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, serving, checks
}

// An engine that was down (connections refused) and is started again is
// taken back at the first request after it serves, not after the open
// period, which grows with every failed probe while it is down.
func TestBreaker_RefusedConnectionsEndTheOpenPeriodOnceTheBackendServesAgain(t *testing.T) {
	url, serving, checks := engine(t)
	tb, clk := table(t, "backends:\n  a: {url: "+url+"}\nmodels:\n  m: {backend: a}\n")
	down := &script{by: map[string]func() (bool, error){"a": fails(refusedErr)}}
	for range 5 {
		if err := forward(t, tb, "m", down); apierror.From(err).Code != "backend_unavailable" {
			t.Fatalf("attempt at a stopped engine: %v", err)
		}
	}
	// Open. The engine still does not serve: one recheck, then none for
	// recheckEvery however many requests come.
	up := &script{by: map[string]func() (bool, error){"a": func() (bool, error) { return true, nil }}}
	for range 3 {
		if err := forward(t, tb, "m", up); apierror.From(err).Code != "no_healthy_deployment" {
			t.Fatalf("open breaker, engine not serving: %v, want no_healthy_deployment", err)
		}
	}
	if len(up.calls) != 0 || checks.Load() != 1 {
		t.Fatalf("calls %v, health checks %d: want no attempt and one recheck", up.calls, checks.Load())
	}
	// The health page says when it is tried again: at the next recheck.
	r, _ := tb.Route("m")
	if dh := tb.ModelHealth(r).Deployments[0]; dh.Status != StateOpen || dh.RetryInS <= 0 || dh.RetryInS > recheckEvery.Seconds() {
		t.Fatalf("health: status %q, retry in %gs; want open, retried within %s", dh.Status, dh.RetryInS, recheckEvery)
	}
	// The answer says what to do, and to come back in a second (the next
	// recheck), not at the end of the open period.
	e := apierror.From(forward(t, tb, "m", up))
	if ra := e.Header.Get("Retry-After"); ra != "1" || !strings.Contains(e.Message, "is the engine running?") {
		t.Fatalf("Retry-After %q, message %q: want 1 and the refused connections named", ra, e.Message)
	}
	serving.Store(true)
	if err := forward(t, tb, "m", up); err == nil || checks.Load() != 1 {
		t.Fatalf("within recheckEvery of the last recheck: err %v, checks %d; want still refused, no new recheck", err, checks.Load())
	}
	clk.Advance(recheckEvery)
	if err := forward(t, tb, "m", up); err != nil || len(up.calls) != 1 || checks.Load() != 2 {
		t.Fatalf("engine serving again, early in a 5 s open period: err %v, calls %v, checks %d; want the request served after one recheck",
			err, up.calls, checks.Load())
	}
	if st := tb.ModelHealth(r).Deployments[0].Status; st != "healthy" {
		t.Fatalf("status %q after the probe served, want healthy", st)
	}
}

// A breaker opened by errors of a running server (5xx) waits out its open
// period: the server answers its health URL all along, which says nothing
// about why it fails requests.
func TestBreaker_OpenedBy5xxIsNotRechecked(t *testing.T) {
	url, serving, checks := engine(t)
	serving.Store(true)
	tb, clk := table(t, "backends:\n  a: {url: "+url+"}\nmodels:\n  m: {backend: a}\n")
	for range 5 {
		_ = forward(t, tb, "m", &script{by: map[string]func() (bool, error){"a": fails(err502)}})
	}
	clk.Advance(2 * time.Second)
	up := &script{by: map[string]func() (bool, error){"a": func() (bool, error) { return true, nil }}}
	if err := forward(t, tb, "m", up); apierror.From(err).Code != "no_healthy_deployment" || len(up.calls) != 0 || checks.Load() != 0 {
		t.Fatalf("err %v, calls %v, checks %d: want the open period kept, no recheck", err, up.calls, checks.Load())
	}
}

// A passing active health check is seen by a deployment whose breaker
// opened on refused connections before it: no recheck of its own needed.
func TestBreaker_PassingHealthCheckEndsARefusedOpenPeriod(t *testing.T) {
	url, serving, checks := engine(t)
	tb, clk := table(t, "backends:\n  a: {url: "+url+"}\nmodels:\n  m: {backend: a}\n")
	for range 5 {
		_ = forward(t, tb, "m", &script{by: map[string]func() (bool, error){"a": fails(refusedErr)}})
	}
	// What the health loop records after a check that passed.
	serving.Store(true)
	clk.Advance(time.Millisecond)
	r, _ := tb.Route("m")
	r.Deployments[0].s.be.servingAt.Store(clk.Now().UnixNano())
	r.Deployments[0].s.be.recheckAt.Store(clk.Now().Add(time.Hour).UnixNano()) // no recheck may run
	up := &script{by: map[string]func() (bool, error){"a": func() (bool, error) { return true, nil }}}
	if err := forward(t, tb, "m", up); err != nil || len(up.calls) != 1 || checks.Load() != 0 {
		t.Fatalf("err %v, calls %v, checks %d: want the request served on the health check's word", err, up.calls, checks.Load())
	}
}

// An engine that accepts connections before it serves (vLLM binds its
// port early) holds one recheck, not one per request.
func TestBreaker_OneRecheckAtATime(t *testing.T) {
	var checks atomic.Int64
	release, started := make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks.Add(1)
		started <- struct{}{}
		<-release
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	defer close(release)
	tb, clk := table(t, "backends:\n  a: {url: "+srv.URL+"}\nmodels:\n  m: {backend: a}\n")
	for range 5 {
		_ = forward(t, tb, "m", &script{by: map[string]func() (bool, error){"a": fails(refusedErr)}})
	}
	done := make(chan error, 1)
	go func() { done <- forward(t, tb, "m", &script{}) }()
	<-started
	clk.Advance(2 * recheckEvery)
	if err := forward(t, tb, "m", &script{}); apierror.From(err).Code != "no_healthy_deployment" || checks.Load() != 1 {
		t.Fatalf("while a recheck hangs: err %v, checks %d; want refused at once, no second recheck", err, checks.Load())
	}
	release <- struct{}{}
	if err := <-done; apierror.From(err).Code != "no_healthy_deployment" {
		t.Fatalf("the request whose recheck got 503: %v", err)
	}
}

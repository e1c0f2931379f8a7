package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		runtime.Gosched()
	}
}

func queueOf(t *testing.T, tb *Table, backend string) QueueStats {
	t.Helper()
	for _, q := range tb.Queues() {
		if q.Backend == backend {
			return q
		}
	}
	t.Fatalf("no queue for %s in %+v", backend, tb.Queues())
	return QueueStats{}
}

// blocker is an attempt that holds its deployment until released.
type blocker struct {
	entered chan string
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan string, 16), release: make(chan struct{})}
}

func (b *blocker) attempt(ctx context.Context, d Deployment) (bool, error) {
	b.entered <- d.Backend.Name
	<-b.release
	return true, nil
}

func TestForward_WaitsInTheQueueAtMaxConcurrency(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a, max_concurrency: 1}]}
`)
	r, _ := tb.Route("m")
	b := newBlocker()
	done := make(chan error, 2)
	go func() { done <- tb.Forward(WithLane(context.Background(), Lane{Key: "k1", Weight: 1}), r, b.attempt) }()
	<-b.entered
	go func() { done <- tb.Forward(WithLane(context.Background(), Lane{Key: "k2", Weight: 1}), r, b.attempt) }()
	eventually(t, "second request waiting", func() bool { return queueOf(t, tb, "a").Waiting == 1 })
	select {
	case name := <-b.entered:
		t.Fatalf("a second request reached %s beyond max_concurrency 1", name)
	default:
	}
	b.release <- struct{}{} // the first ends; the second gets its turn
	<-b.entered
	b.release <- struct{}{}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if st := queueOf(t, tb, "a"); st.InFlight != 0 || st.Waiting != 0 || st.Waits != 1 {
		t.Fatalf("queue after both: %+v", st)
	}
}

func TestForward_QueueTimeoutIs429WithRetryAfterAndNoRetryElsewhere(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a, max_concurrency: 1, queue_timeout: 1ms}, {backend: b, priority: 1}]}
`)
	r, _ := tb.Route("m")
	b := newBlocker()
	first := make(chan error, 1)
	go func() { first <- tb.Forward(context.Background(), r, b.attempt) }()
	<-b.entered
	s := &script{}
	err := tb.Forward(context.Background(), r, s.attempt)
	e := apierror.From(err)
	if e.Status != http.StatusTooManyRequests || e.Code != CodeQueueTimeout || e.Header.Get("Retry-After") != "1" {
		t.Fatalf("got %d %s Retry-After %q, want 429 queue_timeout with Retry-After 1", e.Status, e.Code, e.Header.Get("Retry-After"))
	}
	if !strings.Contains(e.Message, "max_concurrency 1") || !strings.Contains(e.Message, "Retry after") {
		t.Errorf("message does not say what happened and what to do: %s", e.Message)
	}
	if len(s.calls) != 0 {
		t.Errorf("a request that waited its queue_timeout was sent on to %v", s.calls)
	}
	close(b.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if st := tb.deps["a\x00m"].br.status(tb.opt.Now()); st.State != StateClosed || st.RestingFor != 0 {
		t.Errorf("a queue time-out touched the deployment's breaker: %+v", st)
	}
}

func TestForward_ClientGoneWhileQueuedLeavesAtOnce(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a, max_concurrency: 1}]}
`)
	r, _ := tb.Route("m")
	b := newBlocker()
	first := make(chan error, 1)
	go func() { first <- tb.Forward(context.Background(), r, b.attempt) }()
	<-b.entered
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- tb.Forward(ctx, r, b.attempt) }()
	eventually(t, "waiting", func() bool { return queueOf(t, tb, "a").Waiting == 1 })
	cancel()
	if err := <-gone; !errors.Is(err, apierror.ErrClientClosed) {
		t.Fatalf("err %v, want client closed", err)
	}
	if st := queueOf(t, tb, "a"); st.Waiting != 0 || st.InFlight != 1 || st.Gone != 1 {
		t.Fatalf("queue after the client left: %+v", st)
	}
	close(b.release)
	<-first
	if st := queueOf(t, tb, "a"); st.InFlight != 0 {
		t.Fatalf("slot leaked: %+v", st)
	}
}

func TestForward_PrefersAnEqualDeploymentWithRoomOverWaiting(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m:
    balancing: weighted_random
    deployments: [{backend: a, max_concurrency: 1, weight: 1000}, {backend: b, max_concurrency: 1, weight: 1}]
`)
	r, _ := tb.Route("m")
	b := newBlocker()
	done := make(chan error, 2)
	go func() { done <- tb.Forward(context.Background(), r, b.attempt) }()
	go func() { done <- tb.Forward(context.Background(), r, b.attempt) }()
	got := map[string]bool{<-b.entered: true, <-b.entered: true}
	if !got["a"] || !got["b"] {
		t.Fatalf("two requests went to %v: one should have taken the free deployment", got)
	}
	close(b.release)
	<-done
	<-done
}

// A request waiting in one deployment's queue moves to an equal
// deployment that gets room (its request ended, nobody waits there)
// rather than wait for a slot of the one it first chose.
func TestForward_AWaitingRequestMovesToAnEqualDeploymentThatGetsRoom(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a, max_concurrency: 1}, {backend: b, max_concurrency: 1}]}
`)
	r, _ := tb.Route("m")
	entered := make(chan string, 8)
	release := map[string]chan struct{}{"a": make(chan struct{}, 4), "b": make(chan struct{}, 4)}
	attempt := func(ctx context.Context, d Deployment) (bool, error) {
		entered <- d.Backend.Name
		<-release[d.Backend.Name]
		return true, nil
	}
	done := make(chan error, 3)
	for range 2 {
		go func() { done <- tb.Forward(context.Background(), r, attempt) }()
	}
	if got := map[string]bool{<-entered: true, <-entered: true}; !got["a"] || !got["b"] {
		t.Fatalf("the first two requests went to %v", got)
	}
	go func() { done <- tb.Forward(context.Background(), r, attempt) }()
	var bound, other string
	eventually(t, "the third request waiting", func() bool {
		switch {
		case queueOf(t, tb, "a").Waiting == 1:
			bound, other = "a", "b"
		case queueOf(t, tb, "b").Waiting == 1:
			bound, other = "b", "a"
		}
		return bound != ""
	})
	release[other] <- struct{}{} // the other deployment's request ends
	select {
	case name := <-entered:
		if name != other {
			t.Fatalf("the waiting request went to %s; %s had room", name, other)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the request waiting for %s never went to %s, which had room", bound, other)
	}
	if st := queueOf(t, tb, bound); st.Waiting != 0 || st.Gone != 0 || st.Timeouts != 0 {
		t.Errorf("%s's queue after the move: %+v (a move is neither gone nor timed out)", bound, st)
	}
	release[bound] <- struct{}{}
	release[other] <- struct{}{}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestForward_SlotReleasedOnRetryErrorAndPanic(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a, max_concurrency: 2}, {backend: b, max_concurrency: 2}]}
`)
	r, _ := tb.Route("m")
	// Both fail before the first byte: each attempt's slot is given back
	// before the next deployment is tried.
	s := &script{by: map[string]func() (bool, error){"a": fails(err502), "b": fails(err502)}}
	if err := tb.Forward(context.Background(), r, s.attempt); err == nil {
		t.Fatal("no error")
	}
	// A request error, and one after commit.
	s = &script{by: map[string]func() (bool, error){"a": fails(err400), "b": fails(err400)}}
	_ = tb.Forward(context.Background(), r, s.attempt)
	s = &script{by: map[string]func() (bool, error){"a": func() (bool, error) { return true, err502 }, "b": func() (bool, error) { return true, err502 }}}
	_ = tb.Forward(context.Background(), r, s.attempt)
	// A panic in the attempt (the server recovers it).
	func() {
		defer func() { _ = recover() }()
		_ = tb.Forward(context.Background(), r, func(context.Context, Deployment) (bool, error) { panic("boom") })
	}()
	for _, name := range []string{"a", "b"} {
		if st := queueOf(t, tb, name); st.InFlight != 0 || st.Waiting != 0 {
			t.Errorf("%s: %+v after every path ended", name, st)
		}
		if n := tb.deps[name+"\x00m"].outstanding.Load(); n != 0 {
			t.Errorf("%s: %d outstanding", name, n)
		}
	}
}

// A deployment with queue_when_waiting holds requests while its engine's
// scraped /metrics say more are waiting than that, but only while this
// gateway has some in flight there; the next scrape that shows the
// engine's queue shorter lets the held request in.
func TestForward_EngineQueueBeyondThresholdHoldsRequests(t *testing.T) {
	e := newFakeEngine(t)
	e.set(5, 4, false)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf(`routing: {engine_metrics_interval: 100ms}
backends:
  a: {url: %q, engine: vllm}
  b: {url: http://127.0.0.1:9}
models:
  m: {deployments: [{backend: a, queue_when_waiting: 2}, {backend: b, priority: 1}]}
`, e.srv.URL+"/v1")), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tb := NewWithOptions(cfg, Options{Backoff: time.Microsecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(tb.Close)
	r, _ := tb.Route("m")
	eventually(t, "the engine's queue read", func() bool {
		sn, ok := r.Deployments[0].EngineLoad()
		return ok && sn.Fresh && sn.Waiting == 5
	})
	b := newBlocker()
	done := make(chan error, 2)
	go func() { done <- tb.Forward(context.Background(), r, b.attempt) }()
	<-b.entered // nothing of ours in flight: the first goes
	go func() { done <- tb.Forward(context.Background(), r, b.attempt) }()
	eventually(t, "second held by the engine's queue", func() bool { return queueOf(t, tb, "a").Waiting == 1 })
	e.set(1, 4, false) // the next scrape lets it in, the first still in flight
	if name := <-b.entered; name != "a" {
		t.Fatalf("the held request went to %s", name)
	}
	close(b.release)
	<-done
	<-done
}

func TestReleaseSlot_LetsTheNextRequestInBeforeTheAttemptReturns(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a, max_concurrency: 1}]}
`)
	r, _ := tb.Route("m")
	finish := make(chan struct{})
	second := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- tb.Forward(context.Background(), r, func(ctx context.Context, d Deployment) (bool, error) {
			ReleaseSlot(ctx) // the backend's answer has ended
			ReleaseSlot(ctx)
			<-finish // the record and the last bytes take their time
			return true, nil
		})
	}()
	go func() {
		_ = tb.Forward(context.Background(), r, func(context.Context, Deployment) (bool, error) {
			close(second)
			return true, nil
		})
	}()
	<-second // served while the first attempt has not returned
	close(finish)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	eventually(t, "both done", func() bool { return queueOf(t, tb, "a").InFlight == 0 })
	if st := queueOf(t, tb, "a"); st.InFlight != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestHealth_ShowsTheFairQueueOfDeploymentsThatHaveOne(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a, max_concurrency: 2}, {backend: b, priority: 1}]}
`)
	r, _ := tb.Route("m")
	b := newBlocker()
	done := make(chan error, 1)
	go func() { done <- tb.Forward(context.Background(), r, b.attempt) }()
	<-b.entered
	mh := tb.ModelHealth(r)
	var qa, qb *QueueHealth
	for _, d := range mh.Deployments {
		switch d.Backend {
		case "a":
			qa = d.Queue
		case "b":
			qb = d.Queue
		}
	}
	if qa == nil || qa.MaxConcurrency != 2 || qa.InFlight != 1 || qa.Waiting != 0 {
		t.Errorf("queue of a: %+v", qa)
	}
	if qb != nil {
		t.Errorf("b has no max_concurrency but shows a queue: %+v", qb)
	}
	close(b.release)
	<-done
}

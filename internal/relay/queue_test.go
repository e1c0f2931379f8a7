package relay_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/relay"
	"llmgate/internal/router"
	"llmgate/internal/usage"
)

// queueHarness is a relay in front of one deployment per backend dialect
// with max_concurrency 1, whose first request the backend holds until
// released.
type queueHarness struct {
	srv     *httptest.Server
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
	table   *router.Table
	led     *recLedger
	// ended has each request's connection once the relay has served it.
	ended chan *lastBytesWriter
}

// free lets the held request go (once; a failed test's cleanup does it
// too, so that closing the backend does not wait for it forever).
func (h *queueHarness) free() { h.once.Do(func() { close(h.release) }) }

func newQueueHarness(t *testing.T, queueTimeout string) *queueHarness {
	h := &queueHarness{arrived: make(chan struct{}, 4), release: make(chan struct{}), led: &recLedger{}, ended: make(chan *lastBytesWriter, 8)}
	var n atomic.Int64
	gate := func(f *fakeBackend) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Only a generation is held: the gateway's own probes of the
			// backend (its tokenizer, its context length) go through.
			gen := strings.HasSuffix(r.URL.Path, "/chat/completions") || strings.HasSuffix(r.URL.Path, "/messages")
			if r.Method == http.MethodPost && gen && n.Add(1) == 1 {
				h.arrived <- struct{}{}
				<-h.release
			}
			f.serve(w, r)
		}))
		t.Cleanup(s.Close)
		return s
	}
	oa, an := gate(newFakeBackend(t, false)), gate(newFakeBackend(t, true))
	src := fmt.Sprintf(`backends:
  oa: {url: %s/v1}
  an: {url: %s, dialect: anthropic}
models:
  oa-q: {deployments: [{backend: oa, upstream_model: ok-a, max_concurrency: 1, queue_timeout: %s}]}
  an-q: {deployments: [{backend: an, upstream_model: ok-a, max_concurrency: 1, queue_timeout: %s}]}
`, oa.URL, an.URL, queueTimeout, queueTimeout)
	cfg, err := config.Load(strings.NewReader(src), "queue_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h.table = router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(h.table.Close)
	rl := relay.New(relay.Options{Ledger: h.led, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var ids atomic.Int64
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := codec.Chat
		if r.URL.Path == "/v1/messages" {
			d = codec.Messages
		}
		body, _ := io.ReadAll(r.Body)
		req, err := codec.Decode(d, body)
		if err != nil {
			codec.WriteError(d, w, err)
			return
		}
		p := keys.Principal{Key: &keys.Key{ID: r.Header.Get("X-Key"), Priority: 1}}
		client := &lastBytesWriter{ResponseWriter: w, led: h.led, id: fmt.Sprintf("req-q-%d", ids.Add(1))}
		rl.Serve(client, r, &relay.Call{ID: client.id, Start: time.Now(), Principal: p, Req: req, Table: h.table})
		select {
		case h.ended <- client:
		default:
		}
	}))
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.free) // runs first: the held request ends before the servers close
	return h
}

func (h *queueHarness) post(ctx context.Context, t *testing.T, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("X-Key", "key_"+path[4:8])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// hold sends a request that occupies the deployment's one slot until
// h.release is closed; the returned channel yields once it has finished.
func (h *queueHarness) hold(t *testing.T, path, model string) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp := h.post(context.Background(), t, path, fmt.Sprintf(`{"model":%q,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, model))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	<-h.arrived
	return done
}

func TestRelay_QueueTimeoutIs429WithRetryAfterInTheClientsEnvelope(t *testing.T) {
	for _, c := range []struct {
		path, model string
		d           codec.Dialect
	}{{"/v1/chat/completions", "oa-q", codec.Chat}, {"/v1/messages", "an-q", codec.Messages}} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", c.d.Name(), stream), func(t *testing.T) {
				h := newQueueHarness(t, "1ms")
				held := h.hold(t, c.path, c.model)
				resp := h.post(context.Background(), t, c.path, fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, c.model, stream))
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
					t.Fatalf("status %d Retry-After %q, want 429 with Retry-After 1: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
				}
				checkEnvelope(t, c.d, string(body), router.CodeQueueTimeout)
				if c.d.Anthropic() && !strings.Contains(string(body), `"rate_limit_error"`) {
					t.Errorf("an Anthropic client's 429 is not a rate_limit_error: %s", body)
				}
				if !strings.Contains(string(body), "max_concurrency") {
					t.Errorf("the message does not say what to do: %s", body)
				}
				h.free()
				<-held
				for _, q := range h.table.Queues() {
					if q.InFlight != 0 || q.Waiting != 0 {
						t.Errorf("queue %s after both requests: %+v", q.Backend, q.Stats)
					}
				}
			})
		}
	}
}

func TestRelay_QueuedStreamGetsKeepAlivesThenItsAnswer(t *testing.T) {
	defer relay.SetQueueKeepAlive(time.Millisecond, time.Millisecond)()
	for _, c := range []struct {
		path, model, keepAlive, end string
	}{
		{"/v1/chat/completions", "oa-q", ": keep-alive\n", "data: [DONE]"},
		{"/v1/messages", "an-q", "event: ping\ndata: {\"type\": \"ping\"}\n", "event: message_stop"},
	} {
		t.Run(c.path, func(t *testing.T) {
			h := newQueueHarness(t, "30s")
			held := h.hold(t, c.path, c.model)
			resp := h.post(context.Background(), t, c.path, fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, c.model))
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d %q while queued", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			rd := bufio.NewReader(resp.Body)
			var seen strings.Builder
			for !strings.Contains(seen.String(), c.keepAlive) {
				line, err := rd.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended before a keep-alive: %v\n%s", err, seen.String())
				}
				seen.WriteString(line)
			}
			h.free() // the slot frees; the queued request goes on
			rest, _ := io.ReadAll(rd)
			if !strings.Contains(string(rest), c.end) || !strings.Contains(string(rest), "Hello") {
				t.Fatalf("no answer after the keep-alives:\n%s", rest)
			}
			<-held
		})
	}
}

func TestRelay_ClientGoneWhileQueuedFreesItsPlace(t *testing.T) {
	defer relay.SetQueueKeepAlive(time.Millisecond, time.Millisecond)()
	h := newQueueHarness(t, "30s")
	held := h.hold(t, "/v1/chat/completions", "oa-q")
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.post(ctx, t, "/v1/chat/completions", `{"model":"oa-q","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	_, _ = bufio.NewReader(resp.Body).ReadString('\n') // queued: a keep-alive
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	oa := func() router.QueueStats {
		for _, q := range h.table.Queues() {
			if q.Backend == "oa" {
				return q
			}
		}
		t.Fatal("no queue for oa")
		return router.QueueStats{}
	}
	for oa().Waiting != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the request stayed queued after its client left: %+v", h.table.Queues())
		}
		time.Sleep(time.Millisecond)
	}
	h.free()
	<-held
	if q := oa(); q.InFlight != 0 || q.Gone != 1 {
		t.Fatalf("queue after all: %+v", q.Stats)
	}
}

// TestRelay_QueuedStreamThatTimesOutGetsItsErrorEventAfterItsRecord: a
// streaming request that had keep-alives while it waited its whole
// queue_timeout has its 200 on the wire; the time-out is the stream's
// error event, written after the request's record is in the ledger.
func TestRelay_QueuedStreamThatTimesOutGetsItsErrorEventAfterItsRecord(t *testing.T) {
	defer relay.SetQueueKeepAlive(time.Millisecond, time.Millisecond)()
	for _, c := range []struct{ path, model, keepAlive, errorEvent string }{
		{"/v1/chat/completions", "oa-q", ": keep-alive\n", `"code":"queue_timeout"`},
		{"/v1/messages", "an-q", "event: ping\n", "event: error"},
	} {
		t.Run(c.path, func(t *testing.T) {
			h := newQueueHarness(t, "100ms")
			held := h.hold(t, c.path, c.model)
			resp := h.post(context.Background(), t, c.path, fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, c.model))
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), c.keepAlive) || !strings.Contains(string(body), c.errorEvent) {
				t.Fatalf("status %d, want 200 with keep-alives then the error event:\n%s", resp.StatusCode, body)
			}
			queued := <-h.ended
			h.free()
			<-held
			if queued.writes == 0 || !queued.recordedAtLast {
				t.Errorf("the error event was written before the request's record reached the ledger")
			}
			var rec *usage.Record
			for _, r := range h.led.Records() {
				if r.ID == queued.id {
					rec = &r
				}
			}
			if rec == nil || rec.Status != http.StatusTooManyRequests || rec.ErrorType != router.CodeQueueTimeout {
				t.Fatalf("record %+v, want one 429 queue_timeout", rec)
			}
		})
	}
}

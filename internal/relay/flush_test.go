package relay_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/relay"
	"llmgate/internal/router"
)

// chunk is one OpenAI stream event carrying text.
func chunk(text string) string {
	return fmt.Sprintf("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", text)
}

const streamEnd = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":9,\"total_tokens\":12}}\n\n" +
	"data: [DONE]\n\n"

// flushCounter is the client's connection, counting the relay's flushes.
type flushCounter struct {
	http.ResponseWriter
	flushes atomic.Int32
}

func (f *flushCounter) Flush() {
	f.flushes.Add(1)
	f.ResponseWriter.(http.Flusher).Flush()
}

// streamRelay serves one model, m, on an OpenAI backend answering with
// upstream; it returns the gateway's URL and the client connection of the
// last request.
func streamRelay(t *testing.T, upstream http.HandlerFunc) (string, *atomic.Pointer[flushCounter]) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r) // no tokenizer: the gateway estimates
			return
		}
		upstream(w, r)
	}))
	t.Cleanup(up.Close)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %s/v1}\nmodels:\n  m: {backend: up}\n", up.URL)), "flush_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	table := router.NewWithOptions(cfg, router.Options{Logger: quiet})
	t.Cleanup(table.Close)
	rl := relay.New(relay.Options{Ledger: &recLedger{}, Admission: &recAdmission{}, Logger: quiet})
	var last atomic.Pointer[flushCounter]
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		fc := &flushCounter{ResponseWriter: w}
		last.Store(fc)
		rl.Serve(fc, r, &relay.Call{ID: "req-1", Start: time.Now(), Principal: keys.Principal{Master: true}, Req: req, Table: table})
	}))
	t.Cleanup(gw.Close)
	return gw.URL, &last
}

var streamClients = []struct{ name, path, body string }{
	{"chat", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	{"messages", "/v1/messages", `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
}

// Events the backend sent together leave together: a burst of twelve
// events is one flush to the client, not one per event (the closing
// events, written after the record is settled, one more).
func TestStream_EventsThatArriveTogetherLeaveInOneFlush(t *testing.T) {
	for _, cl := range streamClients {
		t.Run(cl.name, func(t *testing.T) {
			url, last := streamRelay(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				var b strings.Builder
				for i := 0; i < 12; i++ {
					b.WriteString(chunk(fmt.Sprintf("tok%d ", i)))
				}
				b.WriteString(streamEnd)
				io.WriteString(w, b.String()) // one write: the events arrive together
			})
			resp, err := http.Post(url+cl.path, "application/json", strings.NewReader(cl.body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(got), "tok11") {
				t.Fatalf("status %d, body %q: want the whole stream", resp.StatusCode, got)
			}
			if n := last.Load().flushes.Load(); n > 3 {
				t.Errorf("%d flushes for a burst of 12 events: want at most 3 (the burst, the closing events, the server's own)", n)
			}
		})
	}
}

// No event waits in the gateway while the gateway waits for the backend:
// the backend sends one event, then nothing until the client has it.
func TestStream_AnEventIsSentBeforeTheGatewayWaitsForTheNext(t *testing.T) {
	for _, cl := range streamClients {
		t.Run(cl.name, func(t *testing.T) {
			seen := make(chan struct{})
			url, _ := streamRelay(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, chunk("")+chunk("first"))
				w.(http.Flusher).Flush()
				select { // the rest only once the client has "first"
				case <-seen:
				case <-time.After(10 * time.Second):
					return // the relay held "first": the client fails below
				}
				io.WriteString(w, chunk(" second")+streamEnd)
			})
			resp, err := http.Post(url+cl.path, "application/json", strings.NewReader(cl.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			rd := bufio.NewReader(resp.Body)
			first := make(chan error, 1)
			go func() {
				var all strings.Builder
				for !strings.Contains(all.String(), "first") {
					line, err := rd.ReadString('\n')
					all.WriteString(line)
					if err != nil {
						first <- fmt.Errorf("the stream ended (%v) before the first text: %q", err, all.String())
						return
					}
				}
				first <- nil
			}()
			select {
			case err := <-first:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the first text did not reach the client within 5 s while the backend waited for the client to have it: the relay held it while it waited for the next event")
			}
			close(seen)
			rest, _ := io.ReadAll(rd)
			if !strings.Contains(string(rest), "second") {
				t.Fatalf("after the first text: %q, want the rest of the stream", rest)
			}
		})
	}
}

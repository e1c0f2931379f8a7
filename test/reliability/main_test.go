package reliability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

const master = "sk-lg-reliability-master"

// bin is the llmgate binary under test: $LLMGATE_RELIABILITY_BIN, or one
// built by TestMain when the suite is on.
var bin string

func on() bool { return os.Getenv("LLMGATE_RELIABILITY") == "1" }

func TestMain(m *testing.M) {
	if !on() {
		os.Exit(m.Run()) // every test skips, saying why
	}
	bin = os.Getenv("LLMGATE_RELIABILITY_BIN")
	if bin == "" {
		var err error
		if bin, err = testenv.SharedLLMGateBinary(); err != nil {
			fmt.Fprintln(os.Stderr, "reliability: cannot build llmgate:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	testenv.RemoveSharedLLMGate()
	os.Exit(code)
}

// gate skips the test, loudly, unless the suite is on. The suite starts
// gateway processes and loads them for minutes, so plain `go test ./...`
// leaves it out; .ci/reliability.sh runs it. With the suite on nothing in
// it skips, in CI or not (testenv fails under CI=true when PostgreSQL is
// not configured).
func gate(t *testing.T) {
	t.Helper()
	if !on() {
		t.Skip("!!! SKIPPED: the reliability suite (SIGKILL under load, trickled bodies, deleted database) " +
			"runs only with LLMGATE_RELIABILITY=1: run .ci/reliability.sh")
	}
}

// upstream is a fake OpenAI backend answering at once: a JSON body, or a
// stream of a few chunks with usage before [DONE].
type upstream struct {
	*httptest.Server
	served atomic.Int64
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model         string `json:"model"`
			Stream        bool   `json:"stream"`
			MaxTokens     int    `json:"max_tokens"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.served.Add(1)
		const prompt = 9
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok ok ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":3,"total_tokens":%d}}`,
				req.Model, prompt, prompt+3)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		chunk := func(delta, finish string) {
			fin := "null"
			if finish != "" {
				fin = `"` + finish + `"`
			}
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", req.Model, delta, fin)
			fl.Flush()
		}
		chunk(`{"role":"assistant","content":""}`, "")
		for i := 0; i < 3; i++ {
			chunk(`{"content":"ok "}`, "")
			time.Sleep(time.Millisecond) // a stream that is in flight for a while
		}
		chunk(`{}`, "stop")
		if req.StreamOptions.IncludeUsage {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":3,\"total_tokens\":%d}}\n\n",
				req.Model, prompt, prompt+3)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(u.Close)
	return u
}

// writeConfig writes a gateway config serving model m from up, with the
// given database and spool directory (and extra YAML lines), and returns
// its path.
func writeConfig(t *testing.T, dir, database, spool string, up *upstream, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf("database: %q\nspool_dir: %q\naccess_log: false\nbackends:\n  up: {url: %q}\nmodels:\n  m: {backend: up, input_price: 1, output_price: 2}\n%s",
		database, spool, up.URL+"/v1", extra)
	path := filepath.Join(dir, "llmgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func chatBody(stream bool) string {
	if stream {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`
	}
	return `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
}

// outcome is what a client got for one request.
type outcome struct {
	id       string
	stream   bool
	status   int  // 0: no answer (connection refused or cut before the headers)
	complete bool // the whole answer arrived: the JSON body read to its end, or the stream up to [DONE]
	err      error
	wrong    string // what was wrong with the answer: the gateway's fault, never the kill's
}

// ok reports a whole 200 answer with nothing wrong in it.
func (o outcome) ok() bool { return o.complete && o.status == http.StatusOK && o.wrong == "" }

func newClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// send makes one chat request with X-Request-Id id and reads the answer to
// its end.
func send(c *http.Client, base, key, id string, stream bool) outcome {
	o := outcome{id: id, stream: stream}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(chatBody(stream)))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	resp, err := c.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	if id != "" && resp.Header.Get("X-Request-Id") != id {
		o.wrong = fmt.Sprintf("answer echoes X-Request-Id %q, want %q", resp.Header.Get("X-Request-Id"), id)
	}
	if !stream || resp.StatusCode != http.StatusOK {
		// The client reports a body shorter than its Content-Length as
		// an error, so a cut answer is never taken for a whole one.
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			o.err = err
			return o
		}
		var v struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if resp.StatusCode == http.StatusOK && (json.Unmarshal(b, &v) != nil || len(v.Choices) == 0) {
			o.wrong = fmt.Sprintf("200 with a whole body that is not a chat completion: %.200s", b)
		}
		o.complete = true
		return o
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			o.complete = true
			_, _ = io.Copy(io.Discard, resp.Body)
			return o
		}
	}
	o.err = sc.Err()
	if o.err == nil {
		o.err = io.ErrUnexpectedEOF
	}
	return o
}

// recordReader is what the tests need of a store: every record.
type recordReader interface {
	Recent(ctx context.Context, limit int) ([]usage.Record, error)
}

// recordsByClientID reads every ledger record, grouped by the client's
// X-Request-Id.
func recordsByClientID(t *testing.T, st recordReader) map[string][]usage.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, err := st.Recent(ctx, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]usage.Record, len(recs))
	for _, r := range recs {
		out[r.ClientRequestID] = append(out[r.ClientRequestID], r)
	}
	return out
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TimedUpstream is an OpenAI-compatible streaming server whose timing is
// known exactly: the first chunk is written T1 after the request arrives and
// each further chunk T2 after the previous one, and every write time is
// recorded. Accuracy tests and `llmgate bench self-test` compare the
// client's measurements with these records.
//
// The model name selects a behaviour, so one server can answer every case:
// "fail-500" answers HTTP 500, "fail-cut" closes the stream mid-way,
// "fail-event" sends an error object after the first chunk with status
// 200, "fail-slow" never sends a chunk, "no-usage" omits the usage chunk,
// "flaky" answers HTTP 500 to every third request (by request index).
type TimedUpstream struct {
	T1, T2 time.Duration
	// Chunks is the number of content chunks per response (default 8);
	// TokensPerChunk the tokens each carries (default 1).
	Chunks         int
	TokensPerChunk int
	// PromptTokens is reported in usage (default 10).
	PromptTokens int
	// Record keeps per-request timing; turn it off for capacity runs that
	// read the times embedded in each chunk instead.
	Record bool

	mu  sync.Mutex
	log map[string]*UpstreamLog
}

// UpstreamLog is the server's own record of one request.
type UpstreamLog struct {
	// Recv is when the request's first bytes were read (with an
	// ArrivalListener) or when the handler started, Writes when each
	// content chunk's flush returned.
	Recv   time.Time
	Writes []time.Time
	Tokens int
}

// Log returns the record for a request id (the X-Request-Id header).
func (u *TimedUpstream) Log(id string) *UpstreamLog {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.log[id]
}

// ServeHTTP implements the chat and completions streaming endpoints.
func (u *TimedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	recv, rearm := arrival(r, time.Now())
	defer rearm()
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/log") {
		u.serveLog(w, r)
		return
	}
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"timed-upstream"}]}`)
		return
	}
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		// Per-request timing overrides, used by the capacity self-test.
		T1Micros int64 `json:"llmgate_t1_us"`
		T2Micros int64 `json:"llmgate_t2_us"`
		Chunks   int   `json:"llmgate_chunks"`
		// Precise paces chunks with thread sleeps (see threadSleep), and
		// Stagger spreads the phases of that many streams over one gap so
		// their chunks interleave instead of arriving together.
		Precise bool `json:"llmgate_precise"`
		Stagger int  `json:"llmgate_stagger"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &req)
	t1, t2 := u.T1, u.T2
	if req.T1Micros > 0 {
		t1 = time.Duration(req.T1Micros) * time.Microsecond
	}
	if req.T2Micros > 0 {
		t2 = time.Duration(req.T2Micros) * time.Microsecond
	}
	completions := strings.HasSuffix(r.URL.Path, "/completions") && !strings.HasSuffix(r.URL.Path, "/chat/completions")
	if req.Model == "fail-500" || (req.Model == "flaky" && requestIndex(r)%3 == 2) {
		http.Error(w, `{"error":{"message":"injected failure","type":"server_error"}}`, http.StatusInternalServerError)
		return
	}
	chunks := u.Chunks
	if req.Chunks > 0 {
		chunks = req.Chunks
	}
	if chunks <= 0 {
		chunks = 8
	}
	tpc := max(u.TokensPerChunk, 1)
	rec := &UpstreamLog{Recv: recv}
	if u.Record {
		u.mu.Lock()
		if u.log == nil {
			u.log = map[string]*UpstreamLog{}
		}
		u.log[r.Header.Get("X-Request-Id")] = rec
		u.mu.Unlock()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if req.Model == "fail-slow" {
		<-r.Context().Done()
		return
	}
	word := strings.Repeat("tok ", tpc)
	var buf []byte
	if req.Stagger > 0 {
		if i := requestIndex(r); i >= 0 {
			t1 += time.Duration(i%req.Stagger) * t2 / time.Duration(req.Stagger)
		}
	}
	next := recv.Add(t1)
	for i := 0; i < chunks; i++ {
		if d := time.Until(next); d > 0 {
			if req.Precise {
				threadSleep(d)
			} else {
				time.Sleep(d)
			}
		}
		if req.Model == "fail-cut" && i == chunks/2 {
			// Abort the connection without the chunked terminator.
			panic(http.ErrAbortHandler)
		}
		finish := "null"
		if i == chunks-1 {
			finish = `"length"`
		}
		buf = buf[:0]
		if completions {
			buf = fmt.Appendf(buf, `data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":%q,"finish_reason":%s}]}`+"\n\n", word, finish)
		} else {
			buf = fmt.Appendf(buf, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":%s}]}`+"\n\n", word, finish)
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		_ = rc.Flush()
		now := time.Now()
		rec.Writes = append(rec.Writes, now)
		rec.Tokens += tpc
		if req.Model == "fail-event" && i == 0 {
			_, _ = io.WriteString(w, `data: {"error":{"message":"injected error after headers","type":"server_error"}}`+"\n\n")
			_ = rc.Flush()
			return
		}
		next = next.Add(t2)
	}
	if req.Model != "no-usage" {
		fmt.Fprintf(w, `data: {"id":"x","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
			max(u.PromptTokens, 10), rec.Tokens, max(u.PromptTokens, 10)+rec.Tokens)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// serveLog answers GET .../log?id=ID with the request's write times in Unix
// nanoseconds, for readers in another process.
func (u *TimedUpstream) serveLog(w http.ResponseWriter, r *http.Request) {
	l := u.Log(r.URL.Query().Get("id"))
	if l == nil {
		http.NotFound(w, r)
		return
	}
	out := struct {
		Recv   int64   `json:"recv_ns"`
		Writes []int64 `json:"writes_ns"`
	}{Recv: l.Recv.UnixNano()}
	for _, t := range l.Writes {
		out.Writes = append(out.Writes, t.UnixNano())
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// RequestID is the X-Request-Id the benchmark sends for request index i of
// target ti in cell ci; tests use it to find the server's record.
func RequestID(ti, ci, i int) string {
	return "llmgate-bench-" + strconv.Itoa(ti) + "-" + strconv.Itoa(ci) + "-" + strconv.Itoa(i)
}

// requestIndex parses the trailing number of the X-Request-Id header.
func requestIndex(r *http.Request) int {
	id := r.Header.Get("X-Request-Id")
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[i+1:])
	if err != nil {
		return -1
	}
	return n
}

// ArrivalListener wraps a listener so that TimedUpstream takes a request's
// receive time when its first bytes are read from the connection rather
// than when the handler starts, which on a loaded machine (or under the
// race detector) can be a millisecond later because of the server's own
// header parsing. Use it with ArrivalConnContext as the server's
// ConnContext.
type ArrivalListener struct{ net.Listener }

// Accept wraps each connection to record arrival times.
func (l ArrivalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &arrivalConn{Conn: c, armed: true}, nil
}

type arrivalConn struct {
	net.Conn
	mu    sync.Mutex
	armed bool
	at    time.Time
}

// Read stamps the first bytes read while armed: the start of a request.
func (c *arrivalConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		now := time.Now()
		c.mu.Lock()
		if c.armed {
			c.at, c.armed = now, false
		}
		c.mu.Unlock()
	}
	return n, err
}

type arrivalKey struct{}

// ArrivalConnContext attaches an ArrivalListener connection to each
// request's context so TimedUpstream can find its arrival time.
func ArrivalConnContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*arrivalConn); ok {
		return context.WithValue(ctx, arrivalKey{}, ac)
	}
	return ctx
}

// arrival returns the request's arrival time and a function that re-arms
// the connection for the next request; the handler calls it when done,
// before which an HTTP/1.1 client cannot send the next request.
func arrival(r *http.Request, fallback time.Time) (time.Time, func()) {
	ac, ok := r.Context().Value(arrivalKey{}).(*arrivalConn)
	if !ok {
		return fallback, func() {}
	}
	ac.mu.Lock()
	at := ac.at
	if ac.armed || at.IsZero() || at.After(fallback) {
		at = fallback
	}
	ac.mu.Unlock()
	return at, func() {
		ac.mu.Lock()
		ac.armed = true
		ac.mu.Unlock()
	}
}

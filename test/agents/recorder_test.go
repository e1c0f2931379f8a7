//go:build unix

package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// maxRecordedResponse caps how much of each response body is kept: enough
// for the first events of a stream and any error body, not a whole stream.
const maxRecordedResponse = 64 << 10

// exchange is one request a client sent to the gateway and what came back.
type exchange struct {
	Seq        int               `json:"seq"`
	Time       time.Time         `json:"time"`
	Method     string            `json:"method"`
	URL        string            `json:"url"`
	Header     map[string]string `json:"header"`
	Body       json.RawMessage   `json:"body,omitempty"`
	RawBody    string            `json:"raw_body,omitempty"` // when the body is not JSON
	Status     int               `json:"status"`
	RespHeader map[string]string `json:"resp_header,omitempty"`
	RespBody   string            `json:"resp_body,omitempty"`
	Err        string            `json:"error,omitempty"`
}

// recorder is a reverse proxy between one client and the gateway that
// keeps every exchange, so the test can check what reached the gateway
// and the report can say what each client sends.
type recorder struct {
	url string
	srv *http.Server

	mu        sync.Mutex
	exchanges []*exchange
}

// startRecorder listens on a free loopback port and forwards to target.
func startRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{url: "http://" + ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // streams pass through event by event
	rp.ModifyResponse = func(resp *http.Response) error {
		ex := resp.Request.Context().Value(exchangeKey{}).(*exchange)
		r.mu.Lock()
		ex.Status = resp.StatusCode
		ex.RespHeader = flatten(resp.Header)
		r.mu.Unlock()
		resp.Body = &capture{ReadCloser: resp.Body, done: func(b []byte) {
			r.mu.Lock()
			ex.RespBody = string(b)
			r.mu.Unlock()
		}}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, req *http.Request, err error) {
		ex := req.Context().Value(exchangeKey{}).(*exchange)
		r.mu.Lock()
		ex.Err = err.Error()
		r.mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		ex := &exchange{Time: time.Now(), Method: req.Method, URL: req.URL.RequestURI(), Header: flatten(req.Header)}
		if len(body) > 0 {
			if json.Valid(body) {
				ex.Body = body
			} else {
				ex.RawBody = string(body)
			}
		}
		r.mu.Lock()
		ex.Seq = len(r.exchanges) + 1
		r.exchanges = append(r.exchanges, ex)
		r.mu.Unlock()
		rp.ServeHTTP(w, req.WithContext(contextWith(req, ex)))
	})}
	go func() { _ = r.srv.Serve(ln) }()
	t.Cleanup(func() { _ = r.srv.Close() })
	return r
}

type exchangeKey struct{}

func contextWith(req *http.Request, ex *exchange) context.Context {
	return context.WithValue(req.Context(), exchangeKey{}, ex)
}

// snapshot returns the exchanges recorded so far, from index from on.
func (r *recorder) snapshot(from int) []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []exchange
	for _, ex := range r.exchanges[min(from, len(r.exchanges)):] {
		out = append(out, *ex)
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.exchanges)
}

// writeJSONL saves every exchange, one JSON object a line.
func (r *recorder) writeJSONL(path string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, ex := range r.snapshot(0) {
		if err := enc.Encode(ex); err != nil {
			return err
		}
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// capture keeps the first maxRecordedResponse bytes read through it and
// reports them when the body is closed.
type capture struct {
	io.ReadCloser
	buf  bytes.Buffer
	once sync.Once
	done func([]byte)
}

func (c *capture) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if room := maxRecordedResponse - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(n, room)])
	}
	return n, err
}

func (c *capture) Close() error {
	c.once.Do(func() { c.done(c.buf.Bytes()) })
	return c.ReadCloser.Close()
}

func flatten(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = strings.Join(v, ", ")
	}
	return out
}

// egressTrap is an HTTP proxy that refuses everything. Clients get it as
// HTTP(S)_PROXY/ALL_PROXY (loopback excepted), so a call home fails at once
// with 403 instead of waiting on a network this machine does not have, and
// the test sees which hosts a client tried to reach.
type egressTrap struct {
	url string
	srv *http.Server

	mu       sync.Mutex
	attempts []string
}

func startEgressTrap(t *testing.T) *egressTrap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &egressTrap{url: "http://" + ln.Addr().String()}
	e.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		target := req.Host // CONNECT host:port
		if req.Method != http.MethodConnect {
			target = req.URL.String() // a plain-HTTP proxy request carries the absolute URL
		}
		e.mu.Lock()
		e.attempts = append(e.attempts, target)
		e.mu.Unlock()
		http.Error(w, "llmgate agents test: no internet access", http.StatusForbidden)
	})}
	go func() { _ = e.srv.Serve(ln) }()
	t.Cleanup(func() { _ = e.srv.Close() })
	return e
}

// hosts returns the distinct targets tried so far, sorted.
func (e *egressTrap) hosts() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, a := range e.attempts {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// proxyEnv points every proxy variable a client may read at the trap and
// exempts loopback, where the gateway is.
func (e *egressTrap) proxyEnv() []string {
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env = append(env, k+"="+e.url, strings.ToLower(k)+"="+e.url)
	}
	const loopback = "127.0.0.1,localhost,::1"
	return append(env, "NO_PROXY="+loopback, "no_proxy="+loopback)
}

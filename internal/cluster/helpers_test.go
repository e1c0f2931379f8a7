package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"llmgate/internal/testenv"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is a fake OpenAI-compatible backend that reports fixed usage and
// records how many requests it held at once.
type upstream struct {
	*httptest.Server
	delay             time.Duration
	promptTokens      int
	inflight, maxSeen atomic.Int64
	served            atomic.Int64
}

func newUpstream(t *testing.T, delay time.Duration, promptTokens int) *upstream {
	u := &upstream{delay: delay, promptTokens: promptTokens}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inflight.Add(1)
		defer u.inflight.Add(-1)
		for {
			m := u.maxSeen.Load()
			if n <= m || u.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		var req struct {
			Model     string `json:"model"`
			MaxTokens int    `json:"max_tokens"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		time.Sleep(u.delay) // the subject: an upstream that takes this long to answer
		u.served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			req.Model, u.promptTokens, req.MaxTokens, u.promptTokens+req.MaxTokens)
	}))
	t.Cleanup(u.Close)
	return u
}

// proxy is a TCP proxy the test can cut and restore, to make the database
// unreachable without touching the shared server.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close(); c.Close() }()
			go func() { _, _ = io.Copy(c, up); up.Close(); c.Close() }()
		}
	}()
}

// Cut closes the listener and every connection: the database is gone.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Restore listens again on the same address.
func (p *proxy) Restore() {
	var ln net.Listener
	var err error
	if _, ok := testenv.Poll(time.Second, func() bool { ln, err = net.Listen("tcp", p.addr); return err == nil }); !ok {
		p.t.Fatalf("proxy cannot listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

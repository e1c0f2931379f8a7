package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// closingServer answers like llama.cpp's llama-server: each streamed answer
// says keep-alive, and the connection is then closed. With closeOnReuse it
// instead keeps the connection open and closes it, unanswered, when the
// next request arrives on it, so the client meets a dead pooled connection
// every time (llama-server's race, made deterministic).
type closingServer struct {
	ln           net.Listener
	closeOnReuse bool
	answered     atomic.Int64
	refused      atomic.Int64
	wg           sync.WaitGroup
}

func startClosingServer(t *testing.T, closeOnReuse bool) *closingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &closingServer{ln: ln, closeOnReuse: closeOnReuse}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *closingServer) URL() string { return "http://" + s.ln.Addr().String() + "/v1" }

func (s *closingServer) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if req.Method == http.MethodGet {
			body := `{"object":"list","data":[{"id":"m","object":"model","owned_by":"llamacpp"}]}`
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			return
		}
		if n > 0 {
			s.refused.Add(1)
			return // closed before anything was answered
		}
		w := bufio.NewWriter(c)
		fmt.Fprint(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk := func(s string) { fmt.Fprintf(w, "%x\r\n%s\r\n", len(s), s) }
		for i := 0; i < 3; i++ {
			chunk(`data: {"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}` + "\n\n")
		}
		chunk(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
		chunk(`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}` + "\n\n")
		chunk("data: [DONE]\n\n")
		fmt.Fprint(w, "0\r\n\r\n")
		if w.Flush() != nil {
			return
		}
		s.answered.Add(1)
		if !s.closeOnReuse {
			return // llama-server: closed right after the stream
		}
	}
}

func TestBench_ResendsOnAFreshConnectionWhenTheServerClosedAReusedOne(t *testing.T) {
	for _, tc := range []struct {
		name         string
		closeOnReuse bool
	}{{"closed when reused", true}, {"closed after each stream", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startClosingServer(t, tc.closeOnReuse)
			targets, err := TargetsFromFlags(srv.URL(), "", []string{"m"}, "chat", func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := Run(ctx, Options{Targets: targets, Concurrencies: []int{4}, NumRequests: 16, Warmup: 0, Burstiness: 1,
				Workload: Workload{InputLen: 8, OutputLen: 3}, Request: RequestOptions{Timeout: 10 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			c := rep.Results[0]
			if c.Failed != 0 || c.Completed != 16 {
				t.Fatalf("completed %d, failed %d: %v", c.Completed, c.Failed, c.ErrorSamples)
			}
			if tc.closeOnReuse {
				// Every refused reuse was resent once, and counted.
				if refused := srv.refused.Load(); refused == 0 || int64(c.ConnRetries) != refused {
					t.Errorf("conn_retries %d, server refused %d reused connections; want one resend each", c.ConnRetries, refused)
				}
				var out strings.Builder
				if err := WriteTable(&out, rep); err != nil || !strings.Contains(out.String(), "resent on a fresh connection") {
					t.Errorf("the table does not report the resends: %v\n%s", err, out.String())
				}
			}
			t.Logf("completed %d, conn_retries %d, connections refused on reuse %d", c.Completed, c.ConnRetries, srv.refused.Load())
		})
	}
}

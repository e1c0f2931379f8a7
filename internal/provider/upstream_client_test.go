package provider

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
)

// upstream_client: stdlib makes a plain-http backend use net/http's
// Transport; builtin (and unset) the lean HTTP/1.1 client. Both serve a
// request and a stream whose events arrive one by one.
func TestUpstreamClientSetting_BothServeRequestAndStream(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"echo":%s}`, body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 2; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select { // the next event only once the client has seen this one
			case <-next:
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	for _, kind := range []string{"", config.UpstreamClientBuiltin, config.UpstreamClientStdlib} {
		t.Run("upstream_client="+kind, func(t *testing.T) {
			b := NewBackend(&config.Backend{Name: "up", BaseURL: srv.URL + "/v1", UpstreamClient: kind})
			defer b.Close()
			if (b.h1 == nil) != (kind == config.UpstreamClientStdlib) {
				t.Fatalf("upstream_client %q: builtin client in use = %v", kind, b.h1 != nil)
			}
			resp, err := post(t, b, context.Background(), "/chat/completions", `{"n":1}`)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); resp.StatusCode != 200 || got != `{"echo":{"n":1}}` {
				t.Fatalf("request: %d %q", resp.StatusCode, got)
			}
			resp, err = post(t, b, context.Background(), "/chat/completions", `{"stream":true}`)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for i := 0; i < 2; i++ {
				line, err := br.ReadString('\n')
				if err != nil || line != fmt.Sprintf("data: %d\n", i) {
					t.Fatalf("event %d: %q %v", i, line, err)
				}
				br.ReadString('\n')
				next <- struct{}{}
			}
			if rest, _ := io.ReadAll(br); string(rest) != "data: [DONE]\n\n" {
				t.Fatalf("end of stream: %q", rest)
			}
		})
	}
}

// A backend whose headers never end is cut off at net/http's Transport
// limit (10 MiB) rather than filling the gateway's memory.
func TestH1_EndlessResponseHeadersAreRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for i := 0; i < 20<<10; i++ { // 20 MB of header fields
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	}()
	b := testBackend(t, "http://"+ln.Addr().String()+"/v1", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = post(t, b, ctx, "/chat/completions", `{}`)
	if err == nil || !strings.Contains(err.Error(), "headers exceeded") {
		t.Fatalf("err = %v, want the header limit", err)
	}
}

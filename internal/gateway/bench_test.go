package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/ledger"
)

const fixedAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, this is a fixed answer."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"total_tokens":20,"completion_tokens":9}}`

// benchGateway starts a gateway (auth and ledger on) in front of a
// fixed-answer upstream.
func benchGateway(b *testing.B) (*Gateway, *http.Client) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.Contains(r.Header.Get("Accept"), "event-stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 16; i++ {
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
			}
			fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":16,\"total_tokens\":27}}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, fixedAnswer)
	}))
	b.Cleanup(up.Close)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %s}\nmodels:\n  m: {backend: up}\n", up.URL)), "bench")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Database = filepath.Join(b.TempDir(), "bench.db")
	cfg.Listen = "127.0.0.1:0"
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 50 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close(context.Background()) })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return g, client
}

func benchProxy(b *testing.B, stream bool) {
	benchPost(b, "/chat/completions", chatBody("m", stream, ""))
}

// BenchmarkProxy_MessagesStream measures the same 16-chunk stream asked for
// in Anthropic's Messages API (Claude Code on an OpenAI-dialect engine):
// the request and every event translated.
func BenchmarkProxy_MessagesStream(b *testing.B) {
	benchPost(b, "/messages", `{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Say hello to the gateway"}]}`)
}

func benchPost(b *testing.B, path, reqBody string) {
	g, client := benchGateway(b)
	body := []byte(reqBody)
	url := g.URL() + path
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testMaster)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

// BenchmarkProxy_NonStream measures a full request through the gateway
// (client, gateway and upstream in one process).
func BenchmarkProxy_NonStream(b *testing.B) { benchProxy(b, false) }

// BenchmarkProxy_Stream measures a 16-chunk stream through the gateway.
func BenchmarkProxy_Stream(b *testing.B) { benchProxy(b, true) }

package sim

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/sse"
)

// BenchmarkStreams measures what the simulator itself costs while serving
// many concurrent streams: process CPU time per generated token and the
// mean inter-token latency clients see against the modelled one. Clients
// run in the same process, so the CPU figure is an upper bound.
//
//	go test ./internal/sim -run '^$' -bench Streams -benchtime 1x
func BenchmarkStreams(b *testing.B) {
	for _, streams := range []int{100, 300} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			mc := fastModel()
			mc.MaxNumSeqs = streams
			mc.MaxNumBatchedTokens = 0
			mc.DecodeBase, mc.DecodePerSeq = 20*time.Millisecond, 0
			s, err := New(Config{Models: []ModelConfig{mc}, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			hs := httptest.NewServer(s)
			defer func() { hs.Close(); s.Close() }()
			tr := &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}
			client := &http.Client{Transport: tr}
			const tokens = 100
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens)
			for range b.N {
				var ru0, ru1 syscall.Rusage
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
				start := time.Now()
				var mu sync.Mutex
				var itlSum time.Duration
				var wg sync.WaitGroup
				for range streams {
					wg.Add(1)
					go func() {
						defer wg.Done()
						resp, err := client.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
						if err != nil {
							b.Error(err)
							return
						}
						defer resp.Body.Close()
						r := sse.NewReader(resp.Body, 0)
						var first, last time.Time
						n := 0
						for {
							ev, err := r.Next()
							if err != nil || ev.Done() {
								break
							}
							now := time.Now()
							if n == 1 {
								first = now
							}
							last = now
							n++
						}
						if n != tokens+1 {
							b.Errorf("%d events", n)
							return
						}
						mu.Lock()
						itlSum += last.Sub(first) / time.Duration(tokens-1)
						mu.Unlock()
					}()
				}
				wg.Wait()
				wall := time.Since(start)
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
				cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
				total := streams * tokens
				b.ReportMetric(float64(total)/wall.Seconds(), "tokens/s")
				b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
				b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu-µs/token")
				b.ReportMetric(float64((itlSum/time.Duration(streams)).Microseconds())/1000, "itl-ms")
			}
		})
	}
}

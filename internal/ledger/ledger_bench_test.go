package ledger

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/usage"
)

type nullWriter struct{ n atomic.Int64 }

func (w *nullWriter) InsertUsage(_ context.Context, recs []usage.Record) error {
	w.n.Add(int64(len(recs)))
	return nil
}

func benchRecord() usage.Record {
	return usage.Record{ClientRequestID: "0c6f4a8e-5f3b-4a55-9a57-3f0f6f1b2c3d", Time: time.Now(), KeyID: "key_0123456789ab", Model: "qwen2.5-7b-instruct",
		Backend: "vllm", UpstreamModel: "Qwen/Qwen2.5-7B-Instruct", Endpoint: "chat", Status: 200, PromptTokens: 812, CompletionTokens: 211,
		TTFT: 41 * time.Millisecond, Latency: 900 * time.Millisecond, Stream: true, CostUSD: 0.000412}
}

// BenchmarkLedgerAdd measures Add on the request path: "memory" queues
// only (no spool); "spool" appends to the journal before returning (the
// gateway's setting); "spool-fsync" also fsyncs each group. The writer
// stores nothing, so this is Add's own cost. Parallel runs report the
// latency of single Adds (every 8th sampled) as p50-ns and p99-ns.
func BenchmarkLedgerAdd(b *testing.B) {
	for _, mode := range []string{"memory", "spool", "spool-fsync"} {
		b.Run(mode+"/serial", func(b *testing.B) { benchAdd(b, &nullWriter{}, mode, false) })
		b.Run(mode+"/parallel", func(b *testing.B) { benchAdd(b, &nullWriter{}, mode, true) })
	}
}

func benchAdd(b *testing.B, w usage.Writer, mode string, parallel bool) {
	opt := Options{}
	if mode != "memory" {
		sp, err := OpenSpool(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		opt.Spool, opt.SpoolSync = sp, mode == "spool-fsync"
	}
	l := NewLedger(w, opt, quiet)
	defer l.Close(context.Background())
	r := benchRecord()
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for i := 0; i < b.N; i++ {
			if err := l.Add(r); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8) // 16 goroutines on 2 CPUs: requests finishing together
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for i := 0; pb.Next(); i++ {
			if i%8 != 0 {
				if err := l.Add(r); err != nil {
					b.Error(err)
					return
				}
				continue
			}
			t0 := time.Now()
			if err := l.Add(r); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
}

// BenchmarkLedgerAddPaced is Add as a gateway calls it: 16 request
// goroutines, each adding a record every ~2ms (about 7,000 records/s in
// all), so the latency of single Adds shows rather than a saturated lock.
// Run with a fixed count, e.g. -benchtime 24000x; it reports the latency
// quantiles of every Add.
func BenchmarkLedgerAddPaced(b *testing.B) {
	for _, mode := range []string{"memory", "spool"} {
		b.Run(mode, func(b *testing.B) {
			opt := Options{}
			if mode == "spool" {
				sp, err := OpenSpool(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				opt.Spool = sp
			}
			l := NewLedger(&nullWriter{}, opt, quiet)
			defer l.Close(context.Background())
			r := benchRecord()
			const workers = 16
			lat := make([][]time.Duration, workers)
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := range workers {
				n := b.N / workers
				if g < b.N%workers {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < n; i++ {
						time.Sleep(2 * time.Millisecond) // the pace of a gateway's Adds (see above)
						t0 := time.Now()
						if err := l.Add(r); err != nil {
							b.Error(err)
							return
						}
						lat[g] = append(lat[g], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			if len(all) == 0 {
				return
			}
			slices.Sort(all)
			q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) }
			b.ReportMetric(q(0.5), "p50-ns")
			b.ReportMetric(q(0.99), "p99-ns")
			b.ReportMetric(q(0.999), "p999-ns")
		})
	}
}

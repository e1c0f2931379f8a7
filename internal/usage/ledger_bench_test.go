package usage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

type nullWriter struct{ n atomic.Int64 }

func (w *nullWriter) InsertUsage(_ context.Context, recs []Record) error {
	w.n.Add(int64(len(recs)))
	return nil
}

func benchRecord() Record {
	return Record{Time: time.Now(), KeyID: "key_0123456789ab", Model: "qwen2.5-7b-instruct", Backend: "vllm", UpstreamModel: "Qwen/Qwen2.5-7B-Instruct",
		Endpoint: "chat", Status: 200, PromptTokens: 812, CompletionTokens: 211, TTFT: 41 * time.Millisecond, Latency: 900 * time.Millisecond, Stream: true, CostUSD: 0.000412}
}

func BenchmarkLedgerAdd(b *testing.B) {
	for _, spool := range []bool{false, true} {
		name := "memory"
		if spool {
			name = "spool"
		}
		b.Run(name+"/serial", func(b *testing.B) { benchAdd(b, spool, false) })
		b.Run(name+"/parallel", func(b *testing.B) { benchAdd(b, spool, true) })
	}
}

func benchAdd(b *testing.B, spool, parallel bool) {
	opt := Options{}
	if spool {
		sp, err := OpenSpool(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		opt.Spool = sp
	}
	l := NewLedger(&nullWriter{}, opt, quiet)
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
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Add(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

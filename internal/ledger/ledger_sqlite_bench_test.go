package ledger_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"llmgate/internal/ledger"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/usage"
)

// BenchmarkLedgerAddSQLite is Add with the gateway's default database
// writing behind it (its CPU competes with the Adds, as in a gateway):
// throughput of parallel Adds with and without the journal.
func BenchmarkLedgerAddSQLite(b *testing.B) {
	for _, spool := range []bool{false, true} {
		name := "memory"
		if spool {
			name = "spool"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			st, err := sqlite.Open(context.Background(), filepath.Join(dir, "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			opt := ledger.Options{}
			if spool {
				if opt.Spool, err = ledger.OpenSpool(filepath.Join(dir, "spool")); err != nil {
					b.Fatal(err)
				}
			}
			l := ledger.NewLedger(st, opt, quiet)
			r := usage.Record{ClientRequestID: "c", Time: time.Now(), KeyID: "key_0123456789ab", Model: "qwen2.5-7b-instruct", Backend: "vllm",
				Endpoint: "chat", Status: 200, PromptTokens: 812, CompletionTokens: 211, Latency: 900 * time.Millisecond, CostUSD: 0.000412}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := l.Add(r); err != nil {
						b.Error(err)
						return
					}
				}
			})
			// The database must keep up too: Close waits for every record.
			if err := l.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

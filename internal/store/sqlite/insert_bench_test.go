//go:build unix

package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/usage"
)

// BenchmarkInsertUsage is the ledger writer's work per row: batches of
// 1,024 new records into a database that holds some already. cpu-ns/row
// is the process's CPU time (the commit's I/O included) per row.
func BenchmarkInsertUsage(b *testing.B) {
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	batch := func() []usage.Record {
		rs := make([]usage.Record, 1024)
		for i := range rs {
			rs[i] = usage.Record{ID: usage.NewID(), Time: time.Now(), KeyID: fmt.Sprintf("key_%d", i%5), Model: "qwen2.5-7b-instruct",
				Backend: "vllm", Endpoint: "chat", Status: 200, PromptTokens: 812, CompletionTokens: 211, Latency: 900 * time.Millisecond, CostUSD: 0.000412}
		}
		return rs
	}
	for range 20 {
		if err := st.InsertUsage(ctx, batch()); err != nil {
			b.Fatal(err)
		}
	}
	batches := make([][]usage.Record, b.N)
	for i := range batches {
		batches[i] = batch()
	}
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for _, rs := range batches {
		if err := st.InsertUsage(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1024), "ns/row")
	b.ReportMetric(float64(cpu)/float64(b.N*1024), "cpu-ns/row")
}

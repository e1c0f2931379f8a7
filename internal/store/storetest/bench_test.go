package storetest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"llmgate/internal/store/postgres"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/store/storetest"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// synthetic returns n records over the week before end: 10 keys, 4 models,
// 2 backends, latencies spread log-uniformly between 50 ms and 20 s.
func synthetic(n int, end time.Time, prefix string, rng *rand.Rand) []usage.Record {
	out := make([]usage.Record, n)
	span := 7 * 24 * time.Hour
	for i := range out {
		lat := 50 * time.Millisecond * time.Duration(1<<uint(rng.IntN(9)))
		lat += time.Duration(rng.Int64N(int64(lat)))
		out[i] = usage.Record{ID: fmt.Sprintf("%s-%d", prefix, i), Time: end.Add(-time.Duration(rng.Int64N(int64(span)))),
			KeyID: fmt.Sprintf("key_%d", rng.IntN(10)), Model: []string{"qwen", "llama", "gpt", "claude"}[rng.IntN(4)],
			Backend: []string{"vllm", "sglang"}[rng.IntN(2)], Endpoint: "chat", Status: []int{200, 200, 200, 200, 429}[rng.IntN(5)],
			PromptTokens: 100 + rng.IntN(2000), CompletionTokens: rng.IntN(800), Latency: lat, TTFT: lat / 10, CostUSD: rng.Float64() / 1000}
	}
	return out
}

// BenchmarkLedgerInsert_SQLite measures batched ledger writes (1000 records
// per transaction, as a busy ledger batches them), rollups included. "recent"
// batches hold consecutive records, as the ledger writes them; "scattered"
// spreads each batch over a week, the worst case for rollups.
func BenchmarkLedgerInsert_SQLite(b *testing.B) {
	b.Run("recent", func(b *testing.B) { benchInsert(b, false, 1000) })
	b.Run("scattered", func(b *testing.B) { benchInsert(b, true, 1000) })
	// What the ledger writes at 1,000 requests/s: a batch every 50 ms, here
	// of 2 keys on 2 models (4 rollup rows per batch).
	b.Run("steady-50", func(b *testing.B) { benchInsert(b, false, 50) })
}

// BenchmarkLedgerInsert_Postgres is the same on PostgreSQL (multi-row
// INSERT ... ON CONFLICT DO NOTHING RETURNING id).
func BenchmarkLedgerInsert_Postgres(b *testing.B) {
	b.Run("recent", func(b *testing.B) { benchInsertOn(b, openPG(b), false, 1000) })
}

func openPG(b *testing.B) storetest.Store {
	st, err := postgres.Open(context.Background(), testenv.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

func benchInsert(b *testing.B, scattered bool, batch int) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchInsertOn(b, st, scattered, batch)
}

func benchInsertOn(b *testing.B, st storetest.Store, scattered bool, batch int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	recs := synthetic(batch*b.N, time.Now(), "b", rng)
	if !scattered { // 1000 requests per second of traffic
		t0 := time.Now().Add(-time.Duration(b.N) * time.Second)
		for i := range recs {
			recs[i].Time = t0.Add(time.Duration(i) * time.Millisecond)
			if batch < 1000 {
				recs[i].KeyID, recs[i].Model, recs[i].Backend = fmt.Sprintf("key_%d", i%2), []string{"qwen", "llama"}[i/2%2], "vllm"
			}
		}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := st.InsertUsage(ctx, recs[i*batch:(i+1)*batch]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch*b.N)/time.Since(start).Seconds(), "records/s")
}

var (
	millionOnce sync.Once
	millionDB   *sqlite.Store
	millionErr  error
	millionLoad time.Duration
)

// BenchmarkSummary_1M_SQLite summarizes a week of 1,000,000 records by key
// and model, and by day, with rollups.
func BenchmarkSummary_1M_SQLite(b *testing.B) {
	ctx := context.Background()
	millionOnce.Do(func() {
		dir, err := mkTemp()
		if err != nil {
			millionErr = err
			return
		}
		millionDB, millionErr = sqlite.Open(ctx, filepath.Join(dir, "million.db"))
		if millionErr != nil {
			return
		}
		rng := rand.New(rand.NewPCG(3, 4))
		all := synthetic(1_000_000, time.Now(), "m", rng)
		// The ledger writes records in time order.
		sort.Slice(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
		start := time.Now()
		for i := 0; i < len(all) && millionErr == nil; i += 5000 {
			millionErr = millionDB.InsertUsage(ctx, all[i:i+5000])
		}
		millionLoad = time.Since(start)
	})
	if millionErr != nil {
		b.Fatal(millionErr)
	}
	b.Logf("loaded 1,000,000 records in %v (%.0f records/s)", millionLoad.Round(time.Millisecond), 1e6/millionLoad.Seconds())
	for _, by := range [][]string{{"key", "model"}, {"day"}, {"backend"}} {
		b.Run(fmt.Sprint(by), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				rows, err := millionDB.Summary(ctx, usage.Filter{Since: time.Now().Add(-8 * 24 * time.Hour), GroupBy: by})
				if err != nil {
					b.Fatal(err)
				}
				var n int64
				for _, r := range rows {
					n += r.Requests
				}
				if n != 1_000_000 {
					b.Fatalf("summary counts %d records, want 1000000", n)
				}
			}
		})
	}
}

package limit_test

import (
	"context"
	"testing"
	"time"

	"llmgate/internal/limit"
)

// benchReq is a typical request: key and model scopes with RPM, TPM,
// concurrency and a budget, limits high enough never to refuse.
func benchReq() limit.Request {
	return req(
		limit.Scope{ID: "key:bench", RPM: 1 << 40, TPM: 1 << 50, MaxConc: 1 << 30, BudgetNanos: 1 << 60, BudgetWindow: "all"},
		limit.Scope{ID: "model:bench", RPM: 1 << 40, TPM: 1 << 50, MaxConc: 1 << 30},
	)
}

func benchAcquireRelease(b *testing.B, l limit.Limiter) {
	ctx := context.Background()
	r := benchReq()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, d, err := l.Acquire(ctx, r)
		if err != nil || !d.Allowed {
			b.Fatalf("refused: %+v %v", d, err)
		}
		if err := l.Release(ctx, lease, 10, 5); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemory_AcquireRelease is the in-memory limiter's cost per request.
func BenchmarkMemory_AcquireRelease(b *testing.B) { benchAcquireRelease(b, limit.NewMemory()) }

// BenchmarkMemory_AcquireReleaseParallel measures contention on one key.
func BenchmarkMemory_AcquireReleaseParallel(b *testing.B) {
	l := limit.NewMemory()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		r := benchReq()
		for pb.Next() {
			lease, _, _ := l.Acquire(ctx, r)
			_ = l.Release(ctx, lease, 10, 5)
		}
	})
}

// BenchmarkRedis_Acquire is one round trip (one Lua script) per request.
func BenchmarkRedis_Acquire(b *testing.B) {
	l := newRedis(b, time.Minute)
	ctx := context.Background()
	r := benchReq()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, d, err := l.Acquire(ctx, r)
		if err != nil || !d.Allowed {
			b.Fatalf("refused: %+v %v", d, err)
		}
		b.StopTimer()
		_ = l.Release(ctx, lease, 10, 5)
		b.StartTimer()
	}
}

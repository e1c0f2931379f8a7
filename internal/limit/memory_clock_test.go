package limit_test

import (
	"context"
	"testing"
	"time"

	"llmgate/internal/limit"
)

// TestMemory_RPMRefillsWithTheClock drives the in-memory limiter with a
// clock of its own: exactly the limit passes at once, nothing more until
// time moves, and a sixtieth of the limit per second of it after.
func TestMemory_RPMRefillsWithTheClock(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	l := limit.NewMemoryClock(func() int64 { return now })
	r := req(limit.Scope{ID: "key:clock", RPM: 60}) // 1 per second
	admit := func() int {
		n := 0
		for ; n < 1000; n++ {
			if _, d, _ := l.Acquire(ctx, r); !d.Allowed {
				if d.Limit != limit.LimitRequests || d.RetryAfter <= 0 {
					t.Fatalf("refusal = %+v, want %q with a retry time", d, limit.LimitRequests)
				}
				break
			}
		}
		return n
	}
	if n := admit(); n != 60 {
		t.Fatalf("burst admitted %d, want 60", n)
	}
	if n := admit(); n != 0 {
		t.Fatalf("admitted %d more with the clock stopped, want 0", n)
	}
	now += int64(5 * time.Second)
	if n := admit(); n != 5 {
		t.Fatalf("admitted %d after 5s at 1/s, want 5", n)
	}
	now += int64(time.Hour)
	if n := admit(); n != 60 {
		t.Fatalf("admitted %d after an hour, want the full 60 (the bucket holds no more)", n)
	}
}

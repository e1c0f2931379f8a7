package limit_test

import (
	"context"
	"testing"
	"time"

	"llmgate/internal/limit"
	"llmgate/internal/testenv"
)

// The ledger writes a finished request's record a moment after the
// request released its lease (every 50 ms, in batches), so a Redis that
// restarts just after a burst is rebuilt from a ledger that lacks its end:
// those requests are neither in the ledger nor in flight, and the replica
// that served them must count them itself, or the restart hands them out
// again. So must it count the requests that finish while its resync reads
// the ledger. (The gateway test that ran into this saw 5 requests of a TPM
// 780 model pass right after a restart where none should: the ledger had
// 55 of the 58 it had admitted.)
func TestRedis_RestartRightAfterABurstCountsRequestsTheLedgerHasNotWritten(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		// written of the 60 are in the ledger when the resync reads it;
		// the last duringRead of them finish while it reads.
		written, duringRead int
	}{
		{"the ledger has 40 of 60", 40, 0},
		{"the ledger has none of them", 0, 0},
		{"20 finish while the resync reads the ledger", 40, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			url, prefix := testenv.Redis(t)
			cleanPrefix(t, url, prefix)
			a, _ := replica(t, url, prefix, limit.RedisOptions{Heartbeat: time.Minute}, &ledgerStub{})
			s := limit.Scope{ID: "key:burst", RPM: 60, TPM: 600}
			var inFlight []limit.Lease
			for i := 0; i < 60; i++ {
				l := mustAcquire(t, a, req(s)) // 10 tokens each
				if i >= 60-c.duringRead {
					inFlight = append(inFlight, l)
					continue
				}
				if err := a.Release(ctx, l, 10, 0); err != nil {
					t.Fatal(err)
				}
			}
			rates := &ratesStub{}
			if c.written > 0 {
				rates.set(limit.RateSeed{ScopeID: s.ID, RPM: s.RPM, TPM: s.TPM,
					Uses: []limit.Use{{At: time.Now(), Requests: int64(c.written), Tokens: 10 * int64(c.written)}}})
			}
			a.SetRates(func(ctx context.Context, since time.Time) ([]limit.RateSeed, error) {
				seeds, err := rates.read(ctx, since)
				for _, l := range inFlight { // they finish as the ledger answers
					if err := a.Release(ctx, l, 10, 0); err != nil {
						t.Error(err)
					}
				}
				inFlight = nil
				return seeds, err
			})

			dropPrefix(t, a, prefix) // Redis restarts empty
			start := time.Now()
			n := 0
			for i := 0; i < 30; i++ {
				if _, d, err := a.Acquire(ctx, req(s)); err == nil && d.Allowed {
					n++
				}
			}
			if rates.reads == 0 {
				t.Fatal("the resync did not read the ledger's last minute")
			}
			// A bucket of 60 refills one request a second.
			if refilled := int(time.Since(start).Seconds()); n > refilled+1 {
				t.Fatalf("%d of 30 admitted right after the restart, want at most %d: the 60 that finished used the minute, the ledger had %d of them",
					n, refilled+1, c.written)
			}
		})
	}
}

package limit

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The replayed level is never above what the bucket can hold after those
// uses, and equals it for the patterns that matter: idle, a burst just
// now, a burst long enough ago, steady use at the refill rate.
func TestReplayLevel_IsALowerBoundOfTheBucket(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ago := func(s float64) time.Time { return now.Add(-time.Duration(s * float64(time.Second))) }
	reqs := func(u Use) int64 { return u.Requests }
	steady := make([]Use, 0, 60)
	for i := 0; i < 60; i++ {
		steady = append(steady, Use{At: ago(float64(i)), Requests: 1})
	}
	for _, c := range []struct {
		name     string
		uses     []Use
		inflight int64
		want     float64
	}{
		{"idle for a minute: full", nil, 0, 60},
		{"60 in the last second: empty", []Use{{At: now, Requests: 60}}, 0, 0},
		{"60 thirty seconds ago: half refilled", []Use{{At: ago(30), Requests: 60}}, 0, 30},
		{"60 a minute ago: full again", []Use{{At: ago(60), Requests: 60}}, 0, 60},
		{"steady at the refill rate: empty", steady, 0, 0},
		{"20 ago, 30 in flight", []Use{{At: ago(0), Requests: 20}}, 30, 10},
		{"more in flight than the limit: empty, not negative", nil, 90, 0},
		{"a use from the future counts now", []Use{{At: now.Add(time.Hour), Requests: 60}}, 0, 0},
	} {
		got := replayLevel(60, now, c.uses, reqs, c.inflight)
		if math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s: level %.3f, want %.3f", c.name, got, c.want)
		}
	}
}

// What finished lately is kept for the resync that needs it: every
// request that finished since its window began (holdFor before it read the
// ledger), at most holdFor more, whatever the times of the finishes and of
// the read, and the slot boundaries between them.
func TestFinishedRequests_AreAllCountedByTheResyncThatNeedsThem(t *testing.T) {
	h := int64(holdFor)
	t0 := time.Unix(1_000_000, 0).UnixNano()
	rng := rand.New(rand.NewPCG(24, 1))
	for run := 0; run < 2000; run++ {
		// Finishes over 6 holdFor, the ledger read (and the pin) at read,
		// the rebuild at the last finish or later.
		var f inflightRate
		n := 1 + rng.IntN(40)
		at := make([]int64, n)
		for i := range at {
			at[i] = t0 + rng.Int64N(6*h)
		}
		slices.Sort(at)
		read := t0 + rng.Int64N(6*h)
		from := read - h
		for _, a := range at {
			keep := int64(0)
			if a >= read {
				keep = from
			}
			f.finish(a, keep, 10)
		}
		want, most := int64(0), int64(0)
		for _, a := range at {
			if a >= from {
				want++
			}
			if a >= from-h {
				most++
			}
		}
		got := f.finishedSince(from)
		if got.requests < want || got.requests > most || got.tokens != 10*got.requests {
			t.Fatalf("finishes at %v (ns after t0), read at %d: %+v counted, want %d to %d requests of 10 tokens",
				offsets(at, t0), read-t0, got, want, most)
		}
	}
}

func offsets(at []int64, t0 int64) []int64 {
	out := make([]int64, len(at))
	for i, a := range at {
		out[i] = a - t0
	}
	return out
}

// The rebuild counts the requests that finished just before the resync
// read a ledger that had not written them yet, and only the ledger's
// figures for those that finished long enough before. The first case is
// the gateway test that failed: a TPM 780 model admitted 58 requests of 13
// tokens within 65 ms, a restart followed at once, the ledger had 55 of
// them, and the bucket was rebuilt at 65 tokens where the live one held
// 26 - 5 requests of 30 estimated tokens passed.
func TestRateItems_CountWhatFinishedButIsNotInTheLedger(t *testing.T) {
	now := time.Unix(1_000_000, 500_000_000) // the resync reads the ledger at now
	ms := func(d int) time.Time { return now.Add(time.Duration(d) * time.Millisecond) }
	model := Scope{ID: "model:tpm", TPM: 780}
	key := Scope{ID: "key:rpm60", RPM: 60}
	for _, c := range []struct {
		name      string
		scope     Scope
		finished  []time.Time // this replica's requests, 13 tokens each
		inFlight  int         // 30 tokens estimated each
		ledger    []Use
		want      float64 // the rebuilt level of the scope's bucket
		wantLocal bool    // the scope is rebuilt without a ledger seed
	}{
		{name: "58 finished in the last 65 ms, 55 in the ledger", scope: model,
			finished: repeat(58, ms(-70), ms(-5)), ledger: []Use{{At: ms(500), Requests: 55, Tokens: 715}}, want: 0},
		{name: "58 finished 2 s before, all in the ledger", scope: model,
			finished: repeat(58, ms(-2070), ms(-2005)), ledger: []Use{{At: ms(-1500), Requests: 58, Tokens: 754}},
			want: 26}, // a lower bound: the replay starts empty a minute before now
		{name: "the ledger has none of them yet", scope: key,
			finished: repeat(40, ms(-300), ms(-100)), inFlight: 20, want: 0, wantLocal: true},
		{name: "finished 2 s ago and more: the ledger's", scope: key,
			finished: repeat(40, ms(-3000), ms(-2100)), ledger: []Use{{At: ms(-2000), Requests: 40}}, want: 20},
	} {
		r := &Redis{prefix: "p:", inflight: map[string]*inflightRate{}}
		scopes := [MaxScopes]Scope{c.scope}
		for range len(c.finished) + c.inFlight {
			r.trackAdmit(&scopes, 1, 30)
		}
		for _, at := range c.finished {
			r.trackDone(&scopes, 1, 30, 13, at.UnixNano())
		}
		var seeds []RateSeed
		if c.ledger != nil {
			seeds = []RateSeed{{ScopeID: c.scope.ID, RPM: c.scope.RPM, TPM: c.scope.TPM, Uses: c.ledger}}
		}
		items := r.rateItems(seeds, now, now.Add(-holdFor).UnixNano(), 0)
		if len(items) != 1 || items[0].key != "p:rate:"+c.scope.ID {
			t.Fatalf("%s: items %+v, want one for %s", c.name, items, c.scope.ID)
		}
		got := items[0].tl
		if c.scope.RPM > 0 {
			got = items[0].rl
		}
		if math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s: rebuilt at %.3f, want %.3f", c.name, got, c.want)
		}
	}
}

// TestRateItems_LeaveOutTheSharesHeld: with replicas spending from their
// local buckets (missing after a Redis restart, or this one still waiting),
// the shared buckets are rebuilt without their shares, each a limit's 1/n
// rounded up, and never below empty.
func TestRateItems_LeaveOutTheSharesHeld(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	seeds := []RateSeed{{ScopeID: "key:a", RPM: 61, TPM: 600}}
	for _, c := range []struct {
		replicas, hold int64
		rpm, tpm       float64
	}{{2, 0, 61, 600}, {2, 1, 30, 300}, {3, 1, 40, 400}, {3, 2, 19, 200}, {2, 2, 0, 0}, {2, 5, 0, 0}} {
		r := &Redis{prefix: "p:", inflight: map[string]*inflightRate{}, fixedN: c.replicas}
		items := r.rateItems(seeds, now, now.Add(-holdFor).UnixNano(), c.hold)
		if len(items) != 1 || math.Abs(items[0].rl-c.rpm) > 1e-6 || math.Abs(items[0].tl-c.tpm) > 1e-6 {
			t.Errorf("%d replicas, %d shares held: %+v, want RPM bucket at %g, TPM at %g", c.replicas, c.hold, items, c.rpm, c.tpm)
		}
	}
}

// repeat returns n times spread evenly over [from, to].
func repeat(n int, from, to time.Time) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = from.Add(to.Sub(from) * time.Duration(i) / time.Duration(max(1, n-1)))
	}
	return out
}

package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/testenv"
)

// Redis restarts empty mid-minute (here: this test's keys are deleted,
// the shared Redis stays up): the RPM and TPM windows are re-seeded from
// the ledger's last minute, so a key or model that used its minute gets no
// fresh one. A token bucket admits its limit at once and then refills at
// limit/60 per second, so after the restart only what refilled meanwhile
// (plus 2) may pass. (The issue measured 138 of RPM 60 over 20 s with a
// restart, 79 without: the buckets started full again.)
//
// Twice: at once after the burst, when the ledger may not have written its
// end yet (it writes every few milliseconds: the limiter counts what it
// finished itself), and once the ledger has every record and the limiter
// no longer counts the requests it finished, so that the minute is known
// from the ledger alone.
func TestRateLimits_RedisRestartedEmptyReseedsTheMinuteFromTheLedger(t *testing.T) {
	for _, restart := range []struct {
		name       string
		ledgerOnly bool
	}{
		{"at once", false},
		{"once only the ledger has the minute", true},
	} {
		t.Run(restart.name, func(t *testing.T) { restartRedisEmpty(t, restart.ledgerOnly) })
	}
}

func restartRedisEmpty(t *testing.T, ledgerOnly bool) {
	url, prefix := testenv.Redis(t)
	e := startEnv(t, func(c *config.Config) {
		c.Redis, c.RedisPrefix = url, prefix
		c.Models["tpm"] = &config.Model{Backend: "vllm", TPM: 780}
	})
	r, ok := e.g.Admission().Limiter().(*limit.Redis)
	if !ok {
		t.Fatalf("limiter is %T, want Redis", e.g.Admission().Limiter())
	}
	ctx := context.Background()
	flush := func() {
		if ks, _ := r.Client().Keys(ctx, prefix+"*").Result(); len(ks) > 0 {
			r.Client().Del(ctx, ks...)
		}
	}
	t.Cleanup(flush)

	type rateCase struct {
		name, model string
		key         keys.Key
		limit       int // requests the bucket holds
		extra       string

		secret                string
		start                 time.Time
		sent, admitted, first int
	}
	cases := []*rateCase{
		{name: "RPM 60 key", model: "qwen", key: keys.Key{Name: "rpm60", RPM: 60}, limit: 60},
		// The backend reports 13 tokens a request: 780 TPM holds 60 of
		// them (fewer pass at once, since admission reserves the
		// request's estimate first).
		{name: "TPM 780 model", model: "tpm", key: keys.Key{Name: "tpm-user"}, limit: 60, extra: `,"max_tokens":2`},
	}
	// send sends n requests, or until the first refusal.
	send := func(c *rateCase, n int, untilRefused bool) {
		for i := 0; i < n; i++ {
			res := e.do("POST", "/v1/chat/completions", c.secret, chatBody(c.model, false, c.extra))
			c.sent++
			switch res.status {
			case http.StatusOK:
				c.admitted++
			case http.StatusTooManyRequests:
				if untilRefused {
					return
				}
			default:
				t.Fatalf("%s: status %d: %s", c.name, res.status, res.body)
			}
		}
	}
	sent := 0
	for i, c := range cases {
		c.secret = e.newKey(c.key)
		c.start = time.Now()
		// At once, the last case restarts Redis right after the request
		// that found its bucket empty: the records of those admitted just
		// before are still on their way to the ledger.
		send(c, c.limit+10, !ledgerOnly && i == len(cases)-1)
		c.first = c.admitted
		sent += c.sent
	}
	if ledgerOnly {
		e.records(sent) // the ledger has the minute (refusals too)
		time.Sleep(limit.FinishedCountedFor + 100*time.Millisecond)
	}
	written := len(e.records(0))
	flush() // Redis restarted empty
	for _, c := range cases {
		send(c, c.limit+10, false)
	}
	for _, c := range cases {
		took := time.Since(c.start)
		refilled := int(took.Seconds() * float64(c.limit) / 60)
		after := c.admitted - c.first
		t.Logf("%s: %d admitted before the restart, %d after it, %d sent in %v; the ledger had %d of %d records at the restart",
			c.name, c.first, after, c.sent, took.Round(time.Millisecond), written, sent)
		if after > refilled+2 {
			t.Errorf("%s: %d admitted after a Redis restart within %v, want at most %d (what refilled, plus 2): the restart handed out a fresh minute",
				c.name, after, took.Round(time.Millisecond), refilled+2)
		}
		if c.first < c.limit*2/3 {
			t.Errorf("%s: only %d admitted before the restart: the limit itself misbehaves", c.name, c.first)
		}
	}
}

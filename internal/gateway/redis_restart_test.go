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
func TestRateLimits_RedisRestartedEmptyReseedsTheMinuteFromTheLedger(t *testing.T) {
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

	for _, c := range []struct {
		name, model string
		key         keys.Key
		limit       int // requests the bucket holds
		extra       string
	}{
		{"RPM 60 key", "qwen", keys.Key{Name: "rpm60", RPM: 60}, 60, ""},
		// The backend reports 13 tokens a request: 780 TPM holds 60 of
		// them (fewer pass at once, since admission reserves the
		// request's estimate first).
		{"TPM 780 model", "tpm", keys.Key{Name: "tpm-user"}, 60, `,"max_tokens":2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			secret := e.newKey(c.key)
			before := len(e.records(0))
			start := time.Now()
			admitted, sent := 0, 0
			send := func(n int) {
				for i := 0; i < n; i++ {
					res := e.do("POST", "/v1/chat/completions", secret, chatBody(c.model, false, c.extra))
					sent++
					switch res.status {
					case http.StatusOK:
						admitted++
					case http.StatusTooManyRequests:
					default:
						t.Fatalf("status %d: %s", res.status, res.body)
					}
				}
			}
			send(c.limit + 10)
			first := admitted
			e.records(before + sent) // the ledger has the minute
			flush()                  // Redis restarted empty
			send(c.limit + 10)
			took := time.Since(start)
			refilled := int(took.Seconds() * float64(c.limit) / 60)
			t.Logf("%s: %d admitted before the restart, %d after it, %d sent in %v", c.name, first, admitted-first, sent, took.Round(time.Millisecond))
			if after := admitted - first; after > refilled+2 {
				t.Fatalf("%d admitted after a Redis restart within %v, want at most %d (what refilled, plus 2): the restart handed out a fresh minute",
					after, took.Round(time.Millisecond), refilled+2)
			}
			if first < c.limit*2/3 {
				t.Fatalf("only %d admitted before the restart: the limit itself misbehaves", first)
			}
		})
	}
}

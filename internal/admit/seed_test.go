package admit_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"llmgate/internal/admit"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/usage"
)

type keyList []*keys.Key

func (k keyList) ListKeys(context.Context) ([]*keys.Key, error) { return k, nil }

type useRows []usage.SecondUse

func (u useRows) UseSince(context.Context, time.Time) ([]usage.SecondUse, error) { return u, nil }

// The ledger's last minute becomes one seed per rate-limited scope: a
// limited key's requests on every model, and a limited model's requests
// by every key but the master key (which no limit applies to).
func TestRateSeeds_OnePerLimitedScopeFromTheLedgersLastMinute(t *testing.T) {
	a := admit.New(admit.Options{Limiter: limit.NewMemory(), Models: map[string]admit.ModelPolicy{
		"busy": {RPM: 100, TPM: 5000}, "free": {},
	}})
	ks := keyList{{ID: "key_a", RPM: 10}, {ID: "key_b"}}
	rows := useRows{
		{KeyID: "key_a", Model: "busy", Second: 100, Requests: 2, Tokens: 20},
		{KeyID: "key_a", Model: "free", Second: 101, Requests: 1, Tokens: 5},
		{KeyID: "key_b", Model: "busy", Second: 101, Requests: 3, Tokens: 30},
		{KeyID: "master", Model: "busy", Second: 101, Requests: 50, Tokens: 999},
	}
	seeds, err := a.RateSeeds(context.Background(), ks, rows, time.Unix(50, 0))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i].ScopeID < seeds[j].ScopeID })
	got := fmt.Sprint(seeds)
	want := fmt.Sprint([]limit.RateSeed{
		{ScopeID: "key:key_a", RPM: 10, Uses: []limit.Use{{At: time.Unix(101, 0), Requests: 2, Tokens: 20}, {At: time.Unix(102, 0), Requests: 1, Tokens: 5}}},
		{ScopeID: "model:busy", RPM: 100, TPM: 5000, Uses: []limit.Use{{At: time.Unix(101, 0), Requests: 2, Tokens: 20}, {At: time.Unix(102, 0), Requests: 3, Tokens: 30}}},
	})
	if got != want {
		t.Fatalf("seeds\n got %s\nwant %s", got, want)
	}
}

// A request a fallback model served took the requested model's limits at
// admission and the fallback's when it reached it: a rebuilt bucket of
// each counts it, as the live ones did. (Before records named the model
// that served, the fallback's bucket came back without them.)
func TestRateSeeds_AFallbackThatServedCountsInItsOwnScope(t *testing.T) {
	a := admit.New(admit.Options{Limiter: limit.NewMemory(), Models: map[string]admit.ModelPolicy{
		"local": {RPM: 10}, "cloud": {RPM: 4, TPM: 100}, "open": {},
	}})
	rows := useRows{
		{KeyID: "key_b", Model: "local", Second: 100, Requests: 1, Tokens: 7},
		{KeyID: "key_b", Model: "local", ServedModel: "cloud", Second: 100, Requests: 2, Tokens: 40},
		{KeyID: "key_b", Model: "open", ServedModel: "cloud", Second: 101, Requests: 1, Tokens: 9},
		{KeyID: "master", Model: "local", ServedModel: "cloud", Second: 101, Requests: 9, Tokens: 99},
	}
	seeds, err := a.RateSeeds(context.Background(), keyList{{ID: "key_b"}}, rows, time.Unix(50, 0))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i].ScopeID < seeds[j].ScopeID })
	got := fmt.Sprint(seeds)
	want := fmt.Sprint([]limit.RateSeed{
		{ScopeID: "model:cloud", RPM: 4, TPM: 100, Uses: []limit.Use{{At: time.Unix(101, 0), Requests: 2, Tokens: 40}, {At: time.Unix(102, 0), Requests: 1, Tokens: 9}}},
		{ScopeID: "model:local", RPM: 10, Uses: []limit.Use{{At: time.Unix(101, 0), Requests: 1, Tokens: 7}, {At: time.Unix(101, 0), Requests: 2, Tokens: 40}}},
	})
	if got != want {
		t.Fatalf("seeds\n got %s\nwant %s", got, want)
	}
}

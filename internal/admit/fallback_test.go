package admit_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"llmgate/internal/admit"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/policy"
	"llmgate/internal/usage"
)

// A free local model ("local", no prices, e.g. vLLM) that falls back to a
// priced cloud model ("cloud"): the request may be served, and must then be
// paid for, at cloud's prices.
var fallbackPrices = map[string]admit.ModelPolicy{
	"local": {},
	"cloud": {InputPrice: 3, OutputPrice: 15},
	"cheap": {InputPrice: 0.5, OutputPrice: 1},
}

func fallbackAdmission() (*admit.Admission, *limit.Memory) {
	lim := limit.NewMemory()
	return admit.New(admit.Options{Limiter: lim, Models: fallbackPrices}), lim
}

// spent is the key's settled and reserved spend in its budget window.
func spent(t *testing.T, a *admit.Admission, lim *limit.Memory, k *keys.Key) limit.Spend {
	t.Helper()
	window, _ := a.Window(k.BudgetPeriod, time.Now())
	s, err := lim.Spent(context.Background(), "key:"+k.ID, window)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAdmit_FallbackServedIsPricedAtTheFallbacksPrices: whoever the key,
// the record of a request that the fallback served costs the fallback's
// prices, and a budget is charged that cost; one the requested model
// served costs the requested model's.
func TestAdmit_FallbackServedIsPricedAtTheFallbacksPrices(t *testing.T) {
	const prompt, completion = 1000, 500
	cloudCost := (prompt*3.0 + completion*15.0) / 1e6
	for _, tc := range []struct {
		name string
		p    keys.Principal
	}{
		{"master", keys.Principal{Master: true}},
		{"a key without limits", keys.Principal{Key: &keys.Key{ID: "key_open"}}},
		{"a key with a budget", keys.Principal{Key: &keys.Key{ID: "key_budget", BudgetUSD: 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, lim := fallbackAdmission()
			admitted := func() policy.Ticket {
				tk, err := a.Admit(context.Background(), policy.AdmitRequest{Principal: tc.p, Model: "local", Fallbacks: []string{"cloud"},
					PromptTokens: prompt, OutputTokens: completion})
				if err != nil {
					t.Fatal(err)
				}
				return tk
			}
			rec := usage.Record{Model: "local", ServedModel: "cloud", PromptTokens: prompt, CompletionTokens: completion}
			admitted().Done(&rec)
			if math.Abs(rec.CostUSD-cloudCost) > 1e-12 {
				t.Fatalf("served by the fallback: cost %g, want cloud's %g", rec.CostUSD, cloudCost)
			}
			own := usage.Record{Model: "local", PromptTokens: prompt, CompletionTokens: completion}
			admitted().Done(&own)
			if own.CostUSD != 0 {
				t.Fatalf("served by the free model itself: cost %g, want 0", own.CostUSD)
			}
			if k := tc.p.Key; k != nil && k.BudgetUSD > 0 {
				s := spent(t, a, lim, k)
				if want := int64(math.Round(cloudCost * limit.NanosPerUSD)); s.Settled != want || s.Reserved != 0 {
					t.Fatalf("budget spend %+v, want %d nano-USD settled (the fallback's cost) and nothing reserved", s, want)
				}
			}
		})
	}
}

// TestAdmit_FallbackReservationTakesTheDearestPrices: the reservation of a
// request to a model with fallbacks prices it at the highest input and
// output prices among the model and its fallbacks, so a key whose budget
// cannot pay for the fallback is refused before anything is spent.
func TestAdmit_FallbackReservationTakesTheDearestPrices(t *testing.T) {
	const prompt, out = 100, 1000
	ask := func(a *admit.Admission, k *keys.Key, model string, fallbacks ...string) (policy.Ticket, error) {
		return a.Admit(context.Background(), policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: model, Fallbacks: fallbacks,
			PromptTokens: prompt, OutputTokens: out})
	}

	t.Run("reserved in flight", func(t *testing.T) {
		a, lim := fallbackAdmission()
		k := &keys.Key{ID: "key_r", BudgetUSD: 10}
		tk, err := ask(a, k, "local", "cheap", "cloud")
		if err != nil {
			t.Fatal(err)
		}
		want := int64(math.Round((prompt*3.0 + out*15.0) / 1e6 * limit.NanosPerUSD)) // cloud's prices, the dearest
		if s := spent(t, a, lim, k); s.Reserved != want {
			t.Fatalf("reserved %d nano-USD, want %d (at cloud's prices)", s.Reserved, want)
		}
		tk.Done(&usage.Record{})

		// The requested model's own price counts when it is the dearest.
		tk, err = ask(a, k, "cloud", "local")
		if err != nil {
			t.Fatal(err)
		}
		if s := spent(t, a, lim, k); s.Reserved != want {
			t.Fatalf("reserved %d nano-USD for cloud falling back to local, want %d", s.Reserved, want)
		}
		tk.Done(&usage.Record{})
	})

	t.Run("refused when the fallback would not fit the budget", func(t *testing.T) {
		a, _ := fallbackAdmission()
		k := &keys.Key{ID: "key_small", Name: "small", BudgetUSD: 0.01} // cloud's worst case is $0.0153
		if tk, err := ask(a, k, "local"); err != nil {
			t.Fatalf("the free model without fallbacks reserves nothing: %v", err)
		} else {
			tk.Done(&usage.Record{})
		}
		_, err := ask(a, k, "local", "cloud")
		if err == nil {
			t.Fatal("admitted a request whose fallback may cost more than the budget")
		}
		var e *apierror.Error
		if !errors.As(err, &e) || e.Status != 429 || e.Code != "budget_exceeded" || !strings.Contains(e.Message, "reserves up to $0.0153") {
			t.Fatalf("refusal %v: want a 429 budget_exceeded naming the fallback's worst case", err)
		}
	})
}

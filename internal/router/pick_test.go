package router

import (
	"context"
	"testing"
	"time"

	"llmgate/internal/config"
)

// pickThenServe picks for a request, then forwards it with the same hint,
// and returns the deployment picked and the one that served it.
func pickThenServe(t *testing.T, tb *Table, r *Route, hint Hint) (picked, got string) {
	t.Helper()
	d, ok := tb.Pick(r, &hint)
	if !ok {
		t.Fatal("Pick found no deployment on a healthy route")
	}
	return d.Backend.Name, served(t, tb, r, hint)
}

func TestPick_ForwardServesTheDeploymentPickedUnderEveryEngineBalancing(t *testing.T) {
	for _, balancing := range []string{config.BalanceCacheAware, config.BalanceLeastLoad, config.BalanceSession} {
		t.Run(balancing, func(t *testing.T) {
			tb, _, engines := fleetTable(t, 4, balancing)
			r, _ := tb.Route("m")
			if balancing != config.BalanceSession { // session balancing reads no metrics
				waitLoads(t, r, engines)
			}
			// New prefixes and sessions on idle engines: the balancing's
			// choice is a random tie-break, drawn again by every ordering,
			// so only a Forward that takes the pick lands on it each time.
			seen := map[string]bool{}
			for i := range 40 {
				hint := Hint{Prefix: sessionPrefix(100+i, 0), Session: string(rune('a' + i))}
				picked, got := pickThenServe(t, tb, r, hint)
				if got != picked {
					t.Fatalf("request %d: Pick named %s, Forward served it on %s", i, picked, got)
				}
				seen[picked] = true
			}
			if len(seen) < 2 {
				t.Fatalf("40 picks on idle engines all named %v", seen)
			}
		})
	}
}

func TestPick_CacheAwareNamesTheDeploymentHoldingThePrefix(t *testing.T) {
	tb, _, engines := fleetTable(t, 4, config.BalanceCacheAware)
	r, _ := tb.Route("m")
	waitLoads(t, r, engines)
	home := served(t, tb, r, Hint{Prefix: sessionPrefix(7, 1)})
	for range 5 {
		picked, got := pickThenServe(t, tb, r, Hint{Prefix: sessionPrefix(7, 2)})
		if picked != home || got != home {
			t.Fatalf("the session's prefix is on %s; Pick named %s and Forward served %s", home, picked, got)
		}
	}
}

func TestPick_SkipsDeploymentsTheRouterAvoidsAndTakesNoProbe(t *testing.T) {
	tb, clk := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a}, {backend: b, priority: 1}]}
  one: {backend: c}
`)
	r, _ := tb.Route("m")
	a := r.Deployments[0]
	for range 10 {
		a.s.br.record(clk.Now(), outcomeFailure, 0, "boom")
	}
	hint := Hint{}
	if d, ok := tb.Pick(r, &hint); !ok || d.Backend.Name != "b" {
		t.Fatalf("with a's breaker open Pick = %s, %v; want b", d.Backend.Name, ok)
	}

	// Once a's open time is over it would be probed: Pick names it, says
	// it is not to be asked anything, and leaves the probe to the attempt.
	clk.Advance(time.Hour)
	hint = Hint{}
	if d, ok := tb.Pick(r, &hint); ok || d.Backend.Name != "a" {
		t.Fatalf("with a half-open Pick = %q, %v; want a, not ok", d.Backend.Name, ok)
	}
	s := &script{}
	if err := tb.ForwardHint(context.Background(), r, hint, s.attempt); err != nil || len(s.calls) != 1 || s.calls[0] != "a" {
		t.Fatalf("Forward after Pick: %v, calls %v; want one probe of a", err, s.calls)
	}
	if st := a.s.br.status(clk.Now()).State; st != StateClosed {
		t.Fatalf("a's breaker is %s after its probe served, want closed", st)
	}

	one, _ := tb.Route("one")
	for range 10 {
		one.Deployments[0].s.br.record(clk.Now(), outcomeFailure, 0, "boom")
	}
	hint = Hint{}
	if d, ok := tb.Pick(one, &hint); ok || d.Backend != nil {
		t.Fatalf("Pick on a route whose only deployment is open = %v, %v; want none", d.Backend, ok)
	}
}

func TestPick_AllocatesNothing(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  one: {backend: a}
  three: {deployments: [{backend: a}, {backend: b}, {backend: c}]}
`)
	ctx := context.Background()
	ok := func(context.Context, Deployment) (bool, error) { return true, nil }
	for _, m := range []string{"one", "three"} {
		r, _ := tb.Route(m)
		allocs := testing.AllocsPerRun(1000, func() {
			var h Hint
			_, _ = tb.Pick(r, &h)
			_ = tb.ForwardHint(ctx, r, h, ok)
		})
		if allocs != 0 {
			t.Errorf("Pick and ForwardHint on %q allocate %.1f times per request, want 0", m, allocs)
		}
	}
}

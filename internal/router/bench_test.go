package router

import (
	"context"
	"testing"
)

func benchForward(b *testing.B, model string) {
	tb, _ := table(b, threeBackends+`
models:
  one: {backend: a}
  two: {deployments: [{backend: a}, {backend: b}]}
`)
	r, _ := tb.Route(model)
	ctx := context.Background()
	ok := func(context.Context, Deployment) (bool, error) { return true, nil }
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = tb.Forward(ctx, r, ok)
		}
	})
}

// BenchmarkForward_OneDeployment is the router's cost on the common path.
func BenchmarkForward_OneDeployment(b *testing.B) { benchForward(b, "one") }

// BenchmarkForward_TwoDeployments adds ordering by requests in flight.
func BenchmarkForward_TwoDeployments(b *testing.B) { benchForward(b, "two") }

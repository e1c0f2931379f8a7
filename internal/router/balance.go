package router

import (
	"math/rand/v2"

	"llmgate/internal/config"
)

// order appends to buf the indexes of r's deployments in the order to try
// them: priority groups first to last, and within a group the balancing
// strategy's preference. It allocates nothing for up to maxAttempts
// deployments.
func (t *Table) order(r *Route, buf []int, hint *Hint) []int {
	deps := r.Deployments
	for start := 0; start < len(deps); {
		end := start + 1
		for end < len(deps) && deps[end].Priority == deps[start].Priority {
			end++
		}
		g := len(buf)
		for i := start; i < end; i++ {
			buf = append(buf, i)
		}
		group := buf[g:]
		switch r.Balancing {
		case config.BalanceWeightedRandom:
			weightedShuffle(deps, group)
		case config.BalanceLowestLatency:
			byLatency(deps, group)
		case config.BalanceCacheAware, config.BalanceLeastLoad, config.BalanceSession:
			if len(group) > 1 {
				t.orderFleet(r, group, hint)
			}
		default:
			byOutstanding(deps, group)
		}
		start = end
	}
	return buf
}

// byOutstanding sorts by requests in flight per unit of weight. A faster
// deployment finishes its requests sooner and so is chosen more often,
// which is the point. Ties are broken from a random rotation so that idle
// deployments share the load.
func byOutstanding(deps []Deployment, group []int) {
	if len(group) < 2 {
		return
	}
	rotate(group, rand.IntN(len(group)))
	load := func(i int) float64 { return float64(deps[i].s.outstanding.Load()) / float64(deps[i].Weight) }
	insertionSort(group, func(a, b int) bool { return load(a) < load(b) })
}

// byLatency prefers the lowest recent time to headers. Deployments never
// measured go first so they get measured; one request in twenty goes to a
// random one so that estimates of the slower ones stay fresh.
func byLatency(deps []Deployment, group []int) {
	if len(group) < 2 {
		return
	}
	if rand.IntN(20) == 0 {
		rotate(group, rand.IntN(len(group)))
		return
	}
	insertionSort(group, func(a, b int) bool { return deps[a].s.latency.Load() < deps[b].s.latency.Load() })
}

// weightedShuffle orders the group by weighted sampling without
// replacement: the first pick is proportional to weight, and so on.
func weightedShuffle(deps []Deployment, group []int) {
	for k := 0; k < len(group)-1; k++ {
		total := 0
		for _, i := range group[k:] {
			total += deps[i].Weight
		}
		x := rand.IntN(total)
		for j, i := range group[k:] {
			x -= deps[i].Weight
			if x < 0 {
				group[k], group[k+j] = group[k+j], group[k]
				break
			}
		}
	}
}

func rotate(xs []int, n int) {
	for ; n > 0; n-- {
		first := xs[0]
		copy(xs, xs[1:])
		xs[len(xs)-1] = first
	}
}

// insertionSort is a stable sort for the handful of deployments in a
// group, without the allocation of sort.Slice's closure boxing.
func insertionSort(xs []int, less func(a, b int) bool) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && less(xs[j], xs[j-1]); j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

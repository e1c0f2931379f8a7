package fleet

import "math"

// DefaultLoadFactor is the default bound of bounded-load affinity: a
// deployment keeps the requests whose prefix it holds while its load,
// with the new request, stays within 1.25 times its share of the group's
// load (consistent hashing with bounded loads uses the same c = 1.25).
const DefaultLoadFactor = 1.25

// Candidate is one deployment of a priority group as the scorer sees it.
type Candidate struct {
	// Match is how many leading prefix blocks of the request the
	// deployment probably holds (Record.Match).
	Match int
	// Engine is the last reading of the engine's /metrics.
	Engine Snapshot
	// InFlight is the gateway's requests in flight to the engine now.
	InFlight int64
	// Weight shares load among deployments (at least 1).
	Weight int
	// ID identifies the deployment stably (across reloads and however
	// deployments are listed), for session affinity.
	ID uint64
}

// Load is the deployment's estimated load in requests: with a fresh
// engine reading, the requests the engine had waiting and running then,
// less this gateway's requests in flight then, plus its requests in
// flight now (what others sent, as of the reading, and what this gateway
// has there now), at least the latter; without a fresh reading, the
// gateway's own requests in flight. It is divided by the weight.
func (c *Candidate) Load() float64 {
	l := float64(c.InFlight)
	if c.Engine.Fresh {
		l = max(c.Engine.Waiting+c.Engine.Running+float64(c.InFlight-c.Engine.InFlight), l)
	}
	return l / float64(max(c.Weight, 1))
}

// kv is the KV-cache use used to break ties, 0 when unknown or stale.
func (c *Candidate) kv() float64 {
	if !c.Engine.Fresh || c.Engine.KVUsage < 0 {
		return 0
	}
	return c.Engine.KVUsage
}

// kvMargin is the difference in KV-cache use that breaks a tie in load:
// a smaller one, a second old, would send every tie of that second to
// the same replica.
const kvMargin = 0.2

// LeastLoad orders group (indexes into cands) by Load, then by KV-cache
// use where it differs by more than kvMargin; other ties keep group's
// order, which the caller rotates at random so that idle deployments
// share the work.
func LeastLoad(cands []Candidate, group []int) {
	insertionSort(group, func(a, b int) bool {
		la, lb := cands[a].Load(), cands[b].Load()
		if la != lb {
			return la < lb
		}
		return cands[a].kv() < cands[b].kv()-kvMargin
	})
}

// CacheAware orders group for a request: first the deployment holding
// the longest prefix of it among those within the load bound, then the
// rest by load (LeastLoad). A deployment is within the bound when its
// load with this request would not exceed factor times its weighted
// share of the group's load with this request, rounded up, plus one:
// consistent-hashing-with-bounded-loads' rule, so that popular prefixes
// spill onto other replicas instead of piling on one. The one request of
// slack keeps affinity at low load, where one request more in an engine's
// batch costs far less than prefilling a long prompt elsewhere. With no
// prefix held anywhere the order is LeastLoad's.
func CacheAware(cands []Candidate, group []int, factor float64) {
	LeastLoad(cands, group)
	if len(group) < 2 {
		return
	}
	if factor < 1 {
		factor = DefaultLoadFactor
	}
	total, weights := 1.0, 0
	for _, i := range group {
		total += cands[i].Load() * float64(max(cands[i].Weight, 1))
		weights += max(cands[i].Weight, 1)
	}
	best, bestMatch := -1, 0
	for k, i := range group {
		c := &cands[i]
		w := float64(max(c.Weight, 1))
		bound := math.Ceil(factor*total*w/float64(weights)) + 1
		if c.Load()*w+1 > bound {
			continue
		}
		if c.Match > bestMatch {
			best, bestMatch = k, c.Match
		}
	}
	if best > 0 {
		// Move the chosen one to the front, keeping the others' order.
		chosen := group[best]
		copy(group[1:best+1], group[:best])
		group[0] = chosen
	}
}

// Session orders group by rendezvous (highest random weight) hashing of
// the session key: each session has its own stable preference among the
// deployments, weighted, that changes for only the sessions of a
// deployment that comes or goes. The router skips deployments that are
// down, so a session fails over to its second choice and returns when its
// first is back.
func Session(cands []Candidate, group []int, key uint64) {
	score := func(i int) float64 {
		h := mix(key ^ cands[i].ID)
		// u in (0,1); -w/ln(u) is the weighted rendezvous score.
		u := (float64(h>>11) + 0.5) / (1 << 53)
		return -float64(max(cands[i].Weight, 1)) / math.Log(u)
	}
	insertionSort(group, func(a, b int) bool { return score(a) > score(b) })
}

// HashString hashes a session key or a deployment's identity: FNV-1a,
// the same in every process, so that several gateway replicas pin a
// session to the same deployment.
func HashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix(h)
}

// mix is splitmix64's finaliser: a good spread of key ^ id.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// insertionSort is a stable sort for a handful of deployments, without
// sort.Slice's allocation.
func insertionSort(xs []int, less func(a, b int) bool) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && less(xs[j], xs[j-1]); j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

package fleet

import "testing"

// agentRequest12k is a ~12,000-token agent turn: a ~6,000-word system
// prompt, tools and 40 turns of history (about 48 KB of JSON).
func agentRequest12k() []byte { return agentBody(words(6000, "token"), 40) }

func BenchmarkPrefixBlocks_12kTokenAgentRequest(b *testing.B) {
	body := agentRequest12k()
	buf := make([]uint64, 0, 512)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		buf = PrefixBlocks(body, buf[:0])
	}
	b.ReportMetric(float64(len(buf)), "blocks")
}

func BenchmarkRecordMatchAndAdd_12kTokenAgentRequest(b *testing.B) {
	hashes := PrefixBlocks(agentRequest12k(), nil)
	r := NewRecord(BlocksFor(DefaultCacheTokens))
	r.Add(hashes)
	b.ReportAllocs()
	for b.Loop() {
		if r.Match(hashes) != len(hashes) {
			b.Fatal("prefix not held")
		}
		r.Add(hashes)
	}
}

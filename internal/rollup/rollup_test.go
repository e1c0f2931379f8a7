package rollup

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

func decodeAll(b []byte) map[int]int64 {
	m := map[int]int64{}
	DecodeHist(b, func(k int, n int64) { m[k] += n })
	return m
}

// AppendHist merges in bucket order; the result must equal the map-based
// merge for any stored histogram and any batch, and stay ascending.
func TestAppendHist_MatchesMapMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var old []byte
	for round := 0; round < 500; round++ {
		add := map[int]int64{}
		for j := rng.IntN(6); j >= 0; j-- {
			add[rng.IntN(200)] += 1 + rng.Int64N(1000)
		}
		want := appendHistMap(old, add)
		got := AppendHist(old, add)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: merge of %v into %v = %v, want %v", round, add, decodeAll(old), decodeAll(got), decodeAll(want))
		}
		prev := -1
		DecodeHist(got, func(k int, _ int64) {
			if k <= prev {
				t.Fatalf("round %d: bucket %d after %d", round, k, prev)
			}
			prev = k
		})
		old = got
	}
	if len(decodeAll(old)) < 100 {
		t.Fatalf("only %d buckets after 500 rounds: the test did not exercise large histograms", len(decodeAll(old)))
	}
}

// An encoding out of order (or with a repeated bucket) is still merged
// exactly, and comes back ascending.
func TestAppendHist_UnorderedOld(t *testing.T) {
	var old []byte
	for _, p := range [][2]uint64{{50, 3}, {10, 2}, {50, 1}, {7, 9}} {
		old = binary.AppendUvarint(old, p[0])
		old = binary.AppendUvarint(old, p[1])
	}
	got := decodeAll(AppendHist(old, map[int]int64{10: 5, 99: 1}))
	want := map[int]int64{7: 9, 10: 7, 50: 4, 99: 1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

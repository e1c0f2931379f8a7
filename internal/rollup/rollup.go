// Package rollup keeps usage queries fast on large ledgers: every stored
// record is also folded into one row per (hour, key, model, backend) plus a
// latency histogram for that row. Summaries read the rollups for whole hours
// and raw records only for the partial hours at the edges of a range.
//
// Latency percentiles from rollups come from a log-scale histogram with
// LatencyBucketsPerDoubling buckets per doubling; a reported percentile is
// the geometric middle of its bucket, within about 4.5% of the exact value.
package rollup

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"strings"

	"llmgate/internal/usage"
)

// LatencyBucketsPerDoubling sets the histogram resolution.
const LatencyBucketsPerDoubling = 8

// LatencyBucket returns the histogram bucket of a latency in microseconds.
func LatencyBucket(us int64) int {
	if us <= 1 {
		return 0
	}
	return int(math.Log2(float64(us))*LatencyBucketsPerDoubling) + 1
}

// BucketLatencyUS returns the representative latency of a bucket: the
// geometric middle of its range.
func BucketLatencyUS(b int) int64 {
	if b <= 0 {
		return 1
	}
	return int64(math.Round(math.Exp2((float64(b-1) + 0.5) / LatencyBucketsPerDoubling)))
}

// HourStart returns the start of the UTC hour holding ms (Unix milliseconds),
// in Unix seconds.
func HourStart(ms int64) int64 {
	s := ms / 1000
	if ms < 0 && ms%1000 != 0 {
		s--
	}
	return s - ((s%3600)+3600)%3600
}

// Key identifies one rollup row.
type Key struct {
	Hour    int64 // Unix seconds of the UTC hour's start
	KeyID   string
	Model   string
	Backend string
}

// Row is the aggregate of the records of one hour, key, model and backend.
type Row struct {
	Key
	Requests, Errors, PromptTokens, CompletionTokens, CachedTokens, Estimated int64
	CostUSD                                                                   float64
	// Latency maps histogram bucket to count.
	Latency map[int]int64
}

// FromRecords folds records into rollup rows, sorted by key so writers
// that upsert them lock rows in a consistent order.
func FromRecords(recs []usage.Record) []Row {
	idx := map[Key]int{}
	var out []Row
	for i := range recs {
		r := &recs[i]
		k := Key{Hour: HourStart(r.Time.UnixMilli()), KeyID: r.KeyID, Model: r.Model, Backend: r.Backend}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, Row{Key: k, Latency: map[int]int64{}})
		}
		ru := &out[j]
		ru.Requests++
		if r.Status >= 400 {
			ru.Errors++
		}
		ru.PromptTokens += int64(r.PromptTokens)
		ru.CompletionTokens += int64(r.CompletionTokens)
		ru.CachedTokens += int64(r.CachedTokens)
		ru.CostUSD += r.CostUSD
		if r.Estimated {
			ru.Estimated++
		}
		ru.Latency[LatencyBucket(r.Latency.Microseconds())]++
	}
	sort.Slice(out, func(a, b int) bool { return lessKey(out[a].Key, out[b].Key) })
	return out
}

func lessKey(a, b Key) bool {
	if a.Hour != b.Hour {
		return a.Hour < b.Hour
	}
	if a.KeyID != b.KeyID {
		return a.KeyID < b.KeyID
	}
	if a.Model != b.Model {
		return a.Model < b.Model
	}
	return a.Backend < b.Backend
}

// SummaryBuilder merges rollup rows, histogram counts and raw records into
// summary rows. Stores feed it whatever their queries return, in any order.
type SummaryBuilder struct {
	group []string
	rows  map[string]*sumAcc
}

type sumAcc struct {
	row  usage.SummaryRow
	hist [maxBucket + 1]int64
}

// maxBucket bounds histogram buckets (2^64 µs needs 8*64+1).
const maxBucket = 8*64 + 1

// NewSummaryBuilder returns a builder for the given group dimensions
// (key, model, backend, day).
func NewSummaryBuilder(group []string) *SummaryBuilder {
	return &SummaryBuilder{group: group, rows: map[string]*sumAcc{}}
}

func (b *SummaryBuilder) acc(dims []string) *sumAcc {
	k := strings.Join(dims, "\x00")
	a := b.rows[k]
	if a == nil {
		a = &sumAcc{}
		for i, g := range b.group {
			switch g {
			case "key":
				a.row.KeyID = dims[i]
			case "model":
				a.row.Model = dims[i]
			case "backend":
				a.row.Backend = dims[i]
			case "day":
				a.row.Day = dims[i]
			}
		}
		b.rows[k] = a
	}
	return a
}

// AddTotals adds counts for a group.
func (b *SummaryBuilder) AddTotals(dims []string, requests, errors, prompt, cached, completion, estimated int64, cost float64) {
	a := b.acc(dims)
	a.row.Requests += requests
	a.row.Errors += errors
	a.row.PromptTokens += prompt
	a.row.CachedTokens += cached
	a.row.CompletionTokens += completion
	a.row.Estimated += estimated
	a.row.CostUSD += cost
}

// AddLatency adds n latencies in a histogram bucket for a group.
func (b *SummaryBuilder) AddLatency(dims []string, bucket int, n int64) {
	b.acc(dims).hist[min(max(bucket, 0), maxBucket)] += n
}

// AddRollup adds one stored rollup row: totals and an encoded histogram.
func (b *SummaryBuilder) AddRollup(dims []string, requests, errors, prompt, cached, completion, estimated int64, cost float64, hist []byte) {
	a := b.acc(dims)
	a.row.Requests += requests
	a.row.Errors += errors
	a.row.PromptTokens += prompt
	a.row.CachedTokens += cached
	a.row.CompletionTokens += completion
	a.row.Estimated += estimated
	a.row.CostUSD += cost
	DecodeHist(hist, func(bucket int, n int64) { a.hist[min(max(bucket, 0), maxBucket)] += n })
}

// AddRecord adds one raw record for a group.
func (b *SummaryBuilder) AddRecord(dims []string, latencyUS, status, prompt, cached, completion int64, cost float64, estimated bool) {
	var errs, est int64
	if status >= 400 {
		errs = 1
	}
	if estimated {
		est = 1
	}
	b.AddTotals(dims, 1, errs, prompt, cached, completion, est, cost)
	b.AddLatency(dims, LatencyBucket(latencyUS), 1)
}

// Rows returns the summary rows sorted by their dimensions.
func (b *SummaryBuilder) Rows() []usage.SummaryRow {
	keys := make([]string, 0, len(b.rows))
	for k := range b.rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]usage.SummaryRow, 0, len(keys))
	for _, k := range keys {
		a := b.rows[k]
		if a.row.Requests == 0 {
			continue
		}
		a.row.P50LatencyMS = histRank(&a.hist, 0.50)
		a.row.P95LatencyMS = histRank(&a.hist, 0.95)
		out = append(out, a.row)
	}
	return out
}

// histRank returns the nearest-rank percentile of a histogram in ms.
func histRank(h *[maxBucket + 1]int64, p float64) float64 {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := max(int64(math.Ceil(p*float64(total))), 1)
	var seen int64
	for k, n := range h {
		seen += n
		if seen >= want {
			return float64(BucketLatencyUS(k)) / 1000
		}
	}
	return 0
}

// AppendHist encodes a latency histogram compactly (uvarint pairs of
// bucket and count, buckets ascending), merging add into the encoded old.
// It walks both in bucket order; an old encoding out of order (never
// written by this code) is merged through a map instead.
func AppendHist(old []byte, add map[int]int64) []byte {
	keys := make([]int, 0, len(add))
	for b := range add {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	out := make([]byte, 0, len(old)+len(keys)*4)
	put := func(b int, n int64) {
		out = binary.AppendUvarint(out, uint64(b))
		out = binary.AppendUvarint(out, uint64(n))
	}
	i, prev, sorted := 0, -1, true
	DecodeHist(old, func(b int, n int64) {
		if b <= prev {
			sorted = false
		}
		prev = b
		if !sorted {
			return
		}
		for i < len(keys) && keys[i] < b {
			put(keys[i], add[keys[i]])
			i++
		}
		if i < len(keys) && keys[i] == b {
			n += add[b]
			i++
		}
		put(b, n)
	})
	if !sorted {
		return appendHistMap(old, add)
	}
	for ; i < len(keys); i++ {
		put(keys[i], add[keys[i]])
	}
	return out
}

func appendHistMap(old []byte, add map[int]int64) []byte {
	m := make(map[int]int64, len(add)+16)
	DecodeHist(old, func(b int, n int64) { m[b] += n })
	for b, n := range add {
		m[b] += n
	}
	buckets := make([]int, 0, len(m))
	for b := range m {
		buckets = append(buckets, b)
	}
	sort.Ints(buckets)
	out := make([]byte, 0, len(buckets)*3)
	for _, b := range buckets {
		out = binary.AppendUvarint(out, uint64(b))
		out = binary.AppendUvarint(out, uint64(m[b]))
	}
	return out
}

// DecodeHist calls fn for each bucket of an encoded histogram.
func DecodeHist(b []byte, fn func(bucket int, n int64)) {
	for len(b) > 0 {
		k, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return
		}
		v, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 {
			return
		}
		fn(int(k), int64(v))
		b = b[n1+n2:]
	}
}

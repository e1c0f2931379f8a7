package ledger

import (
	"encoding/json"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"llmgate/internal/usage"
)

// appendRecord writes what encoding/json writes for a Record (member names
// and values), so spool files of every version read alike.
func TestAppendRecord_ReadsBackAsEncodingJSONWritesIt(t *testing.T) {
	recs := []usage.Record{
		{},
		benchRecord(),
		{ID: usage.NewID(), ClientRequestID: "quote\" back\\slash \n\r\t \x00\x1f ünïcødé 🚀 <&>", Time: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("X", 5*3600+1800)),
			KeyID: "master", Model: "Qwen/Qwen2.5-7B", ServedModel: "fall\"back/ü", Status: 499, ErrorType: "client_closed", PromptTokens: -1, CompletionTokens: math.MaxInt32,
			CachedTokens: 7, TTFT: -time.Nanosecond, Latency: math.MaxInt64, Estimated: true, CostUSD: 1e-12},
		{ID: "x", CostUSD: 123456789.125, Time: time.Unix(0, 0).UTC()},
	}
	for _, r := range recs {
		line := appendRecord(nil, &r)
		if !strings.HasSuffix(string(line), "}\n") || strings.Count(string(line), "\n") != 1 {
			t.Fatalf("not one line: %q", line)
		}
		var got usage.Record
		if err := decodeRecord(line, &got); err != nil {
			t.Fatalf("decode %q: %v", line, err)
		}
		if !got.Time.Equal(r.Time) {
			t.Fatalf("time %v, want %v", got.Time, r.Time)
		}
		got.Time, r.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v\nline %s", got, r, line)
		}
		std, _ := json.Marshal(r)
		if keys(t, std) != keys(t, line) {
			t.Fatalf("members %s, encoding/json writes %s", keys(t, line), keys(t, std))
		}
	}
	// Not representable in JSON: written as 0 rather than a broken line.
	var got usage.Record
	if err := decodeRecord(appendRecord(nil, &usage.Record{ID: "n", CostUSD: math.NaN()}), &got); err != nil || got.CostUSD != 0 {
		t.Fatalf("NaN cost: %v %v", got.CostUSD, err)
	}
}

func keys(t *testing.T, b []byte) string {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

func FuzzAppendRecord(f *testing.F) {
	f.Add("id", "client", "key", "model", 200, 1.5)
	f.Add("\x00\"\\", "\xff\xfe", "", "ü", -1, math.Copysign(0, -1))
	f.Fuzz(func(t *testing.T, id, client, key, model string, status int, cost float64) {
		r := usage.Record{ID: id, ClientRequestID: client, KeyID: key, Model: model, Status: status, CostUSD: cost, Time: time.Unix(1700000000, 5)}
		var got usage.Record
		if err := decodeRecord(appendRecord(nil, &r), &got); err != nil {
			t.Fatalf("line for %+v does not decode: %v", r, err)
		}
		if got.Status != r.Status || (got.CostUSD != r.CostUSD && !math.IsNaN(r.CostUSD) && !math.IsInf(r.CostUSD, 0)) {
			t.Fatalf("numbers changed: %+v -> %+v", r, got)
		}
		for _, p := range [][2]string{{got.ID, r.ID}, {got.ClientRequestID, r.ClientRequestID}, {got.KeyID, r.KeyID}, {got.Model, r.Model}} {
			if p[0] != p[1] && utf8Valid(p[1]) {
				t.Fatalf("string changed: %q -> %q", p[1], p[0])
			}
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// Ids are unguessable (128 random bits: no two alike), well-formed, and
// sort by creation time across milliseconds.
func TestNewID_FormatUniquenessAndTimeOrder(t *testing.T) {
	seen := map[string]bool{}
	var prev string
	for i := 0; i < 20000; i++ {
		id := usage.NewID()
		if !usage.IsNewID(id) || seen[id] {
			t.Fatalf("id %q: well-formed %v, seen before %v", id, usage.IsNewID(id), seen[id])
		}
		seen[id] = true
		if i%5000 == 0 {
			if prev != "" && !(prev[:len(usage.IDPrefix)+10] < id[:len(usage.IDPrefix)+10]) {
				t.Fatalf("id %s made after %s sorts before it", id, prev)
			}
			prev = id
			time.Sleep(2 * time.Millisecond) // the next id is made in a later millisecond: the subject here
		}
	}
	if usage.IsNewID("req_0a1b2c3d_1") || usage.LegacyClientRequestID(usage.NewID()) == "" {
		t.Fatal("a new id is taken for an old server-made one, or the reverse")
	}
}

// BenchmarkAppendRecord is a journal line's encoding, done for every
// request before its answer's last bytes.
func BenchmarkAppendRecord(b *testing.B) {
	r := usage.Record{ID: usage.NewID(), Time: time.Now(), KeyID: "key_1", Model: "qwen2.5-7b-instruct", Backend: "vllm",
		Endpoint: "chat", Status: 200, PromptTokens: 812, CompletionTokens: 211, Latency: 900 * time.Millisecond, CostUSD: 0.000412}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRecord(buf[:0], &r)
	}
}

package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestText_SameSeedAndPromptGiveTheSameText(t *testing.T) {
	seed := int64(11)
	a := generate(seedFor("prompt", 0.8, &seed, nil), 50, true, 100, nil)
	b := generate(seedFor("prompt", 0.8, &seed, nil), 50, true, 100, nil)
	if a.text != b.text || a.tokens != 50 {
		t.Fatalf("seeded output differs or has %d tokens:\n%q\n%q", a.tokens, a.text, b.text)
	}
	other := int64(12)
	c := generate(seedFor("prompt", 0.8, &other, nil), 50, true, 100, nil)
	d := generate(seedFor("another prompt", 0.8, &seed, nil), 50, true, 100, nil)
	if c.text == a.text || d.text == a.text {
		t.Error("different seed or prompt gave the same text")
	}
}

func TestText_GreedySamplingIgnoresTheSeedAndUnseededSamplingVaries(t *testing.T) {
	s1, s2 := int64(1), int64(2)
	n := uint64(0)
	random := func() uint64 { n++; return n * 0x9e3779b97f4a7c15 }
	if seedFor("p", 0, &s1, random) != seedFor("p", 0, &s2, random) {
		t.Error("temperature 0 depends on the seed")
	}
	if seedFor("p", 1, nil, random) == seedFor("p", 1, nil, random) {
		t.Error("unseeded sampling repeated itself")
	}
}

func TestText_NaturalEndStopsBeforeMaxTokensWithoutIgnoreEOS(t *testing.T) {
	short, long := 0, 0
	for i := range 200 {
		g := generate(uint64(i), 1000, false, 50, nil)
		if g.tokens < 1 || g.tokens > 1000 {
			t.Fatalf("%d tokens", g.tokens)
		}
		if g.finish == "stop" {
			short++
		} else {
			long++
		}
		if g.ends[len(g.ends)-1] != len(g.text) || len(g.ends) != g.tokens {
			t.Fatalf("token offsets inconsistent")
		}
	}
	if short < 190 {
		t.Errorf("only %d of 200 ended naturally with mean 50 and max 1000", short)
	}
	if g := generate(3, 1000, true, 50, nil); g.tokens != 1000 || g.finish != "length" {
		t.Errorf("ignore_eos: %d tokens, finish %q", g.tokens, g.finish)
	}
}

func TestText_StopStringEndsOutputBeforeIt(t *testing.T) {
	full := generate(5, 40, true, 100, nil)
	words := strings.Fields(full.text)
	stop := words[len(words)/2]
	g := generate(5, 40, true, 100, []string{"never-there", stop})
	if g.finish != "stop" || g.stopReason != stop {
		t.Fatalf("finish %q stop_reason %v, want stop/%q", g.finish, g.stopReason, stop)
	}
	if strings.Contains(g.text, stop) || !strings.HasPrefix(full.text, g.text) {
		t.Errorf("text %q should be the prefix of %q before %q", g.text, full.text, stop)
	}
	if g.tokens >= full.tokens || g.delta(0, g.tokens) != g.text {
		t.Errorf("stopped after %d tokens, deltas %q", g.tokens, g.delta(0, g.tokens))
	}
}

func TestText_PromptTokenApproximation(t *testing.T) {
	for s, want := range map[string]int{"": 0, "a": 1, "abcd": 1, "abcde": 2, strings.Repeat("x", 400): 100} {
		if got := countTextTokens(s); got != want {
			t.Errorf("countTextTokens(%d bytes) = %d, want %d", len(s), got, want)
		}
	}
}

func TestEmbeddings_AreDeterministicUnitNormAndRoundTripBase64(t *testing.T) {
	a, b, c := embed("hello", 256), embed("hello", 256), embed("world", 256)
	var norm, dot float64
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same input gave different vectors")
		}
		norm += float64(a[i]) * float64(a[i])
		dot += float64(a[i]) * float64(c[i])
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("norm^2 = %v, want 1", norm)
	}
	if math.Abs(dot) > 0.5 {
		t.Errorf("different inputs too similar: cosine %v", dot)
	}
	raw, err := base64.StdEncoding.DecodeString(embeddingBase64(a))
	if err != nil || len(raw) != 4*len(a) {
		t.Fatalf("base64: %v, %d bytes", err, len(raw))
	}
	for i := range a {
		if math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])) != a[i] {
			t.Fatalf("base64 element %d differs", i)
		}
	}
}

func TestEmbeddings_DimensionsTruncateAndRenormalise(t *testing.T) {
	_, url := startServer(t, fastConfig())
	code, _, body := post(t, url+"/v1/embeddings", `{"model":"m","input":"hello","dimensions":4}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var resp struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || len(resp.Data) != 1 || len(resp.Data[0].Embedding) != 4 {
		t.Fatalf("bad response %s", body)
	}
	full := embed("hello", fastModel().EmbeddingDim)
	var n float64
	for _, x := range resp.Data[0].Embedding {
		n += float64(x) * float64(x)
	}
	if math.Abs(n-1) > 1e-5 || (resp.Data[0].Embedding[0] > 0) != (full[0] > 0) {
		t.Errorf("truncated vector %v not a renormalised prefix of %v", resp.Data[0].Embedding, full[:4])
	}
	if code, _, b := post(t, url+"/v1/embeddings", `{"model":"m","input":"x","dimensions":9999}`); code != 400 {
		t.Errorf("oversized dimensions: %d %s", code, b)
	}
}

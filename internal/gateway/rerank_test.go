package gateway

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"llmgate/internal/sim"
)

// /v1/rerank (and Cohere's /v2/rerank) route by model like the other
// endpoints, and the ledger books the backend's total_tokens as input.
func TestGateway_RerankRoutesAndRecordsUsage(t *testing.T) {
	s, err := sim.New(sim.Config{Models: []sim.ModelConfig{{Name: "bge-reranker", MaxNumSeqs: 4, MaxModelLen: 512,
		PrefillBase: time.Millisecond, DecodeBase: time.Millisecond, MeanOutputTokens: 1, EmbeddingDim: 8}}, Seed: 1, APIKey: "sk-sim"})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	f := startFaultGW(t, fmt.Sprintf("backends:\n  local: {url: %s, api_key: sk-sim}\nmodels:\n  reranker: {backend: local, upstream_model: bge-reranker}\n", up.URL))
	e := &env{t: t, g: f.g}
	body := `{"model":"reranker","query":"capital of France","documents":["Bananas are yellow.","Paris is the capital of France."],"top_n":1}`
	var totals []int
	for _, path := range []string{"/v1/rerank", "/v2/rerank"} {
		r := e.do("POST", path, testMaster, body)
		var out struct {
			Model   string         `json:"model"`
			Usage   map[string]int `json:"usage"`
			Results []struct {
				Index int `json:"index"`
			} `json:"results"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil || len(out.Results) != 1 || out.Results[0].Index != 1 || out.Usage["total_tokens"] == 0 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		totals = append(totals, out.Usage["total_tokens"])
	}
	for _, rec := range e.records(2) {
		if rec.Endpoint != "rerank" || rec.Model != "reranker" || rec.UpstreamModel != "bge-reranker" || rec.Estimated ||
			rec.PromptTokens != totals[0] || rec.CompletionTokens != 0 || rec.Status != 200 {
			t.Fatalf("ledger record %+v, want endpoint rerank with %d input tokens (the backend's total_tokens), not estimated", rec, totals[0])
		}
	}
	if r := e.do("POST", "/v1/rerank", testMaster, `{"model":"nope","query":"q","documents":["a"]}`); r.status != 404 {
		t.Fatalf("unknown model: %d %s", r.status, r.body)
	}
}

package sim

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"sort"
	"strings"
	"unicode"
)

// rerankRequest is the rerank API body of vLLM, Jina and Cohere.
type rerankRequest struct {
	Model           string            `json:"model"`
	Query           *string           `json:"query"`
	Documents       []json.RawMessage `json:"documents"` // strings or {"text": ...}
	TopN            *int              `json:"top_n"`
	ReturnDocuments *bool             `json:"return_documents"`
}

func (r *rerankRequest) model() string { return r.Model }

type rerankResult struct {
	Index          int             `json:"index"`
	Document       *rerankDocument `json:"document,omitempty"`
	RelevanceScore float64         `json:"relevance_score"`
}

type rerankDocument struct {
	Text string `json:"text"`
}

// rerankSpecialTokens is what a cross-encoder adds around each
// (query, document) pair: [CLS] query [SEP] document [SEP].
const rerankSpecialTokens = 3

// handleRerank answers POST /v1/rerank (also /rerank and /v2/rerank, as
// vLLM serves it). The relevance score is the share of the query's words
// found in the document (plus a small stable tie-breaker), so a document
// that repeats the query ranks first. The whole batch of pairs goes through
// the engine as one prefill-only sequence, so latency grows with the input.
func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	var req rerankRequest
	eng := s.begin(w, r, &req)
	if eng == nil {
		return
	}
	if req.Query == nil {
		writeAPIError(w, badRequest("query", "query is required: the text to rank the documents against"))
		return
	}
	if len(req.Documents) == 0 {
		writeAPIError(w, badRequest("documents", "documents must be a non-empty list of strings or {\"text\": ...} objects"))
		return
	}
	if req.TopN != nil && *req.TopN < 0 {
		writeAPIError(w, badRequest("top_n", "top_n must be non-negative, got %d", *req.TopN))
		return
	}
	docs := make([]string, len(req.Documents))
	tokens := 0
	qTokens := countTextTokens(*req.Query)
	for i, raw := range req.Documents {
		var text string
		if json.Unmarshal(raw, &text) != nil {
			var obj rerankDocument
			if json.Unmarshal(raw, &obj) != nil {
				writeAPIError(w, badRequest("documents", "documents[%d] must be a string or an object with \"text\"", i))
				return
			}
			text = obj.Text
		}
		docs[i] = text
		pair := qTokens + countTextTokens(text) + rerankSpecialTokens
		if pair > eng.mc.MaxModelLen {
			writeAPIError(w, badRequest("documents", "This model's maximum context length is %d tokens. However, the query and documents[%d] together have %d tokens. Please reduce the length of the input.",
				eng.mc.MaxModelLen, i, pair))
			return
		}
		tokens += pair
	}
	if !s.prefillOnly(w, r, eng, tokens) {
		return
	}
	results := make([]rerankResult, len(docs))
	withDocs := req.ReturnDocuments == nil || *req.ReturnDocuments
	for i, d := range docs {
		results[i] = rerankResult{Index: i, RelevanceScore: relevance(*req.Query, d)}
		if withDocs {
			results[i].Document = &rerankDocument{Text: d}
		}
	}
	sort.SliceStable(results, func(a, b int) bool { return results[a].RelevanceScore > results[b].RelevanceScore })
	if req.TopN != nil && *req.TopN > 0 && *req.TopN < len(results) {
		results = results[:*req.TopN]
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": "rerank-" + randomHex(), "model": eng.mc.Name,
		"usage": map[string]int{"total_tokens": tokens}, "results": results})
}

// relevance scores doc against query in (0, 1).
func relevance(query, doc string) float64 {
	words := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	}
	in := map[string]bool{}
	for _, w := range words(doc) {
		in[w] = true
	}
	qw := words(query)
	hit := 0
	for _, w := range qw {
		if in[w] {
			hit++
		}
	}
	share := 0.0
	if len(qw) > 0 {
		share = float64(hit) / float64(len(qw))
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(query + "\x00" + doc))
	return 0.02 + 0.95*share + float64(h.Sum32()%1000)/100000 // tie-breaker below 0.01
}

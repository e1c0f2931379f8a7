package sim

import (
	"net/http"
	"time"
)

// prefillOnly runs a request of tokens input tokens and no output through
// the engine (embeddings, rerank): fault injection, admission to the
// queue, then the wait for its prefill. On a failure it has answered the
// client and returns false.
func (s *Server) prefillOnly(w http.ResponseWriter, r *http.Request, eng *engine, tokens int) bool {
	if e := s.injectFault(); e != nil {
		writeAPIError(w, e)
		return false
	}
	q := newSeq(tokens, 0)
	if !eng.submit(q) {
		writeAPIError(w, s.queueFull(eng))
		return false
	}
	defer q.cancelled.Store(true)
	if !s.wait(r, q) {
		if r.Context().Err() == nil {
			writeAPIError(w, s.precheck())
		}
		return false
	}
	return true
}

// handleEmbeddings answers /v1/embeddings with deterministic unit-norm
// vectors. The request still goes through the engine as a prefill-only
// sequence, so embedding latency grows with input length and load.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	eng := s.begin(w, r, &req)
	if eng == nil {
		return
	}
	text, tokens, e := parsePrompt(req.Input, "input")
	if e != nil {
		writeAPIError(w, e)
		return
	}
	dim := eng.mc.EmbeddingDim
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > eng.mc.EmbeddingDim {
			writeAPIError(w, badRequest("dimensions", "dimensions must be between 1 and %d, got %d", eng.mc.EmbeddingDim, *req.Dimensions))
			return
		}
		dim = *req.Dimensions
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		writeAPIError(w, badRequest("encoding_format", "encoding_format must be \"float\" or \"base64\", got %q", req.EncodingFormat))
		return
	}
	if tokens > eng.mc.MaxModelLen {
		writeAPIError(w, badRequest("", "This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.",
			eng.mc.MaxModelLen, tokens))
		return
	}
	created := time.Now().Unix()
	if !s.prefillOnly(w, r, eng, tokens) {
		return
	}
	// Truncating the full vector and renormalising is what Matryoshka
	// embedding models do with "dimensions", so prefixes stay comparable.
	vec := embed(text, eng.mc.EmbeddingDim)[:dim]
	if dim < eng.mc.EmbeddingDim {
		normalize(vec)
	}
	var out any = vec
	if req.EncodingFormat == "base64" {
		out = embeddingBase64(vec)
	}
	writeJSON(w, http.StatusOK, embeddingResponse{ID: "embd-" + randomHex(), Object: "list", Created: created,
		Model: eng.mc.Name, Data: []embeddingData{{Index: 0, Object: "embedding", Embedding: out}},
		Usage: usageInfo{PromptTokens: tokens, TotalTokens: tokens, PromptTokensDetails: rawNull}})
}

package sim

import (
	"encoding/json"
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
	inputs, e := parseInputs(req.Input)
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
	tokens := 0
	for _, in := range inputs {
		if in.tokens > eng.mc.MaxModelLen {
			writeAPIError(w, badRequest("", "This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.",
				eng.mc.MaxModelLen, in.tokens))
			return
		}
		tokens += in.tokens
	}
	created := time.Now().Unix()
	// The inputs go through the engine as one prefill of their summed
	// tokens: vLLM batches them, so their cost adds up within the steps.
	if !s.prefillOnly(w, r, eng, tokens) {
		return
	}
	data := make([]embeddingData, len(inputs))
	for i, in := range inputs {
		// Truncating the full vector and renormalising is what Matryoshka
		// embedding models do with "dimensions", so prefixes stay comparable.
		vec := embed(in.text, eng.mc.EmbeddingDim)[:dim]
		if dim < eng.mc.EmbeddingDim {
			normalize(vec)
		}
		var out any = vec
		if req.EncodingFormat == "base64" {
			out = embeddingBase64(vec)
		}
		data[i] = embeddingData{Index: i, Object: "embedding", Embedding: out}
	}
	writeJSON(w, http.StatusOK, embeddingResponse{ID: "embd-" + randomHex(), Object: "list", Created: created,
		Model: eng.mc.Name, Data: data,
		Usage: usageInfo{PromptTokens: tokens, TotalTokens: tokens, PromptTokensDetails: rawNull}})
}

// embeddingInput is one input of an embeddings request.
type embeddingInput struct {
	text   string // what the vector is seeded from
	tokens int
}

// parseInputs reads an embeddings input as vLLM accepts it: a string, a
// list of strings, a list of token ids, or a list of lists of token ids.
// Each becomes one embedding.
func parseInputs(raw json.RawMessage) ([]embeddingInput, *apiError) {
	const shape = "input must be a non-empty string, a list of strings, a list of token ids, or a list of lists of token ids"
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", shape)
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, badRequest("input", "input must not be an empty string")
		}
		return []embeddingInput{{one, countTextTokens(one)}}, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, badRequest("input", shape)
		}
		compact, _ := json.Marshal(ids)
		return []embeddingInput{{string(compact), len(ids)}}, nil
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil || len(many) == 0 {
		return nil, badRequest("input", shape)
	}
	out := make([]embeddingInput, len(many))
	for i, m := range many {
		var text string
		if json.Unmarshal(m, &text) == nil {
			if text == "" {
				return nil, badRequest("input", "input[%d] must not be an empty string", i)
			}
			out[i] = embeddingInput{text, countTextTokens(text)}
			continue
		}
		var ids []int64
		if json.Unmarshal(m, &ids) != nil || len(ids) == 0 {
			return nil, badRequest("input", "input[%d]: %s; lists must not mix strings and token ids", i, shape)
		}
		// The compact form seeds the vector, so [1, 2] and [1,2] agree.
		compact, _ := json.Marshal(ids)
		out[i] = embeddingInput{string(compact), len(ids)}
	}
	return out, nil
}

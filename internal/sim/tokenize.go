package sim

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
)

// tokenizeRequest is vLLM's POST /tokenize body: a completion prompt, or
// chat messages rendered through the chat template.
type tokenizeRequest struct {
	Model               string            `json:"model"`
	Prompt              json.RawMessage   `json:"prompt"`
	Messages            []chatRequestMsg  `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
}

// handleTokenize answers vLLM's POST /tokenize: {count, max_model_len,
// tokens}. The count is the prompt_tokens a chat or completion request with
// the same input reports; the token ids are stand-ins (the simulator has no
// vocabulary to map text to), stable for the same text.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	eng := s.begin(w, r, &req)
	if eng == nil {
		return
	}
	var (
		text string
		n    int
		e    *apiError
	)
	switch {
	case req.Messages != nil:
		if len(req.Prompt) > 0 {
			writeAPIError(w, badRequest("prompt", "send either prompt or messages, not both"))
			return
		}
		text, n, e = chatPrompt(req.Messages, req.Tools, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	case len(req.Prompt) == 0 || string(req.Prompt) == "null" || string(req.Prompt) == `""`:
		// vLLM answers an empty prompt with no tokens.
	default:
		text, n, e = parsePrompt(req.Prompt, "prompt")
	}
	if e != nil {
		writeAPIError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": n, "max_model_len": eng.mc.MaxModelLen, "tokens": standInIDs(text, n)})
}

// standInIDs returns n token ids derived from text.
func standInIDs(text string, n int) []int {
	ids := make([]int, n)
	h := fnv.New32a()
	_, _ = h.Write([]byte(text))
	x := h.Sum32() | 1
	for i := range ids {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		ids[i] = int(x % 151643) // Qwen2's vocabulary size, for plausible ids
	}
	return ids
}

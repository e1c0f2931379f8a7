package relay

import (
	"net/http"

	"llmgate/internal/keys"
)

// The Gateway API Inference Extension's request headers, read by an
// InferencePool's endpoint picker: who the request is for (requests with
// one id share capacity fairly) and which InferenceObjective (priority,
// goals) it belongs to.
const (
	HeaderFairnessID = "X-Gateway-Inference-Fairness-Id"
	HeaderObjective  = "X-Gateway-Inference-Objective"
)

// inferenceHeaders sets the Inference Extension's headers from the
// caller's key, for a backend with inference_extension: the key's id as
// the fairness id ("master" for the master key, one flow of its own), its
// objective when it has one. Whatever the backend's configured headers
// said is replaced: the pool must see the gateway's reading of the
// caller. A client's own copies never reach any backend, since the
// upstream request is built afresh and copies no client header but
// anthropic-beta.
func inferenceHeaders(h http.Header, p keys.Principal) {
	h[HeaderFairnessID] = []string{p.KeyID()}
	if p.Key != nil && p.Key.Objective != "" {
		h[HeaderObjective] = []string{p.Key.Objective}
	} else {
		delete(h, HeaderObjective)
	}
}

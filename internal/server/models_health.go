package server

import (
	"encoding/json"
	"net/http"

	"llmgate/internal/keys"
	"llmgate/internal/router"
)

// ModelsHealth is the answer of GET /v1/models?health=1: every model the
// caller may use with the live state of each deployment.
type ModelsHealth struct {
	Object string               `json:"object"` // "list"
	Data   []router.ModelHealth `json:"data"`
}

// handleModelsHealth lists models with their deployments' health: breaker
// state, requests in flight, recent latency and active check results.
func (s *Server) handleModelsHealth(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	t := s.tables.Load()
	out := ModelsHealth{Object: "list", Data: []router.ModelHealth{}}
	for _, name := range t.Models() {
		if !p.Master && !p.Key.Allows(name) {
			continue
		}
		route, err := t.Route(name)
		if err != nil {
			continue
		}
		mh := t.ModelHealth(route)
		if s.engines != nil && len(mh.Deployments) == len(route.Deployments) {
			for i, d := range route.Deployments {
				info := s.engines.Info(d.Backend, d.UpstreamModel)
				dh := &mh.Deployments[i]
				dh.Engine, dh.Tokenizer, dh.NoTokenizer = string(info.Kind), string(info.Tokenizer), info.NoTokenizer
				dh.ContextLength = s.engines.Known(route.ContextWindow, d.Backend, d.UpstreamModel).Tokens
				if dh.Engine == "" && !info.Learned.IsZero() {
					dh.Engine = "other"
				}
			}
		}
		out.Data = append(out.Data, mh)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
)

// handleModels lists every public model the caller may use; owned_by names
// the backend that serves it.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	if h := r.URL.Query().Get("health"); h != "" && h != "0" && h != "false" {
		s.handleModelsHealth(w, r, p)
		return
	}
	t := s.Table()
	list := openai.ModelList{Object: "list", Data: []openai.Model{}}
	created := s.started.Unix()
	for _, name := range t.Models() {
		if !p.Master && !p.Key.Allows(name) {
			continue
		}
		route, _ := t.Route(name)
		owner := "llmgate"
		if len(route.Deployments) > 0 && route.Deployments[0].Backend != nil {
			owner = route.Deployments[0].Backend.Name
		}
		list.Data = append(list.Data, openai.Model{ID: name, Object: "model", Created: created, OwnedBy: owner})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// handleModel answers GET /v1/models/{model} (the OpenAI SDKs'
// models.retrieve). Model names may contain "/" (Qwen/Qwen2.5-7B-Instruct):
// the whole rest of the path is the name. A model the key may not use is
// not found, as on OpenAI.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	route, err := policy.Resolve(s.Table(), p, name)
	if err != nil && apierror.From(err).Code == "model_not_allowed" {
		// As on OpenAI: a model the key may not use is not found.
		err = apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "model_not_found",
			"model %q is not available to this API key; GET /v1/models lists the models it may use", name)
	}
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	owner := "llmgate"
	if len(route.Deployments) > 0 && route.Deployments[0].Backend != nil {
		owner = route.Deployments[0].Backend.Name
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(openai.Model{ID: name, Object: "model", Created: s.started.Unix(), OwnedBy: owner})
}

// handleNotFound explains the path mistakes that cost people hours: a base
// URL that already ends in /v1 (giving /v1/v1/...), or one without /v1.
func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	host := "http://" + r.Host
	var msg string
	switch {
	case strings.Contains(p, "/v1/v1"):
		fixed := strings.Replace(p, "/v1/v1", "/v1", 1)
		msg = fmt.Sprintf("no route %s: the path has /v1 twice; your client's base URL already ends in /v1, so the client adds it again. Set the base URL to %s/v1 and keep paths like %s", p, host, fixed)
	case knownSuffix(p) != "":
		msg = fmt.Sprintf("no route %s: the path lacks the /v1 prefix; set the client's base URL to %s/v1 (the endpoint is %s)", p, host, "/v1"+knownSuffix(p))
	case p == "/" || p == "":
		msg = fmt.Sprintf("this is llmgate; the OpenAI-compatible API is at %s/v1 (POST /v1/chat/completions, GET /v1/models)", host)
	default:
		msg = fmt.Sprintf("no route %s %s: llmgate serves POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank, /v1/messages, /v1/responses and GET /v1/models under %s/v1", r.Method, p, host)
	}
	openai.WriteError(w, apierror.New(http.StatusNotFound, apierror.KindNotFound, "unknown_route", msg))
}

var endpointSuffixes = []string{"/chat/completions", "/completions", "/embeddings", "/rerank", "/models", "/messages", "/responses"}

func knownSuffix(p string) string {
	for _, s := range endpointSuffixes {
		if p == s || strings.HasSuffix(p, s) && !strings.HasPrefix(p, "/v1/") {
			return s
		}
	}
	return ""
}

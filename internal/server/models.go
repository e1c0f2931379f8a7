package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
	"llmgate/internal/router"
)

// Models are listed in OpenAI's shape, or in Anthropic's when the request
// carries anthropic-version (the Anthropic SDKs' models.list and
// models.retrieve). Each entry says, when known, the model's context length
// (max_model_len, as vLLM lists it), which clients such as opencode use to
// size their requests.

// modelsTimeout bounds how long a listing waits for context lengths not
// learned yet.
const modelsTimeout = 2 * time.Second

// handleModels lists every public model the caller may use; owned_by names
// the backend that serves it.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	if h := r.URL.Query().Get("health"); h != "" && h != "0" && h != "false" {
		s.handleModelsHealth(w, r, p)
		return
	}
	t := s.tables.Load()
	var routes []*router.Route
	for _, name := range t.Models() {
		if !p.Master && !p.Key.Allows(name) {
			continue
		}
		route, _ := t.Route(name)
		routes = append(routes, route)
	}
	lens := s.contextLengths(r.Context(), routes)
	if anthropicRequest(r) {
		s.anthropicModelList(w, r, routes)
		return
	}
	list := openai.ModelList{Object: "list", Data: make([]openai.Model, 0, len(routes))}
	for i, route := range routes {
		list.Data = append(list.Data, s.openaiModel(route, lens[i]))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

func (s *Server) openaiModel(route *router.Route, contextLen int) openai.Model {
	return openai.Model{ID: route.Model, Object: "model", Created: s.started.Unix(), OwnedBy: owner(route), MaxModelLen: contextLen}
}

func owner(route *router.Route) string {
	if len(route.Deployments) > 0 && route.Deployments[0].Backend != nil {
		return route.Deployments[0].Backend.Name
	}
	return "llmgate"
}

// contextLengths returns each route's context length (0 when unknown),
// asking the backends in parallel for those not learned yet.
func (s *Server) contextLengths(ctx context.Context, routes []*router.Route) []int {
	out := make([]int, len(routes))
	if s.engines == nil {
		for i, r := range routes {
			out[i] = r.ContextWindow
		}
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, modelsTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range routes {
		if len(r.Deployments) == 0 {
			out[i] = r.ContextWindow
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := r.Deployments[0]
			out[i] = s.engines.Lookup(ctx, r.ContextWindow, d.Backend, d.UpstreamModel).Tokens
		}()
	}
	wg.Wait()
	return out
}

// handleModel answers GET /v1/models/{model} (the SDKs' models.retrieve).
// Model names may contain "/" (Qwen/Qwen2.5-7B-Instruct): the whole rest
// of the path is the name. A model the key may not use is not found, as
// on OpenAI.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	route, err := policy.Resolve(s.tables.Load(), p, name)
	if err != nil && apierror.From(err).Code == "model_not_allowed" {
		err = apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "model_not_found",
			"model %q is not available to this API key; GET /v1/models lists the models it may use", name)
	}
	if err != nil {
		s.modelsError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if anthropicRequest(r) {
		_ = json.NewEncoder(w).Encode(s.anthropicModel(route))
		return
	}
	_ = json.NewEncoder(w).Encode(s.openaiModel(route, s.contextLengths(r.Context(), []*router.Route{route})[0]))
}

// anthropicRequest reports whether a models request comes from an
// Anthropic client.
func anthropicRequest(r *http.Request) bool { return r.Header.Get("Anthropic-Version") != "" }

// modelsError renders a models error in the envelope of the client's API.
func (s *Server) modelsError(w http.ResponseWriter, r *http.Request, err error) {
	refused(w, err)
	if anthropicRequest(r) {
		anthropic.WriteError(w, err)
		return
	}
	openai.WriteError(w, err)
}

// anthropicModelInfo is Anthropic's model object.
type anthropicModelInfo struct {
	Type        string `json:"type"` // "model"
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"` // RFC 3339
}

func (s *Server) anthropicModel(route *router.Route) anthropicModelInfo {
	return anthropicModelInfo{Type: "model", ID: route.Model, DisplayName: route.Model,
		CreatedAt: s.started.UTC().Format(time.RFC3339)}
}

// anthropicModelList answers GET /v1/models for an Anthropic client, with
// its paging: limit (1-1000, default 20), after_id, before_id.
func (s *Server) anthropicModelList(w http.ResponseWriter, r *http.Request, routes []*router.Route) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			s.modelsError(w, r, apierror.InvalidRequest("invalid_limit", "limit must be a whole number between 1 and 1000, not %q", v))
			return
		}
		limit = n
	}
	from, to := 0, len(routes)
	index := func(id, param string) (int, bool) {
		for i, rt := range routes {
			if rt.Model == id {
				return i, true
			}
		}
		e := apierror.InvalidRequest("invalid_cursor", "%s %q is not a model this key may list", param, id)
		e.Param = param
		s.modelsError(w, r, e)
		return 0, false
	}
	if id := q.Get("after_id"); id != "" {
		i, ok := index(id, "after_id")
		if !ok {
			return
		}
		from = i + 1
	}
	if id := q.Get("before_id"); id != "" {
		i, ok := index(id, "before_id")
		if !ok {
			return
		}
		to = i
		if q.Get("after_id") == "" {
			from = max(0, to-limit) // the page just before before_id
		}
	}
	page := routes[min(from, to):to]
	hasMore := len(page) > limit || (q.Get("before_id") != "" && from > 0)
	if len(page) > limit {
		page = page[:limit]
	}
	out := struct {
		Data    []anthropicModelInfo `json:"data"`
		HasMore bool                 `json:"has_more"`
		FirstID *string              `json:"first_id"`
		LastID  *string              `json:"last_id"`
	}{Data: make([]anthropicModelInfo, 0, len(page)), HasMore: hasMore}
	for _, rt := range page {
		out.Data = append(out.Data, s.anthropicModel(rt))
	}
	if len(page) > 0 {
		first, last := page[0].Model, page[len(page)-1].Model
		out.FirstID, out.LastID = &first, &last
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// handleNotFound explains the path mistakes that cost people hours: a base
// URL that already ends in /v1 (giving /v1/v1/...), or one without /v1.
func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	host := "http://" + r.Host
	if r.TLS != nil {
		host = "https://" + r.Host
	}
	var msg string
	switch {
	case strings.Contains(p, "/v1/v1"):
		fixed := strings.Replace(p, "/v1/v1", "/v1", 1)
		msg = fmt.Sprintf("no route %s: the path has /v1 twice; your client's base URL already ends in /v1, so the client adds it again. Set the base URL to %s/v1 and keep paths like %s", p, host, fixed)
	case knownSuffix(p) != "":
		msg = fmt.Sprintf("no route %s: the path lacks the /v1 prefix; set the client's base URL to %s/v1 (the endpoint is %s)", p, host, "/v1"+knownSuffix(p))
	case p == "/" || p == "":
		msg = fmt.Sprintf("this is llmgate: the OpenAI-compatible API is at %s/v1 (POST /v1/chat/completions, GET /v1/models), the Anthropic Messages API at %s/v1/messages", host, host)
		if s.console {
			msg += fmt.Sprintf(", and the web console at %s/ui/", host)
		}
	default:
		msg = fmt.Sprintf("no route %s %s: llmgate serves POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank, /v1/messages, /v1/responses and GET /v1/models under %s/v1", r.Method, p, host)
	}
	e := apierror.New(http.StatusNotFound, apierror.KindNotFound, "unknown_route", msg)
	refused(w, e)
	openai.WriteError(w, e)
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

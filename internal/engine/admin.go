package engine

import (
	"encoding/json"
	"net/http"
	"strconv"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
)

// AdminPrefix is where Handler is mounted.
const AdminPrefix = "/admin/engines"

// Handler serves the engines admin API, for the master key only:
//
//	GET  /admin/engines                  {"engines": [Status...]}
//	GET  /admin/engines/{name}           Status
//	POST /admin/engines/{name}/load      start and wait until ready; Status
//	POST /admin/engines/{name}/unload    stop and wait until exited; Status
//	GET  /admin/engines/{name}/logs      ?lines=N&after=SEQ; {"lines": [Line...]}
func (m *Manager) Handler(auth func(*http.Request) (keys.Principal, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+AdminPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"engines": m.List()})
	})
	mux.HandleFunc("GET "+AdminPrefix+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := m.Get(r.PathValue("name"))
		if err != nil {
			openai.WriteError(w, err)
			return
		}
		writeJSON(w, st)
	})
	mux.HandleFunc("POST "+AdminPrefix+"/{name}/load", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := m.Load(r.Context(), name); err != nil {
			openai.WriteError(w, err)
			return
		}
		st, _ := m.Get(name)
		writeJSON(w, st)
	})
	mux.HandleFunc("POST "+AdminPrefix+"/{name}/unload", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := m.Unload(r.Context(), name); err != nil {
			openai.WriteError(w, err)
			return
		}
		st, _ := m.Get(name)
		writeJSON(w, st)
	})
	mux.HandleFunc("GET "+AdminPrefix+"/{name}/logs", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("lines"))
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		lines, err := m.Logs(r.PathValue("name"), n, after)
		if err != nil {
			openai.WriteError(w, err)
			return
		}
		if lines == nil {
			lines = []Line{}
		}
		writeJSON(w, map[string]any{"lines": lines})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := auth(r)
		if err != nil {
			openai.WriteError(w, err)
			return
		}
		if !p.Master {
			openai.WriteError(w, apierror.New(http.StatusForbidden, apierror.KindPermission, "master_key_required",
				"the engines admin API needs the master key (LLMGATE_MASTER_KEY), not a virtual key"))
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			openai.WriteError(w, apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "not_found",
				"%s %s is not an engines admin endpoint: use GET %s, GET %s/NAME, POST %s/NAME/load, POST %s/NAME/unload or GET %s/NAME/logs",
				r.Method, r.URL.Path, AdminPrefix, AdminPrefix, AdminPrefix, AdminPrefix, AdminPrefix))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

package connect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ModelInfo is what the gateway's GET /v1/models says about one model.
type ModelInfo struct {
	ID string
	// ContextLength is the model's context in tokens; 0 when unknown.
	ContextLength int
	// ContextSource names where ContextLength came from: a field of the
	// model entry ("max_model_len", "context_window", "context_length") or
	// "--context-length".
	ContextSource string
	// MaxOutput is the model's own output cap when the entry reports one
	// (max_output_tokens); 0 when unknown.
	MaxOutput int
}

// Catalog is the gateway's model list as connect read it.
type Catalog struct {
	// URL is where it was read.
	URL    string
	Models []ModelInfo
}

// Lookup returns the entry of a model.
func (c *Catalog) Lookup(id string) (ModelInfo, bool) {
	if c == nil {
		return ModelInfo{}, false
	}
	for _, m := range c.Models {
		if m.ID == id {
			return m, true
		}
	}
	return ModelInfo{}, false
}

// StatusError is the gateway's answer to the model list other than 200.
type StatusError struct {
	URL     string
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Message)
}

// Refused reports whether the gateway refused the key (401 or 403).
func (e *StatusError) Refused() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// contextFields are the model-entry fields that give a context length, in
// the order they are trusted: vLLM's max_model_len, the context_window some
// gateways (and llmgate's config) use, and OpenRouter's context_length.
var contextFields = []string{"max_model_len", "context_window", "context_length"}

// FetchModels reads GET <base>/v1/models with the key, as the client would.
func FetchModels(ctx context.Context, o Options) (*Catalog, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	ep, err := o.endpoint()
	if err != nil {
		return nil, err
	}
	return fetchModels(ctx, ep, o.HTTPClient)
}

func fetchModels(ctx context.Context, ep endpoint, client *http.Client) (*Catalog, error) {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	url := ep.openai + "/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if ep.key != "" {
		req.Header.Set("Authorization", "Bearer "+ep.key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{URL: url, Status: resp.StatusCode, Message: truncate(string(body), 200)}
	}
	var list struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: not a model list: %w", url, err)
	}
	c := &Catalog{URL: url}
	for _, entry := range list.Data {
		var id string
		if json.Unmarshal(entry["id"], &id) != nil || id == "" {
			continue
		}
		m := ModelInfo{ID: id}
		for _, f := range contextFields {
			if n := positiveInt(entry[f]); n > 0 {
				m.ContextLength, m.ContextSource = n, f
				break
			}
		}
		m.MaxOutput = positiveInt(entry["max_output_tokens"])
		c.Models = append(c.Models, m)
	}
	sort.Slice(c.Models, func(i, j int) bool { return c.Models[i].ID < c.Models[j].ID })
	return c, nil
}

// positiveInt reads a JSON number (or numeric string) that is a positive
// integer, else 0.
func positiveInt(raw json.RawMessage) int {
	if len(raw) == 0 {
		return 0
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0
		}
		v, err := strconv.Atoi(s)
		if err != nil {
			return 0
		}
		f = float64(v)
	}
	if f < 1 || f != float64(int(f)) {
		return 0
	}
	return int(f)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// OpenCodeOutputCap is opencode's own ceiling on the output it requests;
// a limit above it changes nothing.
const OpenCodeOutputCap = 32000

// OutputLimit is the output limit connect writes for a model: a quarter of
// the context, so that a 32k model still leaves 24k tokens for a real
// prompt (agents send 10-20k of system prompt and tools before any work),
// but no more than the model's own output cap when the gateway reports one
// and no more than 32000 (what the clients ask for by default). It returns
// 0 when the context is unknown.
func OutputLimit(m ModelInfo) int {
	if m.ContextLength <= 0 {
		return 0
	}
	out := min(m.ContextLength/4, OpenCodeOutputCap)
	if m.MaxOutput > 0 {
		out = min(out, m.MaxOutput)
	}
	return max(out, 1)
}

// outputRule explains OutputLimit's choice for one model.
func outputRule(m ModelInfo, out int) string {
	rule := fmt.Sprintf("min(context/4 = %d, %d", m.ContextLength/4, OpenCodeOutputCap)
	if m.MaxOutput > 0 {
		rule += fmt.Sprintf(", the model's max_output_tokens %d", m.MaxOutput)
	}
	return fmt.Sprintf("%d = %s)", out, rule)
}

// sizes is what connect knows about the models' context lengths for one
// plan, and the assumptions it reports.
type sizes struct {
	chosen  ModelInfo   // the --model entry; ContextLength 0 when unknown
	models  []ModelInfo // the gateway's models; nil when its list was not read
	source  string      // where the list was read, or why it was not
	read    bool
	assumed []string
}

func (o *Options) sizes(ep endpoint) *sizes {
	z := &sizes{chosen: ModelInfo{ID: ep.model}}
	switch {
	case o.Models != nil:
		z.read, z.models, z.source = true, o.Models.Models, o.Models.URL
		if m, ok := o.Models.Lookup(ep.model); ok {
			z.chosen = m
		}
	case o.ModelsErr != nil:
		z.source = "the gateway's model list could not be read (" + o.ModelsErr.Error() + ")"
	default:
		z.source = "the gateway's model list was not read"
	}
	if o.ContextLength > 0 && ep.model != "" {
		z.chosen.ContextLength, z.chosen.ContextSource = o.ContextLength, "--context-length"
	}
	return z
}

// note records an assumption.
func (z *sizes) note(format string, args ...any) {
	z.assumed = append(z.assumed, fmt.Sprintf(format, args...))
}

// contextOf says where a model's context length came from, or why there
// is none.
func (z *sizes) contextOf(m ModelInfo) string {
	switch {
	case m.ContextSource == "--context-length":
		return fmt.Sprintf("context length of %s: %d tokens (--context-length)", m.ID, m.ContextLength)
	case m.ContextLength > 0:
		return fmt.Sprintf("context length of %s: %d tokens (%s in %s)", m.ID, m.ContextLength, m.ContextSource, z.source)
	}
	// --context-length sizes the chosen model only.
	hint := "; pass --context-length N"
	if m.ID != z.chosen.ID {
		hint = "; rerun with --model " + m.ID + " --context-length N to size it"
	}
	if !z.read {
		return fmt.Sprintf("context length of %s unknown: %s%s", m.ID, z.source, hint)
	}
	for _, g := range z.models {
		if g.ID == m.ID {
			return fmt.Sprintf("context length of %s unknown: its entry in %s has no max_model_len, context_window or context_length%s", m.ID, z.source, hint)
		}
	}
	return fmt.Sprintf("context length of %s unknown: %s does not list it%s", m.ID, z.source, hint)
}

// lists reports whether the gateway's model list has a model whose id
// starts with prefix (false when the list was not read).
func (z *sizes) lists(prefix string) bool {
	for _, m := range z.models {
		if strings.HasPrefix(m.ID, prefix) {
			return true
		}
	}
	return false
}

// listed is " (the gateway lists: a, b, …)" for a note, or "" when the
// list was not read or is empty.
func (z *sizes) listed() string {
	if len(z.models) == 0 {
		return ""
	}
	ids := make([]string, 0, 8)
	for i, m := range z.models {
		if i == 8 {
			ids = append(ids, fmt.Sprintf("… %d in all", len(z.models)))
			break
		}
		ids = append(ids, m.ID)
	}
	return " (the gateway lists: " + strings.Join(ids, ", ") + ")"
}

// forModels is the model list opencode gets: the gateway's models, and the
// chosen one (first) whether or not the gateway lists it.
func (z *sizes) forModels() []ModelInfo {
	var out []ModelInfo
	if z.chosen.ID != "" {
		out = append(out, z.chosen)
	}
	for _, m := range z.models {
		if m.ID != z.chosen.ID {
			out = append(out, m)
		}
	}
	return out
}

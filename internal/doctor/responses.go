package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// checkResponses posts a minimal OpenAI Responses API request, which Codex
// uses exclusively (wire_api = "responses"). A missing endpoint is a warning:
// chat-completions clients do not need it.
func (d *diagnosis) checkResponses(ctx context.Context) {
	c := Check{ID: "responses", Title: "Responses API (Codex)"}
	defer func() { d.add(c) }()
	if d.blocked != "" {
		c.Status, c.Detail = StatusSkip, "skipped: "+d.blocked+" failed"
		return
	}
	rctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req := map[string]any{"model": d.model, "input": probePrompt, "max_output_tokens": 16}
	r := d.do(rctx, http.MethodPost, d.api+"/responses", d.bearer(d.keyForRequests), req)
	c.DurationMS = ms(r.dur)
	switch {
	case r.err != nil:
		c.Status, c.Detail, c.Fix = StatusFail, "POST /responses failed: "+shortErr(r.err), requestErrFix(r.err, d.opts.Timeout)
	case r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed:
		c.Status = StatusWarn
		c.Detail = fmt.Sprintf("POST %s/responses → HTTP %d: no Responses API", d.api, r.status)
		c.Fix = "Codex speaks only the Responses API: use a server that provides /v1/responses (llmgate serve translates it for any chat backend)."
	case !is2xx(r.status):
		c.Status = StatusFail
		c.Detail, c.Fix = d.explainStatus("POST /responses", r)
	default:
		var body struct {
			Object string          `json:"object"`
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Object != "response" || len(body.Output) == 0 {
			c.Status = StatusFail
			c.Detail = fmt.Sprintf("HTTP %d but the body is not a Responses API response: %s", r.status, quote(string(r.body), 160))
			c.Fix = "Successful answers need {\"object\":\"response\",\"output\":[…]}; errors a 4xx/5xx status."
			return
		}
		c.Status, c.Detail = StatusPass, "response status "+body.Status
	}
}

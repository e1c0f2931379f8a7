package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

// maxBody bounds what the doctor reads of any response.
const maxBody = 1 << 20

type httpResult struct {
	status int
	header http.Header
	body   []byte
	dur    time.Duration
	err    error
}

func (d *diagnosis) bearer(key string) map[string]string {
	if key == "" {
		return nil
	}
	return map[string]string{"Authorization": "Bearer " + key}
}

// do sends one request and reads a bounded body. body, when not nil, is
// encoded as JSON.
func (d *diagnosis) do(ctx context.Context, method, url string, headers map[string]string, body any) httpResult {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return httpResult{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return httpResult{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "llmgate-doctor")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := d.send(req)
	if err != nil {
		return httpResult{err: err, dur: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return httpResult{status: resp.StatusCode, header: resp.Header, body: b, dur: time.Since(start), err: err}
}

// postChat posts a chat completion request whose output limit is
// max_tokens, sent again as max_completion_tokens when the model refuses
// max_tokens (see useMaxCompletionTokens).
func (d *diagnosis) postChat(ctx context.Context, req map[string]any) httpResult {
	r := d.do(ctx, http.MethodPost, d.api+"/chat/completions", d.bearer(d.keyForRequests), req)
	if useMaxCompletionTokens(r, req) {
		r = d.do(ctx, http.MethodPost, d.api+"/chat/completions", d.bearer(d.keyForRequests), req)
	}
	return r
}

// useMaxCompletionTokens reports whether r refused req's max_tokens and
// asked for max_completion_tokens, as OpenAI's newer models do; req's
// limit is then moved to max_completion_tokens for the retry, the way
// those models' clients send it.
func useMaxCompletionTokens(r httpResult, req map[string]any) bool {
	if r.err != nil || r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "max_completion_tokens") {
		return false
	}
	req["max_completion_tokens"] = req["max_tokens"]
	delete(req, "max_tokens")
	return true
}

// send sends req with the doctor's client. A request sent on a kept-alive
// connection that the server had closed, with no byte of an answer back,
// is sent again on a fresh connection (the Transport does so for a request
// marked idempotent; a nil Idempotency-Key marks it without sending one),
// as llmgate does for its backends and bench for its targets: llama.cpp's
// llama-server closes a connection after each streamed answer while
// saying keep-alive. Such resends are counted for the keep-alive check.
func (d *diagnosis) send(req *http.Request) (*http.Response, error) {
	req.Header["Idempotency-Key"] = nil
	var conns atomic.Int32
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns.Add(1) }}
	resp, err := d.client.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if conns.Load() > 1 {
		d.resent.Add(1)
	}
	return resp, err
}

// checkKeepAlive reports requests that had to be resent because the
// server closed a kept-alive connection without answering: clients that
// reuse connections and do not retry fail now and then on such a server.
func (d *diagnosis) checkKeepAlive() {
	n := d.resent.Load()
	if n == 0 {
		return
	}
	d.add(Check{ID: "net.keepalive", Title: "keep-alive", Status: StatusWarn,
		Detail: fmt.Sprintf("the server closed %d kept-alive connection(s) without answering the next request on it (llama.cpp's llama-server does so after a streamed answer, while saying keep-alive); doctor resent those requests on fresh connections", n),
		Fix:    "Clients that reuse connections and do not retry fail now and then with EOF or \"connection reset\" here; the OpenAI and Anthropic SDKs retry by default (keep max_retries above 0), and llmgate in front resends such requests itself."})
}

// errorMessage pulls a human message out of an OpenAI, Anthropic or ad-hoc
// error body; it falls back to the start of the body.
func errorMessage(body []byte) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(body, &env) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(env.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(env.Error, &s) == nil && s != "":
			return s
		case env.Message != "":
			return env.Message
		case env.Detail != nil:
			return fmt.Sprint(env.Detail)
		}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return "(empty body)"
	}
	return strings.Trim(quote(string(body), 160), "“”")
}

func is2xx(s int) bool { return s >= 200 && s < 300 }

// checkAuthAndModels lists the models, which also proves the key, finds a
// corrected base URL on 404, and matches the requested model.
func (d *diagnosis) checkAuthAndModels(ctx context.Context) {
	if d.blocked != "" {
		d.skip("auth", "authentication")
		d.skip("models", "model list")
		return
	}
	rctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	r := d.do(rctx, http.MethodGet, d.api+"/models", d.bearer(d.keyForRequests), nil)
	if loc := r.header.Get("Location"); r.err == nil && r.status >= 300 && r.status < 400 && loc != "" {
		d.followRedirect(rctx, &r, loc)
	}
	if r.err != nil {
		d.add(Check{ID: "auth", Title: "authentication", Status: StatusFail, Detail: "GET " + d.api + "/models failed: " + shortErr(r.err),
			Fix: requestErrFix(r.err, d.opts.Timeout)})
		d.blocked = "HTTP"
		d.skip("models", "model list")
		return
	}
	if r.status == http.StatusNotFound {
		d.tryCorrectedURL(rctx, &r)
	}
	auth := Check{ID: "auth", Title: "authentication", DurationMS: ms(r.dur)}
	switch {
	case r.status == http.StatusUnauthorized || r.status == http.StatusForbidden:
		d.analyzeAuth(rctx, r, &auth)
		d.add(auth)
		if !d.authOK {
			d.blocked = "authentication"
			d.skip("models", "model list")
			return
		}
		r = d.do(rctx, http.MethodGet, d.api+"/models", d.bearer(d.keyForRequests), nil)
	case is2xx(r.status):
		d.authOK = true
		auth.Status = StatusPass
		if d.key == "" {
			auth.Detail = "no key sent and the server accepted the request"
		} else {
			auth.Detail = "key " + Fingerprint(d.key) + " accepted"
			if bogus := d.do(rctx, http.MethodGet, d.api+"/models", d.bearer("sk-llmgate-doctor-invalid-key"), nil); bogus.err == nil && is2xx(bogus.status) {
				auth.Detail += "; the server also accepts an invalid key, so it does not check keys"
			}
		}
		d.add(auth)
	default:
		auth.Status, auth.Detail = StatusSkip, fmt.Sprintf("GET /models answered HTTP %d; authentication is checked by the chat request", r.status)
		d.add(auth)
	}
	d.checkModelList(r)
}

// followRedirect reports a redirect of the model list and continues with
// the target, so one redirect does not hide every other finding.
func (d *diagnosis) followRedirect(ctx context.Context, r *httpResult, loc string) {
	req, _ := http.NewRequest(http.MethodGet, d.api+"/models", nil)
	target, err := req.URL.Parse(loc)
	if err != nil {
		return
	}
	base := strings.TrimSuffix(trimSlash(target.String()), "/models")
	c := Check{ID: "url.redirect", Title: "redirect", Status: StatusFail,
		Detail: fmt.Sprintf("GET %s/models → HTTP %d to %s; clients turn POST into GET on 301/302 and drop the Authorization header across hosts", d.api, r.status, target),
		Fix:    "Use the redirect target as the base URL: " + base + "."}
	d.add(c)
	d.api = base
	*r = d.do(ctx, http.MethodGet, d.api+"/models", d.bearer(d.keyForRequests), nil)
}

// tryCorrectedURL probes likely fixes of a base URL that answered 404 and,
// when one answers, adds a failing "url.path" check and switches to it.
func (d *diagnosis) tryCorrectedURL(ctx context.Context, r *httpResult) {
	for _, cand := range urlCandidates(d.api) {
		rc := d.do(ctx, http.MethodGet, cand+"/models", d.bearer(d.keyForRequests), nil)
		if rc.err != nil || rc.status == http.StatusNotFound || rc.status == http.StatusMethodNotAllowed {
			continue
		}
		if is2xx(rc.status) && !json.Valid(rc.body) {
			continue
		}
		d.add(Check{ID: "url.path", Title: "API path", Status: StatusFail,
			Detail: fmt.Sprintf("GET %s/models → HTTP 404, but %s/models → HTTP %d; the checks below use %s", d.api, cand, rc.status, cand),
			Fix:    "Set the base URL to " + cand + "."})
		d.api = cand
		*r = rc
		return
	}
}

// analyzeAuth explains a 401 or 403 by retrying with the variants clients
// get wrong: a key with quotes or a "Bearer" prefix, and other headers.
func (d *diagnosis) analyzeAuth(ctx context.Context, r httpResult, c *Check) {
	c.Status = StatusFail
	msg := errorMessage(r.body)
	where := ""
	if d.keySrc != "" {
		where = " from " + d.keySrc
	}
	try := func(h map[string]string) bool {
		x := d.do(ctx, http.MethodGet, d.api+"/models", h, nil)
		return x.err == nil && is2xx(x.status)
	}
	if clean := cleanKey(d.key); clean != d.key && clean != "" && try(d.bearer(clean)) {
		c.Detail = fmt.Sprintf("HTTP %d with the key as given (%s); the same key without quotes, blanks or a \"Bearer\" prefix is accepted", r.status, msg)
		c.Fix = "Set " + orFlag(d.keyVar) + " to the bare key " + Fingerprint(clean) + ": clients add \"Authorization: Bearer\" themselves."
		d.keyForRequests, d.authOK = clean, true
		return
	}
	if d.key == "" {
		c.Detail = fmt.Sprintf("HTTP %d without a key: %s", r.status, msg)
		c.Fix = "The server needs a key: export OPENAI_API_KEY=<key> or pass --api-key. " + keyFix(r.header)
		return
	}
	clean := cleanKey(d.key)
	if try(map[string]string{"x-api-key": clean}) {
		c.Detail = fmt.Sprintf("HTTP %d with Authorization: Bearer, but the key is accepted in x-api-key", r.status)
		c.Fix = "This server wants the Anthropic-style x-api-key header, which OpenAI clients do not send; configure it to accept Bearer tokens."
		return
	}
	if try(map[string]string{"api-key": clean}) {
		c.Detail = fmt.Sprintf("HTTP %d with Authorization: Bearer, but the key is accepted in the Azure-style api-key header", r.status)
		c.Fix = "Use an Azure OpenAI client setting (api-key header) for this endpoint, or put llmgate in front of it."
		return
	}
	if wa := r.header.Get("WWW-Authenticate"); wa != "" {
		msg += " (WWW-Authenticate: " + wa + ")"
	}
	if r.status == http.StatusForbidden {
		c.Detail = fmt.Sprintf("HTTP 403: key %s%s is recognised but not allowed: %s", Fingerprint(d.key), where, msg)
		c.Fix = "Grant the key access (scopes, models, budget, IP allow-list) or use a key that has it; 403 means the key itself is valid."
		return
	}
	c.Detail = fmt.Sprintf("HTTP 401: key %s%s is not accepted: %s", Fingerprint(d.key), where, msg)
	c.Fix = keyFix(r.header)
}

// keyFix says where the key for a server that refused one comes from,
// by what the server says it is.
func keyFix(h http.Header) string {
	server := strings.ToLower(h.Get("Server"))
	switch {
	case strings.Contains(strings.ToLower(h.Get("WWW-Authenticate")), `realm="llmgate"`):
		return "Use a current key issued by this gateway (llmgate keys list shows them) or its master key; a key from another provider or a revoked key gets 401."
	case strings.HasPrefix(server, "llama.cpp"):
		return "This is llama.cpp's llama-server: use the key it was started with (its --api-key or LLAMA_API_KEY)."
	case strings.HasPrefix(server, "uvicorn"):
		return "This looks like a Python engine server (vLLM, SGLang): use the key it was started with (--api-key; vLLM also reads VLLM_API_KEY)."
	}
	return "Use a current key issued by this endpoint's provider; a key from another provider or a revoked key gets 401."
}

func orFlag(v string) string {
	if v == "" {
		return "--api-key"
	}
	return v
}

func (d *diagnosis) checkModelList(r httpResult) {
	c := Check{ID: "models", Title: "model list", DurationMS: ms(r.dur)}
	defer func() { d.add(c) }()
	if !is2xx(r.status) {
		c.Status = StatusWarn
		c.Detail = fmt.Sprintf("GET %s/models → HTTP %d: %s", d.api, r.status, errorMessage(r.body))
		c.Fix = "Clients that pick models from /models (Cline, opencode, Open WebUI) will show none; pass the model name explicitly."
		if r.status >= 500 {
			c.Status, c.Fix = StatusFail, "The server failed listing models; check its logs."
		}
		return
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || list.Data == nil {
		c.Status = StatusFail
		c.Detail = "HTTP 200 but the body is not an OpenAI model list: " + quote(string(r.body), 120)
		c.Fix = "Point the base URL at the API (usually …/v1), not at a web page or another service."
		if bytes.Contains(bytes.ToLower(r.body[:min(len(r.body), 512)]), []byte("<html")) || bytes.Contains(bytes.ToLower(r.body[:min(len(r.body), 512)]), []byte("<!doctype")) {
			c.Detail = "HTTP 200 but the body is an HTML page: " + quote(string(r.body), 80)
		}
		return
	}
	for _, m := range list.Data {
		d.models = append(d.models, m.ID)
	}
	shown := strings.Join(d.models[:min(len(d.models), 5)], ", ")
	if len(d.models) > 5 {
		shown += ", …"
	}
	switch {
	case len(d.models) == 0:
		c.Status, c.Detail = StatusWarn, "the server lists no models"
		c.Fix = "Load or configure a model on the server; clients that read /models will show nothing."
	case d.model == "":
		c.Status = StatusPass
		d.model, d.modelSrc = d.models[0], "first listed model"
		c.Detail = fmt.Sprintf("%s (%s); no model given, testing %s", plural(len(d.models), "model"), shown, d.model)
	case contains(d.models, d.model):
		c.Status, c.Detail = StatusPass, fmt.Sprintf("%s; %s is served", plural(len(d.models), "model"), d.model)
	default:
		near := Nearest(d.model, d.models, 3)
		c.Status = StatusFail
		c.Detail = fmt.Sprintf("model %q (from %s) is not among the %s served (%s)", d.model, d.modelSrc, plural(len(d.models), "model"), shown)
		use := d.models[0]
		if len(near) > 0 {
			c.Detail += "; nearest: " + strings.Join(near, ", ")
			use = near[0]
		}
		c.Detail += "; the checks below use " + use
		c.Fix = "Use a served model name, e.g. --model " + use + " (and the same name in the client's settings)."
		d.model = use
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func requestErrFix(err error, timeout time.Duration) string {
	if isTimeout(err) {
		return fmt.Sprintf("No answer within %s: the model may still be loading; retry, or raise --timeout.", timeout)
	}
	if strings.Contains(err.Error(), "malformed HTTP response") || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return "The server speaks plain HTTP: use http:// in the base URL."
	}
	return "Check that the server is up and the base URL's host and port are right."
}

// explainStatus turns a non-2xx answer to a generation request into a
// detail and a fix.
func (d *diagnosis) explainStatus(what string, r httpResult) (detail, fix string) {
	msg := errorMessage(r.body)
	detail = fmt.Sprintf("%s → HTTP %d: %s", what, r.status, msg)
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "http request to an https server"):
		fix = "The server expects TLS: use https:// in the base URL."
	case r.status == http.StatusNotFound && strings.Contains(lower, "model"):
		fix = "Use a model name the server serves (see the model list check)."
	case r.status == http.StatusNotFound:
		fix = "Check the base URL path: it should contain /v1 exactly once and no endpoint path."
	case r.status == http.StatusUnauthorized:
		fix = "Use a key this server accepts for this endpoint (see the authentication check)."
	case r.status == http.StatusForbidden:
		fix = "The key may not use model " + d.model + " or this endpoint; grant it or use another key."
	case r.status == http.StatusTooManyRequests:
		fix = "Rate limit or budget reached; wait"
		if ra := r.header.Get("Retry-After"); ra != "" {
			fix += " " + ra + " s (Retry-After)"
		}
		fix += " or raise the key's limits."
	case r.status == http.StatusBadRequest || r.status == http.StatusUnprocessableEntity:
		fix = "The server rejected a minimal request; check that the model supports this API (a base model may lack a chat template)."
	case r.status >= 500:
		fix = "The server or its upstream failed; check the server's log for this request."
	default:
		fix = "Check the server's documentation for HTTP " + fmt.Sprint(r.status) + "."
	}
	return detail, fix
}

const probePrompt = "Reply with the single word OK."

// checkChat sends one minimal non-streaming chat completion and checks the
// body has choices, which clients index without looking.
func (d *diagnosis) checkChat(ctx context.Context) {
	c := Check{ID: "chat", Title: "chat completion"}
	defer func() { d.add(c) }()
	if d.blocked != "" {
		c.Status, c.Detail = StatusSkip, "skipped: "+d.blocked+" failed"
		return
	}
	if d.model == "" {
		c.Status, c.Detail = StatusFail, "no model to test: none given and none listed"
		c.Fix = "Pass --model (or set OPENAI_MODEL) to a model the server serves."
		d.blocked = "model"
		return
	}
	rctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req := map[string]any{"model": d.model, "max_tokens": 16, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": probePrompt}}}
	r := d.postChat(rctx, req)
	c.DurationMS = ms(r.dur)
	if r.err != nil {
		c.Status, c.Detail, c.Fix = StatusFail, "POST /chat/completions failed: "+shortErr(r.err), requestErrFix(r.err, d.opts.Timeout)
		return
	}
	if !is2xx(r.status) {
		c.Status = StatusFail
		c.Detail, c.Fix = d.explainStatus("POST /chat/completions", r)
		return
	}
	var body struct {
		Choices *[]struct {
			Message *struct {
				Content          *string         `json:"content"`
				ReasoningContent string          `json:"reasoning_content"`
				Reasoning        string          `json:"reasoning"` // vLLM's newer name
				ToolCalls        json.RawMessage `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Choices == nil || len(*body.Choices) == 0 || (*body.Choices)[0].Message == nil {
		c.Status = StatusFail
		c.Detail = fmt.Sprintf("HTTP %d but the body has no choices[0].message, so clients crash reading it: %s", r.status, quote(string(r.body), 160))
		c.Fix = "The server (or a proxy in between) must report errors with a 4xx/5xx status and an error envelope, not HTTP 200."
		if err != nil {
			c.Detail = fmt.Sprintf("HTTP %d but the body is not JSON: %s", r.status, quote(string(r.body), 160))
		}
		return
	}
	ch := (*body.Choices)[0]
	text := ""
	if ch.Message.Content != nil {
		text = *ch.Message.Content
	}
	reasoning := ch.Message.ReasoningContent + ch.Message.Reasoning
	c.Status = StatusPass
	c.Detail = fmt.Sprintf("%s answered %s (finish_reason %s)", d.model, quote(text, 40), ch.FinishReason)
	if text == "" && reasoning != "" {
		// A thinking model cut at max_tokens while still reasoning.
		c.Detail = fmt.Sprintf("%s answered only in its reasoning (%s, %d characters; finish_reason %s)", d.model,
			quote(reasoning, 40), len(reasoning), ch.FinishReason)
	}
	switch {
	case text == "" && reasoning == "" && len(ch.Message.ToolCalls) == 0:
		c.Status = StatusWarn
		c.Fix = "The model returned no text; check its chat template and that max_tokens is not consumed by hidden reasoning."
	case body.Usage == nil:
		c.Status = StatusWarn
		c.Detail += "; no usage in the response"
		c.Fix = "Clients that track tokens or cost will see none; use a server version that reports usage."
	default:
		c.Detail += fmt.Sprintf(", %d prompt + %d completion tokens", body.Usage.PromptTokens, body.Usage.CompletionTokens)
	}
}

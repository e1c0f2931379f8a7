package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"llmgate/internal/sse"
)

// anthropicVersion is the API version header every Anthropic client sends.
const anthropicVersion = "2023-06-01"

// anthropicRoot is the URL Claude Code's ANTHROPIC_BASE_URL should hold: the
// OpenAI base without its /v1, because Claude Code appends /v1/messages.
func (d *diagnosis) anthropicRoot() string {
	return strings.TrimSuffix(d.api, "/v1")
}

// checkAnthropic posts a minimal Messages request the way Claude Code does,
// then streams one and checks the event sequence the SDKs depend on.
func (d *diagnosis) checkAnthropic(ctx context.Context) {
	c := Check{ID: "anthropic", Title: "Anthropic Messages API"}
	if d.blocked != "" {
		d.skip("anthropic", c.Title)
		d.skip("anthropic.stream", "Anthropic streaming")
		return
	}
	url := d.anthropicRoot() + "/v1/messages"
	key := cleanKey(d.keyForRequests)
	hdr := func(bearer bool) map[string]string {
		h := map[string]string{"anthropic-version": anthropicVersion}
		if key != "" && bearer {
			h["Authorization"] = "Bearer " + key
		} else if key != "" {
			h["x-api-key"] = key
		}
		return h
	}
	rctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req := map[string]any{"model": d.model, "max_tokens": 16,
		"messages": []map[string]string{{"role": "user", "content": probePrompt}}}
	r := d.do(rctx, http.MethodPost, url, hdr(false), req)
	c.DurationMS = ms(r.dur)
	bearer := false
	note := ""
	if r.err == nil && r.status == http.StatusUnauthorized && key != "" {
		// Servers that check "Authorization: Bearer" on every /v1 path (vLLM
		// with --api-key) answer 401 before routing; the Bearer retry shows
		// whether the endpoint exists at all.
		if rb := d.do(rctx, http.MethodPost, url, hdr(true), req); rb.err == nil && rb.status != http.StatusUnauthorized {
			r, bearer = rb, true
			note = "; x-api-key was rejected but Authorization: Bearer works"
		}
	}
	missing := r.err == nil && (r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed)
	switch {
	case r.err != nil:
		c.Status, c.Detail, c.Fix = StatusFail, "POST "+url+" failed: "+shortErr(r.err), requestErrFix(r.err, d.opts.Timeout)
	case missing:
		c.Status = StatusWarn
		if d.opts.RequireAnthropic {
			c.Status = StatusFail
		}
		c.Detail = fmt.Sprintf("POST %s → HTTP %d: this server does not speak the Anthropic Messages API", url, r.status)
		c.Fix = "Claude Code needs /v1/messages: use a server that provides it (llmgate serve translates Messages for any chat backend)."
	case !is2xx(r.status):
		c.Status = StatusFail
		c.Detail, c.Fix = d.explainStatus("POST /v1/messages", r)
	default:
		var msg struct {
			Type    string `json:"type"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			StopReason string          `json:"stop_reason"`
			Usage      json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(r.body, &msg); err != nil || msg.Type != "message" || msg.Content == nil {
			c.Status = StatusFail
			c.Detail = fmt.Sprintf("HTTP %d but the body is not an Anthropic message: %s", r.status, quote(string(r.body), 160))
			c.Fix = "Errors must use a 4xx/5xx status and {\"type\":\"error\",…}; successful answers a {\"type\":\"message\",…} body."
			break
		}
		text := ""
		for _, b := range msg.Content {
			text += b.Text
		}
		c.Status = StatusPass
		c.Detail = fmt.Sprintf("%s answered %s (stop_reason %s) at %s%s", d.model, quote(text, 40), msg.StopReason, url, note)
		if bearer {
			c.Status = StatusWarn
			c.Fix = "Give Claude Code the key as ANTHROPIC_AUTH_TOKEN (sent as Bearer), not ANTHROPIC_API_KEY (sent as x-api-key)."
		}
		if len(msg.Usage) == 0 || string(msg.Usage) == "null" {
			c.Status = StatusWarn
			c.Detail += "; no usage in the response"
			c.Fix = "Anthropic clients expect usage.input_tokens and usage.output_tokens in every message."
		}
	}
	d.add(c)
	if c.Status == StatusPass || (c.Status == StatusWarn && !missing && r.err == nil && is2xx(r.status)) {
		d.checkAnthropicStream(rctx, url, hdr(bearer))
	} else {
		d.add(Check{ID: "anthropic.stream", Title: "Anthropic streaming", Status: StatusSkip, Detail: "skipped: the Messages endpoint did not answer"})
	}
}

// checkAnthropicStream verifies the event order the official SDKs parse:
// one message_start that carries usage, content deltas, message_stop.
func (d *diagnosis) checkAnthropicStream(ctx context.Context, url string, hdr map[string]string) {
	c := Check{ID: "anthropic.stream", Title: "Anthropic streaming"}
	defer func() { d.add(c) }()
	req := map[string]any{"model": d.model, "max_tokens": 16, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": probePrompt}}}
	resp, r := d.openStream(ctx, url, hdr, req)
	if resp == nil {
		c.Status = StatusFail
		if r.err != nil {
			c.Detail, c.Fix = "streaming request failed: "+shortErr(r.err), requestErrFix(r.err, d.opts.Timeout)
		} else if is2xx(r.status) {
			c.Detail = fmt.Sprintf("stream:true answered Content-Type %q instead of an event stream", r.header.Get("Content-Type"))
			c.Fix = "Enable streaming on the Messages endpoint; Claude Code always streams."
		} else {
			c.Detail, c.Fix = d.explainStatus("streaming POST /v1/messages", r)
		}
		return
	}
	defer resp.Body.Close()
	rd := sse.NewReader(resp.Body, 0)
	starts, deltas, stops := 0, 0, 0
	startUsage := false
	var errMsg string
	var readErr error
	for {
		ev, err := rd.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		var e struct {
			Type    string `json:"type"`
			Message struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"message"`
		}
		_ = json.Unmarshal(ev.Data, &e)
		typ := e.Type
		if typ == "" {
			typ = ev.Name
		}
		switch typ {
		case "message_start":
			starts++
			startUsage = len(e.Message.Usage) > 0 && string(e.Message.Usage) != "null"
		case "content_block_delta":
			deltas++
		case "message_stop":
			stops++
		case "error":
			errMsg = errorMessage(ev.Data)
		}
	}
	c.Status = StatusFail
	switch {
	case errMsg != "":
		c.Detail, c.Fix = "the stream carried an error event: "+errMsg, "The server failed mid-stream; check its log."
	case readErr != nil:
		c.Detail, c.Fix = "reading the stream failed: "+shortErr(readErr), requestErrFix(readErr, d.opts.Timeout)
	case starts != 1:
		c.Detail = fmt.Sprintf("%d message_start events (want exactly one)", starts)
		c.Fix = "Send exactly one message_start at the beginning of the stream; the SDKs reset their state on each."
	case !startUsage:
		c.Detail = "message_start has no message.usage"
		c.Fix = "Include message.usage in message_start; the official Anthropic SDKs fail without it."
	case deltas == 0:
		c.Detail, c.Fix = "no content_block_delta events", "Stream the text as content_block_delta events."
	case stops == 0:
		c.Detail, c.Fix = "the stream ended without message_stop", "End every Messages stream with a message_stop event."
	default:
		c.Status, c.Detail = StatusPass, fmt.Sprintf("message_start with usage, %d deltas, message_stop", deltas)
	}
}

package translate

import (
	"encoding/json"
	"net/http"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/apierror"
)

// UpstreamError converts a non-2xx upstream response (status and body)
// into an *apierror.Error that the edge renders in the client's dialect, so
// a Claude Code client behind an openai backend sees an Anthropic envelope
// and an OpenAI client behind an anthropic backend an OpenAI one. It reads
// both envelopes ({"error":{"message","type"}} and
// {"type":"error","error":{"type","message"}}) and plain-text bodies. The
// status is kept for client errors (400, 404, 413, 429 ...) so the client's
// SDK raises the matching typed error, except 401/403, which mean the
// gateway's own backend credential is wrong and become a 502 saying so;
// 5xx become 502 except 503/529 (overloaded) and 504 (timeout).
func UpstreamError(status int, body []byte) *apierror.Error {
	var env struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
		// vLLM and some servers put message/type at the top level.
		Message string `json:"message"`
		Detail  string `json:"detail"`
	}
	var inner struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	msg, typ := "", ""
	if json.Unmarshal(body, &env) == nil {
		if json.Unmarshal(env.Error, &inner) == nil {
			msg, typ = inner.Message, inner.Type
		} else if s := ""; json.Unmarshal(env.Error, &s) == nil {
			msg = s
		}
		if msg == "" {
			msg = env.Message
		}
		if msg == "" {
			msg = env.Detail
		}
	} else {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
	}
	kind := kindForStatus(status)
	if k := anthropic.KindForType(typ); k != apierror.KindUpstream {
		kind = k
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	out := status
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The client's key was accepted by llmgate; it is the gateway's own
		// credential for the backend that failed, which the client cannot fix.
		out, kind = http.StatusBadGateway, apierror.KindUpstream
		msg = "the backend rejected llmgate's credentials (" + msg + "); the operator must fix the backend api_key in the llmgate config"
		return &apierror.Error{Status: out, Kind: kind, Code: "upstream_auth_failed", Message: msg}
	case status == http.StatusServiceUnavailable || status == 529:
		kind = apierror.KindOverloaded
	case status == http.StatusGatewayTimeout:
		kind = apierror.KindTimeout
	case status >= 500:
		out = http.StatusBadGateway
	}
	return &apierror.Error{Status: out, Kind: kind, Code: "upstream_error", Message: "upstream error: " + msg}
}

func kindForStatus(status int) apierror.Kind {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
		return apierror.KindInvalidRequest
	case http.StatusUnauthorized:
		return apierror.KindAuthentication
	case http.StatusForbidden:
		return apierror.KindPermission
	case http.StatusNotFound:
		return apierror.KindNotFound
	case http.StatusTooManyRequests:
		return apierror.KindRateLimit
	default:
		return apierror.KindUpstream
	}
}

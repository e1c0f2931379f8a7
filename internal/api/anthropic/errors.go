package anthropic

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"llmgate/internal/apierror"
)

// ErrorBody is the inner object of the Anthropic error envelope.
type ErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// ErrorEnvelope is {"type":"error","error":{"type":...,"message":...}}, used
// both as an HTTP error body and as the data of an "error" stream event.
type ErrorEnvelope struct {
	Type  string    `json:"type"` // always "error"
	Error ErrorBody `json:"error"`
}

// ErrorType maps a dialect-neutral kind (and, where the kind alone is not
// enough, the status) to the Anthropic error type string the SDKs branch on.
func ErrorType(k apierror.Kind, status int) string {
	if status == http.StatusRequestEntityTooLarge {
		return "request_too_large"
	}
	switch k {
	case apierror.KindInvalidRequest:
		return "invalid_request_error"
	case apierror.KindAuthentication:
		return "authentication_error"
	case apierror.KindPermission:
		return "permission_error"
	case apierror.KindNotFound:
		return "not_found_error"
	case apierror.KindRateLimit:
		return "rate_limit_error"
	case apierror.KindTimeout:
		return "timeout_error"
	case apierror.KindOverloaded:
		return "overloaded_error"
	default:
		// Upstream failures, internal errors and client disconnects have no
		// closer match; api_error is what the SDKs treat as a server error.
		return "api_error"
	}
}

// KindForType maps an Anthropic error type (from an upstream error body or
// stream event) back to a dialect-neutral kind.
func KindForType(t string) apierror.Kind {
	switch t {
	case "invalid_request_error", "request_too_large":
		return apierror.KindInvalidRequest
	case "authentication_error":
		return apierror.KindAuthentication
	case "permission_error", "billing_error":
		return apierror.KindPermission
	case "not_found_error":
		return apierror.KindNotFound
	case "rate_limit_error":
		return apierror.KindRateLimit
	case "timeout_error":
		return apierror.KindTimeout
	case "overloaded_error":
		return apierror.KindOverloaded
	default:
		return apierror.KindUpstream
	}
}

// NewErrorEnvelope builds the envelope for e.
func NewErrorEnvelope(e *apierror.Error) ErrorEnvelope {
	return ErrorEnvelope{Type: "error", Error: ErrorBody{Type: ErrorType(e.Kind, e.Status), Message: e.Message}}
}

// MarshalError returns the JSON bytes of the envelope for err; any error that
// is not an *apierror.Error becomes a 500 with a message that hides details.
func MarshalError(err error) []byte {
	// Messages say "prompt is too long: 12 tokens > 10 maximum" as
	// written, not with HTML escapes.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(NewErrorEnvelope(apierror.From(err)))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// WriteError renders err in the Anthropic envelope with its status and
// headers.
func WriteError(w http.ResponseWriter, err error) {
	e := apierror.From(err)
	h := w.Header()
	for k, vs := range e.Header {
		h[k] = vs
	}
	RateLimitHeaders(h, time.Now())
	h.Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(MarshalError(e))
}

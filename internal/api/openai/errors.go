// Package openai holds the OpenAI wire types used by the gateway, the
// simulator, the benchmark and the translators.
package openai

import (
	"bytes"
	"encoding/json"
	"net/http"

	"llmgate/internal/apierror"
)

// ErrorBody is the inner object of the OpenAI error envelope.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// NPromptTokens and NCtx are set on a prompt too long for the model's
	// context, named as llama.cpp names them.
	NPromptTokens int `json:"n_prompt_tokens,omitempty"`
	NCtx          int `json:"n_ctx,omitempty"`
}

// ErrorEnvelope is the OpenAI error envelope {"error": {...}}.
type ErrorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// ErrorType maps a dialect-neutral kind to the OpenAI error type string.
func ErrorType(k apierror.Kind) string {
	switch k {
	case apierror.KindInvalidRequest, apierror.KindNotFound:
		return "invalid_request_error"
	case apierror.KindAuthentication:
		return "authentication_error"
	case apierror.KindPermission:
		return "permission_error"
	case apierror.KindRateLimit:
		return "rate_limit_error"
	case apierror.KindTimeout:
		return "timeout_error"
	case apierror.KindUpstream:
		return "upstream_error"
	case apierror.KindOverloaded:
		return "overloaded_error"
	default:
		return "server_error"
	}
}

// NewErrorEnvelope builds the envelope for e.
func NewErrorEnvelope(e *apierror.Error) ErrorEnvelope {
	env := ErrorEnvelope{Error: ErrorBody{Message: e.Message, Type: ErrorType(e.Kind)}}
	if e.Code != "" {
		c := e.Code
		env.Error.Code = &c
	}
	if e.Param != "" {
		p := e.Param
		env.Error.Param = &p
	}
	if e.Context != nil {
		env.Error.NPromptTokens, env.Error.NCtx = e.Context.PromptTokens, e.Context.ContextTokens
	}
	return env
}

// MarshalError returns the JSON bytes of the envelope for e.
func MarshalError(e *apierror.Error) []byte {
	// Messages say "prompt is too long: 12 tokens > 10 maximum" as
	// written, not with HTML escapes.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(NewErrorEnvelope(e))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// WriteError renders err in the OpenAI envelope with its status and headers.
func WriteError(w http.ResponseWriter, err error) {
	e := apierror.From(err)
	h := w.Header()
	for k, vs := range e.Header {
		h[k] = vs
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(MarshalError(e))
}

package mcpserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"llmgate/internal/apierror"
)

// The tool errors are read by two audiences: the agent that called the tool
// and the person who wrote the MCP settings. Every message therefore names
// what happened, quotes the endpoint's own words, and ends with what to
// change, pointing at the setting (environment variable or flag) involved.

// operation names what the client was doing, so the same HTTP status can be
// explained differently (a 404 on /models means a wrong base URL; on a chat
// request it usually means an unknown model).
type operation int

const (
	opListModels operation = iota
	opChat
)

// endpointError is what an endpoint said about a failure, read leniently
// because OpenAI-compatible servers disagree on the envelope: OpenAI and
// llmgate nest {"error":{"message","type","code"}}; older vLLM puts the
// fields at the top level with a numeric code; Ollama sends {"error":"..."};
// FastAPI servers send {"detail":"..."}.
type endpointError struct {
	Message string
	Type    string
	Code    string
	// Status is a numeric code found inside the body, used to classify
	// errors that arrive with HTTP 200 or inside a stream.
	Status int
}

// parseEndpointError extracts an error from a response body. ok is false
// when the body holds no recognisable error (HTML, plain text, empty).
func parseEndpointError(body []byte) (e endpointError, ok bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return e, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return e, false
	}
	obj := top
	if raw, found := top["error"]; found {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return endpointError{Message: s}, s != ""
		}
		var inner map[string]json.RawMessage
		if json.Unmarshal(raw, &inner) != nil {
			return e, false
		}
		obj = inner
	} else if _, isErr := top["object"]; !isErr || string(top["object"]) != `"error"` {
		// Without an "error" key only a vLLM-style {"object":"error"} or a
		// FastAPI {"detail":...} body is an error.
		if d, found := top["detail"]; found {
			return endpointError{Message: rawText(d)}, true
		}
		return e, false
	}
	e.Message = rawText(obj["message"])
	if e.Message == "" {
		e.Message = rawText(obj["detail"])
	}
	e.Type = rawText(obj["type"])
	e.Code = rawText(obj["code"])
	if n, err := strconv.Atoi(e.Code); err == nil && n >= 400 && n <= 599 {
		e.Status = n
	}
	return e, e.Message != "" || e.Type != "" || e.Code != ""
}

// rawText renders a JSON value as text: strings unquoted, anything else as
// its JSON (FastAPI validation details are arrays).
func rawText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// statusFromType maps an error type or code to an HTTP status, for errors
// that arrive without one (HTTP 200 with an error body, errors in streams).
func statusFromType(e endpointError) int {
	if e.Status != 0 {
		return e.Status
	}
	t := strings.ToLower(e.Type + " " + e.Code)
	switch {
	case strings.Contains(t, "auth"), strings.Contains(t, "api_key"):
		return http.StatusUnauthorized
	case strings.Contains(t, "permission"):
		return http.StatusForbidden
	case strings.Contains(t, "not_found"), strings.Contains(t, "notfound"):
		return http.StatusNotFound
	case strings.Contains(t, "rate_limit"):
		return http.StatusTooManyRequests
	case strings.Contains(t, "invalid_request"), strings.Contains(t, "badrequest"):
		return http.StatusBadRequest
	case strings.Contains(t, "timeout"):
		return http.StatusGatewayTimeout
	case strings.Contains(t, "overloaded"):
		return http.StatusServiceUnavailable
	case strings.Contains(t, "api_error"), strings.Contains(t, "server_error"), strings.Contains(t, "internal"):
		return http.StatusInternalServerError
	}
	return http.StatusBadGateway
}

// quote shortens an endpoint message for inclusion in ours: one line, at
// most 300 characters, so a stack trace in a body cannot flood the agent.
func quote(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 300 {
		s = string(r[:300]) + "…"
	}
	return s
}

// snippet describes a body that is not an error envelope.
func snippet(body []byte) string {
	s := quote(string(body))
	if s == "" {
		return "empty body"
	}
	if len(s) > 80 {
		s = string([]rune(s)[:80]) + "…"
	}
	return fmt.Sprintf("body %q", s)
}

// looksLikeUnknownModel reports whether an endpoint message is about a
// model name it does not know, whatever status it came with (OpenAI uses
// 404, LiteLLM and some engines 400).
func looksLikeUnknownModel(e endpointError) bool {
	if strings.Contains(strings.ToLower(e.Code), "model_not_found") {
		return true
	}
	m := strings.ToLower(e.Message)
	if !strings.Contains(m, "model") {
		return false
	}
	for _, s := range []string{"not found", "does not exist", "unknown", "invalid model", "no such", "not served", "not available", "no deployment"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// httpError explains an HTTP error response from the endpoint.
func httpError(op operation, status int, header http.Header, body []byte, baseURL, model string) *apierror.Error {
	ee, ok := parseEndpointError(body)
	said := snippet(body)
	if ok {
		said = quote(ee.Message)
		if said == "" {
			said = quote(ee.Type + " " + ee.Code)
		}
	}
	return explainStatus(op, status, header, ee, ok, said, baseURL, model)
}

// explainStatus builds the message for an endpoint failure with a status.
// said is the endpoint's own wording (or a description of its body).
func explainStatus(op operation, status int, header http.Header, ee endpointError, enveloped bool, said, baseURL, model string) *apierror.Error {
	what := fmt.Sprintf("%d: %s", status, said)
	mk := func(kind apierror.Kind, code, format string, args ...any) *apierror.Error {
		return apierror.Newf(status, kind, code, format, args...)
	}
	switch {
	case status == http.StatusUnauthorized:
		return mk(apierror.KindAuthentication, "invalid_api_key",
			"the API key was rejected (%s): set %s (or --api-key) to a key the gateway issued", what, EnvAPIKey)
	case status == http.StatusForbidden:
		if op == opListModels {
			return mk(apierror.KindPermission, "forbidden",
				"the API key may not list models (%s): use a key with access to /models, or name a model directly in chat", what)
		}
		return mk(apierror.KindPermission, "model_not_allowed",
			"the API key may not use model %q (%s): use a key whose scope includes this model, or pick another one from list_models", model, what)
	case op == opChat && enveloped && (status == http.StatusNotFound || status == http.StatusBadRequest ||
		status == http.StatusUnprocessableEntity) && looksLikeUnknownModel(ee):
		return mk(apierror.KindNotFound, "model_not_found",
			"model %q is not served at %s (%s): call list_models for the names this endpoint serves, or set %s to one of them", model, baseURL, what, EnvModel)
	case status == http.StatusNotFound && op == opChat && enveloped:
		// An OpenAI-style 404 on the chat route is about the model in practice.
		return mk(apierror.KindNotFound, "model_not_found",
			"model %q was not found at %s (%s): call list_models for the names this endpoint serves, or set %s to one of them", model, baseURL, what, EnvModel)
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		return mk(apierror.KindNotFound, "wrong_base_url",
			"%s has no OpenAI-compatible API (%s): set %s to the API root, e.g. http://127.0.0.1:4000/v1 (the part before /chat/completions)", baseURL, what, EnvBaseURL)
	case status == http.StatusPaymentRequired:
		return mk(apierror.KindRateLimit, "budget_exceeded",
			"the key's budget or credit is used up (%s): raise the budget or use another key in %s", what, EnvAPIKey)
	case status == http.StatusRequestEntityTooLarge:
		return mk(apierror.KindInvalidRequest, "request_too_large",
			"the request is too large for the endpoint (%s): shorten the prompt or the system message", what)
	case status == http.StatusTooManyRequests:
		wait := ""
		if ra := header.Get("Retry-After"); ra != "" {
			wait = fmt.Sprintf(" after %s s", ra)
		}
		return mk(apierror.KindRateLimit, "rate_limited",
			"the endpoint's rate limit was reached (%s): retry%s, call fewer models at once, or ask for a higher limit", what, wait)
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		m := strings.ToLower(said)
		if strings.Contains(m, "context") || strings.Contains(m, "too long") || strings.Contains(m, "maximum") && strings.Contains(m, "token") {
			return mk(apierror.KindInvalidRequest, "context_length_exceeded",
				"the prompt and max_tokens do not fit the model's context (%s): shorten the prompt or lower max_tokens", what)
		}
		return mk(apierror.KindInvalidRequest, "invalid_request",
			"the endpoint rejected the request (%s): fix the argument it names (model, max_tokens, temperature, prompt) and call again", what)
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout || status == 524:
		return mk(apierror.KindTimeout, "upstream_timeout",
			"the endpoint timed out waiting for model %q (%s): the model may be loading or overloaded; retry, lower max_tokens, or raise the gateway's upstream time-out", model, what)
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable:
		return mk(apierror.KindOverloaded, "upstream_unavailable",
			"the endpoint could not get an answer from the model server (%s): check that the engine behind %q is running (llmgate doctor helps), then retry", what, model)
	case status >= 500:
		return mk(apierror.KindUpstream, "upstream_error",
			"the endpoint failed with an internal error (%s): check the endpoint's log; retrying may help", what)
	default:
		return mk(apierror.KindUpstream, "unexpected_status",
			"the endpoint answered with status %s: check that %s is an OpenAI-compatible API", what, baseURL)
	}
}

// bodyError explains an error object found in a response that was
// otherwise successful: HTTP 200 with {"error":...}, or an error event in a
// stream. The body's own code or type decides how it is explained.
func bodyError(op operation, ee endpointError, baseURL, model string) *apierror.Error {
	status := statusFromType(ee)
	said := quote(ee.Message)
	if said == "" {
		said = quote(ee.Type + " " + ee.Code)
	}
	e := explainStatus(op, status, nil, ee, true, said, baseURL, model)
	e.Message = "the endpoint answered 200 but reported an error: " + e.Message
	e.Status = http.StatusBadGateway
	return e
}

// transportError explains a failure to talk to the endpoint at all, or a
// time-out. parent is the tool call's context: when it is done the MCP
// client cancelled, which is not the endpoint's fault.
func transportError(parent context.Context, err error, baseURL, model string, timeout time.Duration, partial int) *apierror.Error {
	mk := func(status int, kind apierror.Kind, code, format string, args ...any) *apierror.Error {
		return apierror.Newf(status, kind, code, format, args...).Wrap(err)
	}
	if parent.Err() != nil {
		return mk(499, apierror.KindClientClosed, "cancelled", "the request was cancelled by the MCP client")
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) && !isDialError(err):
		got := ""
		if partial > 0 {
			got = fmt.Sprintf(" (%d characters had arrived)", partial)
		}
		return mk(http.StatusGatewayTimeout, apierror.KindTimeout, "timeout",
			"no complete answer from model %q at %s within %s%s: raise --timeout or %s, lower max_tokens, or check that the model server is not stuck",
			model, baseURL, timeout, got, EnvTimeout)
	case errors.As(err, &dnsErr):
		return mk(http.StatusBadGateway, apierror.KindUpstream, "host_not_found",
			"could not resolve the host %q of %s: check the host name in %s", dnsErr.Name, baseURL, EnvBaseURL)
	case errors.Is(err, syscall.ECONNREFUSED):
		return mk(http.StatusBadGateway, apierror.KindUpstream, "connection_refused",
			"could not connect to %s (connection refused): start the gateway (llmgate serve) or set %s to a running OpenAI-compatible endpoint", baseURL, EnvBaseURL)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return mk(http.StatusBadGateway, apierror.KindUpstream, "connect_failed",
			"could not connect to %s (%v): check the host and port in %s and that nothing blocks the connection", baseURL, opErr.Err, EnvBaseURL)
	case errors.As(err, &recordErr):
		return mk(http.StatusBadGateway, apierror.KindUpstream, "tls_to_plain_http",
			"%s speaks plain HTTP, not HTTPS: use http:// in %s", baseURL, EnvBaseURL)
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostnameErr):
		return mk(http.StatusBadGateway, apierror.KindUpstream, "tls_certificate",
			"the TLS certificate of %s was not accepted (%v): fix the certificate, add its CA to the system trust store, or use the right host name in %s", baseURL, err, EnvBaseURL)
	case errors.Is(err, errStreamCut):
		return mk(http.StatusBadGateway, apierror.KindUpstream, "stream_cut",
			"the answer from model %q stopped before it was complete (%d characters had arrived): the endpoint closed the stream early; check its log and retry", model, partial)
	default:
		return mk(http.StatusBadGateway, apierror.KindUpstream, "connection_failed",
			"the connection to %s failed (%v): check that the endpoint is up and reachable, then retry", baseURL, err)
	}
}

// errStreamCut marks a stream that ended without a finish reason or [DONE].
var errStreamCut = errors.New("stream ended before the answer was complete")

// isDialError reports whether err happened while connecting, so a connect
// time-out is explained as an unreachable host, not a slow model.
func isDialError(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// toolMessage returns the text a tool error shows: the client-facing
// message of an *apierror.Error, or the error text for anything else.
func toolMessage(err error) string {
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae.Message
	}
	return err.Error()
}

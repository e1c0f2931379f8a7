package mcpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/apierror"
)

const testBase = "http://127.0.0.1:4000/v1"

// mustContain fails unless msg contains every part; the parts are what a
// person needs to fix the problem, so each is asserted, not just the status.
func mustContain(t *testing.T, msg string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("message lacks %q:\n%s", p, msg)
		}
	}
}

func TestHTTPError_ExplainsEachStatusWithTheFix(t *testing.T) {
	env := func(typ, code, msg string) []byte {
		return fmt.Appendf(nil, `{"error":{"message":%q,"type":%q,"code":%q,"param":null}}`, msg, typ, code)
	}
	tests := []struct {
		name   string
		op     operation
		status int
		header http.Header
		body   []byte
		kind   apierror.Kind
		want   []string
	}{
		{"401 bad key", opChat, 401, nil, env("authentication_error", "invalid_api_key", "invalid API key"),
			apierror.KindAuthentication, []string{"the API key was rejected (401: invalid API key)", "set LLMGATE_API_KEY", "a key the gateway issued"}},
		{"403 model outside key scope", opChat, 403, nil, env("permission_error", "model_not_allowed", "key may not use gpt-4o"),
			apierror.KindPermission, []string{`may not use model "gpt-4o"`, "403: key may not use gpt-4o", "list_models"}},
		{"404 unknown model keeps the endpoint's message", opChat, 404, nil, env("invalid_request_error", "model_not_found", "The model `gpt-5` does not exist"),
			apierror.KindNotFound, []string{`model "gpt-4o" is not served at ` + testBase, "The model `gpt-5` does not exist", "call list_models", "LLMGATE_MODEL"}},
		{"400 unknown model as LiteLLM reports it", opChat, 400, nil, env("invalid_request_error", "400", "Invalid model name passed in model=gpt-4o"),
			apierror.KindNotFound, []string{"is not served", "Invalid model name", "list_models"}},
		{"404 page from a non-API URL", opListModels, 404, nil, []byte("404 page not found\n"),
			apierror.KindNotFound, []string{testBase + " has no OpenAI-compatible API", `body "404 page not found"`, "set LLMGATE_BASE_URL to the API root"}},
		{"404 html on chat means a wrong URL too", opChat, 404, nil, []byte("<html><body>Not Found</body></html>"),
			apierror.KindNotFound, []string{"has no OpenAI-compatible API", "LLMGATE_BASE_URL"}},
		{"400 context too long", opChat, 400, nil, env("invalid_request_error", "", "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens"),
			apierror.KindInvalidRequest, []string{"do not fit the model's context", "maximum context length is 8192", "lower max_tokens"}},
		{"400 other argument", opChat, 400, nil, env("invalid_request_error", "", "temperature must be at most 2"),
			apierror.KindInvalidRequest, []string{"rejected the request (400: temperature must be at most 2)", "fix the argument"}},
		{"402 budget", opChat, 402, nil, env("insufficient_quota", "budget_exceeded", "budget of $5 used"),
			apierror.KindRateLimit, []string{"budget", "budget of $5 used", "LLMGATE_API_KEY"}},
		{"429 with Retry-After", opChat, 429, http.Header{"Retry-After": {"7"}}, env("rate_limit_error", "", "rate limit: 10 RPM"),
			apierror.KindRateLimit, []string{"rate limit was reached (429: rate limit: 10 RPM)", "retry after 7 s"}},
		{"503 engine down", opChat, 503, nil, env("overloaded_error", "", "no healthy deployment"),
			apierror.KindOverloaded, []string{"could not get an answer from the model server (503: no healthy deployment)", "llmgate doctor"}},
		{"504 upstream time-out", opChat, 504, nil, env("timeout_error", "", "upstream timed out"),
			apierror.KindTimeout, []string{"timed out waiting for model", "upstream timed out", "retry"}},
		{"500 internal", opChat, 500, nil, []byte(`Internal Server Error`),
			apierror.KindUpstream, []string{"internal error (500", "check the endpoint's log"}},
		{"vLLM top-level error object", opChat, 404, nil, []byte(`{"object":"error","message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`),
			apierror.KindNotFound, []string{"is not served", "The model `x` does not exist."}},
		{"Ollama string error", opChat, 404, nil, []byte(`{"error":"model \"llama9\" not found, try pulling it first"}`),
			apierror.KindNotFound, []string{"is not served", `model "llama9" not found, try pulling it first`}},
		{"FastAPI detail", opListModels, 401, nil, []byte(`{"detail":"Unauthorized"}`),
			apierror.KindAuthentication, []string{"401: Unauthorized", "LLMGATE_API_KEY"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := httpError(tc.op, tc.status, tc.header, tc.body, testBase, "gpt-4o")
			if e.Kind != tc.kind {
				t.Errorf("kind = %s, want %s", e.Kind, tc.kind)
			}
			mustContain(t, e.Message, tc.want...)
		})
	}
}

func TestHTTPError_QuotesLongBodiesOnOneShortLine(t *testing.T) {
	body := fmt.Appendf(nil, `{"error":{"message":%q}}`, "Traceback:\n"+strings.Repeat("frame line\n", 200))
	e := httpError(opChat, 500, nil, body, testBase, "m")
	if strings.Contains(e.Message, "\n") {
		t.Errorf("message spans lines: %q", e.Message)
	}
	if len(e.Message) > 600 {
		t.Errorf("message is %d bytes; the endpoint's text must be cut", len(e.Message))
	}
}

func TestBodyError_ClassifiesAnErrorInsideA200(t *testing.T) {
	ee, ok := parseEndpointError([]byte(`{"error":{"message":"invalid key","type":"authentication_error"}}`))
	if !ok {
		t.Fatal("error body not recognised")
	}
	e := bodyError(opChat, ee, testBase, "m")
	mustContain(t, e.Message, "answered 200 but reported an error", "API key was rejected", "invalid key", "LLMGATE_API_KEY")

	ee, _ = parseEndpointError([]byte(`{"error":{"message":"the engine ran out of KV cache","type":"overloaded_error","code":503}}`))
	mustContain(t, bodyError(opChat, ee, testBase, "m").Message, "503: the engine ran out of KV cache", "check that the engine")
}

func TestParseEndpointError_IgnoresSuccessBodies(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"object":"list","data":[]}`, `{"id":"x","choices":[]}`, `<html>`, `{"error":null}`} {
		if ee, ok := parseEndpointError([]byte(body)); ok {
			t.Errorf("%s: parsed as error %+v", body, ee)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestTransportError_ExplainsConnectionFailures(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		partial int
		code    string
		want    []string
	}{
		{"connection refused", live, dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), 0, "connection_refused",
			[]string{"could not connect to " + testBase + " (connection refused)", "llmgate serve", "LLMGATE_BASE_URL"}},
		{"host not found", live, &net.DNSError{Err: "no such host", Name: "gatewy.local", IsNotFound: true}, 0, "host_not_found",
			[]string{`could not resolve the host "gatewy.local"`, "LLMGATE_BASE_URL"}},
		{"connect time-out is about the host, not the model", live, dial(timeoutErr{}), 0, "connect_failed",
			[]string{"could not connect", "i/o timeout", "host and port"}},
		{"request time-out", live, fmt.Errorf("read: %w", context.DeadlineExceeded), 0, "timeout",
			[]string{`no complete answer from model "m"`, "within 2m0s", "raise --timeout or LLMGATE_TIMEOUT", "lower max_tokens"}},
		{"time-out after part of the answer", live, timeoutErr{}, 120, "timeout",
			[]string{"within 2m0s (120 characters had arrived)"}},
		{"https to a plain-http server", live, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, 0, "tls_to_plain_http",
			[]string{"speaks plain HTTP", "use http://"}},
		{"stream cut", live, errStreamCut, 42, "stream_cut",
			[]string{"stopped before it was complete (42 characters had arrived)", "retry"}},
		{"client cancelled", cancelled, context.Canceled, 0, "cancelled",
			[]string{"cancelled by the MCP client"}},
		{"other failure", live, errors.New("unexpected EOF"), 0, "connection_failed",
			[]string{"connection to " + testBase + " failed (unexpected EOF)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := transportError(tc.ctx, tc.err, testBase, "m", 2*time.Minute, tc.partial)
			if e.Code != tc.code {
				t.Errorf("code = %s, want %s (%s)", e.Code, tc.code, e.Message)
			}
			mustContain(t, e.Message, tc.want...)
			if !errors.Is(e, tc.err) {
				t.Errorf("the cause is not kept for the log")
			}
		})
	}
}

func TestToolMessage_HidesTheInternalCause(t *testing.T) {
	e := apierror.New(502, apierror.KindUpstream, "x", "could not connect").Wrap(errors.New("dial tcp 10.0.0.1:4000: secret detail"))
	if got := toolMessage(fmt.Errorf("chat: %w", e)); got != "could not connect" {
		t.Errorf("toolMessage = %q", got)
	}
	if got := toolMessage(errors.New("plain")); got != "plain" {
		t.Errorf("toolMessage = %q", got)
	}
}

// Package apierror defines the single error type that crosses package
// boundaries inside llmgate. It carries an HTTP status and a message that is
// safe to show to API clients; the edge renders it into the OpenAI or
// Anthropic envelope depending on the endpoint.
package apierror

import (
	"errors"
	"fmt"
	"net/http"
)

// Kind classifies an error independently of the wire dialect. The edge maps it
// to the dialect's error type string.
type Kind string

// Error kinds, named after the situations clients must tell apart.
const (
	KindInvalidRequest Kind = "invalid_request_error"
	KindAuthentication Kind = "authentication_error"
	KindPermission     Kind = "permission_error"
	KindNotFound       Kind = "not_found_error"
	KindRateLimit      Kind = "rate_limit_error"
	KindUpstream       Kind = "upstream_error"
	KindTimeout        Kind = "timeout_error"
	KindOverloaded     Kind = "overloaded_error"
	KindInternal       Kind = "api_error"
	KindClientClosed   Kind = "client_closed"
)

// StatusClientClosed is the status recorded when the client went away before
// its answer was complete (nginx's 499). It is never sent: nobody is listening.
const StatusClientClosed = 499

// Codes that decide what the gateway does next; compare errors against the
// sentinels below with errors.Is, never by their text.
const (
	CodeClientClosed = "client_closed"
	CodeStreamCut    = "stream_cut"
	// CodeDatabaseUnavailable: the gateway's own database failed the
	// request (unreachable, refusing, timing out).
	CodeDatabaseUnavailable = "database_unavailable"
)

// Sentinels for errors.Is: an *Error matches one when their Codes are equal.
var (
	// ErrClientClosed: the client went away (its context was cancelled).
	ErrClientClosed = &Error{Status: StatusClientClosed, Kind: KindClientClosed, Code: CodeClientClosed, Message: "client closed the request"}
	// ErrStreamCut: a backend's stream ended without its end marker.
	ErrStreamCut = &Error{Status: http.StatusBadGateway, Kind: KindUpstream, Code: CodeStreamCut, Message: "the backend ended the stream before it was complete"}
)

// Error is an error that knows how it should look to an API client.
type Error struct {
	Status  int    // HTTP status to send
	Kind    Kind   // dialect-neutral classification
	Code    string // short machine-readable code, e.g. "model_not_found"
	Param   string // request parameter at fault, if any
	Message string // client-safe message that says what to do
	Err     error  // internal cause, logged but never sent to clients
	// Header holds extra response headers (Retry-After, rate-limit headers).
	Header http.Header
	// Context, on a prompt too long for the model's context, carries the
	// numbers, which the OpenAI envelope passes on as llama.cpp names them
	// (n_prompt_tokens, n_ctx).
	Context *ContextOverflow
}

// ContextOverflow is a prompt too long for a model's context, in tokens.
type ContextOverflow struct {
	PromptTokens  int // the prompt's length, as the engine counted it (or surely at least)
	ContextTokens int // the context length
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Message, e.Err)
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same non-empty Code, so
// that errors.Is(err, ErrClientClosed) holds for every client-gone error
// whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code != "" && t.Code == e.Code
}

// ClientClosed returns a new client-gone error wrapping cause.
func ClientClosed(cause error) *Error {
	c := *ErrClientClosed
	c.Err = cause
	return &c
}

// Clone returns a copy of e that can be changed without touching e, which
// may be shared (a sentinel, an error kept by a breaker or returned to
// several callers).
func (e *Error) Clone() *Error {
	c := *e
	if e.Header != nil {
		c.Header = e.Header.Clone()
	}
	if e.Context != nil {
		co := *e.Context
		c.Context = &co
	}
	return &c
}

// WithMessage returns a copy of e with another message.
func (e *Error) WithMessage(msg string) *Error {
	c := e.Clone()
	c.Message = msg
	return c
}

// New returns an Error with the given status, kind, code and message.
func New(status int, kind Kind, code, msg string) *Error {
	return &Error{Status: status, Kind: kind, Code: code, Message: msg}
}

// Newf is New with a formatted message.
func Newf(status int, kind Kind, code, format string, args ...any) *Error {
	return New(status, kind, code, fmt.Sprintf(format, args...))
}

// Wrap attaches an internal cause to e and returns e.
func (e *Error) Wrap(err error) *Error { e.Err = err; return e }

// From converts any error into an *Error. Errors that are not already an
// *Error become a 500 whose message hides the internal detail.
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Kind: KindInternal, Code: "internal_error",
		Message: "internal error in llmgate; the gateway log has the details", Err: err}
}

// Unavailable returns the 503 a client gets when one of the gateway's own
// stores failed its request: msg says what to do, the request id (when
// known) names the log line that holds the cause, and the cause itself is
// kept for the log only. A database's words (its address, user and
// database names, its SQL) never reach a client.
func Unavailable(code, msg, requestID string, cause error) *Error {
	if requestID != "" {
		msg += " (request " + requestID + "; the gateway log has the cause)"
	}
	return &Error{Status: http.StatusServiceUnavailable, Kind: KindOverloaded, Code: code, Message: msg, Err: cause,
		Header: http.Header{"Retry-After": {"1"}}}
}

// DatabaseUnavailable returns the 503 for a request the gateway's database
// failed (see Unavailable).
func DatabaseUnavailable(requestID string, cause error) *Error {
	return Unavailable(CodeDatabaseUnavailable, "the gateway's database is unavailable; retry shortly", requestID, cause)
}

// InvalidRequest returns a 400 error.
func InvalidRequest(code, format string, args ...any) *Error {
	return Newf(http.StatusBadRequest, KindInvalidRequest, code, format, args...)
}

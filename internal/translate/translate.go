// Package translate converts between API dialects: Anthropic Messages <->
// OpenAI chat completions, and OpenAI Responses -> chat completions. Every
// conversion is a pure function or a small state machine fed one upstream
// event at a time, so the HTTP layer stays thin and every mapping is covered
// by table tests and golden transcripts under testdata/.
//
// Stream translators share one shape:
//
//	t := NewXxxStream(...)
//	for each upstream SSE event {
//		evs, err := t.Feed(...)   // write evs to the client in order
//		if err != nil { write t.Finish(err); return }
//	}
//	write t.Finish(nil)          // at the upstream's normal end ([DONE], message_stop)
//	write t.Finish(err)          // instead, when the upstream failed or was cut
//
// Finish is idempotent: a second call returns nothing.
package translate

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"llmgate/internal/apierror"
)

// Event is one SSE event to write to the client. Name is empty for unnamed
// events (OpenAI chat chunks); Data is the JSON payload, or "[DONE]".
type Event struct {
	Name string
	Data []byte
}

// Done is the data of OpenAI's stream terminator.
var Done = []byte("[DONE]")

// newID returns prefix followed by 24 random hex digits, for objects the
// upstream gave no id to.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// badRequest returns a 400 whose message names the parameter at fault.
func badRequest(param, format string, args ...any) *apierror.Error {
	e := apierror.InvalidRequest("invalid_request", format, args...)
	e.Param = param
	return e
}

// streamError converts the error that ended an upstream stream into the
// client-safe error to render in the client's dialect. An *apierror.Error is
// kept; anything else (a cut connection, a read error) becomes a 502 whose
// message says what happened without internal detail.
func streamError(err error) *apierror.Error {
	var e *apierror.Error
	if errors.As(err, &e) {
		return e
	}
	return &apierror.Error{Status: http.StatusBadGateway, Kind: apierror.KindUpstream, Code: "upstream_stream_cut",
		Message: "the upstream backend ended the stream before the response was complete; retry the request", Err: err}
}

// upstreamStreamError builds the error for an error object an upstream sent
// inside its stream. The upstream's message is kept: it is the model
// server's own explanation (context too long, bad parameter).
func upstreamStreamError(kind apierror.Kind, msg string) *apierror.Error {
	if msg == "" {
		msg = "the upstream backend reported an error during the stream"
	} else {
		msg = "upstream error: " + msg
	}
	status := http.StatusBadGateway
	switch kind {
	case apierror.KindInvalidRequest:
		status = http.StatusBadRequest
	case apierror.KindRateLimit:
		status = http.StatusTooManyRequests
	case apierror.KindOverloaded:
		status = 529
	case apierror.KindTimeout:
		status = http.StatusGatewayTimeout
	}
	return &apierror.Error{Status: status, Kind: kind, Code: "upstream_error", Message: msg}
}

// mustJSON marshals v; the values marshalled here are plain structs that
// cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("translate: marshal: " + err.Error())
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// validJSONObject reports whether s is a JSON object.
func validJSONObject(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "{") && json.Valid([]byte(s))
}

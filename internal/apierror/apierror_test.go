package apierror

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestIs_MatchesOnCodeWhateverTheMessageAndWrapping(t *testing.T) {
	closed := ClientClosed(context.Canceled)
	wrapped := fmt.Errorf("relay: %w", closed)
	for _, tc := range []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"sentinel itself", ErrClientClosed, ErrClientClosed, true},
		{"new client-gone error", closed, ErrClientClosed, true},
		{"wrapped by fmt.Errorf", wrapped, ErrClientClosed, true},
		{"other message, same code", ErrStreamCut.WithMessage("cut short"), ErrStreamCut, true},
		{"other code", closed, ErrStreamCut, false},
		{"empty codes never match", New(500, KindInternal, "", "a"), New(500, KindInternal, "", "a"), false},
		{"not an *Error", errors.New("client_closed"), ErrClientClosed, false},
		{"the cause is still found", wrapped, context.Canceled, true},
	} {
		if got := errors.Is(tc.err, tc.target); got != tc.want {
			t.Errorf("%s: errors.Is = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestClientClosed_LeavesTheSentinelAlone(t *testing.T) {
	before := fmt.Sprintf("%+v", *ErrClientClosed)
	e := ClientClosed(context.DeadlineExceeded)
	if e == ErrClientClosed || e.Err != context.DeadlineExceeded || e.Status != StatusClientClosed {
		t.Fatalf("ClientClosed = %+v", e)
	}
	if fmt.Sprintf("%+v", *ErrClientClosed) != before || ErrClientClosed.Err != nil {
		t.Fatalf("the sentinel changed: %+v", *ErrClientClosed)
	}
}

func TestClone_SharesNothingAChangeCouldReach(t *testing.T) {
	orig := &Error{Status: 400, Code: "x", Message: "m", Header: http.Header{"Retry-After": {"1"}},
		Context: &ContextOverflow{PromptTokens: 10, ContextTokens: 8}}
	c := orig.Clone()
	c.Header.Set("Retry-After", "9")
	c.Context.PromptTokens = 99
	c.Message = "changed"
	if orig.Header.Get("Retry-After") != "1" || orig.Context.PromptTokens != 10 || orig.Message != "m" {
		t.Fatalf("changing the clone changed the original: %+v %+v", orig, orig.Context)
	}
	if n := (&Error{Code: "y"}).Clone(); n.Header != nil || n.Context != nil {
		t.Fatalf("Clone of an error without header or context = %+v", n)
	}
	w := ErrStreamCut.WithMessage("other")
	if w.Message != "other" || ErrStreamCut.Message == "other" || w.Code != CodeStreamCut {
		t.Fatalf("WithMessage = %+v, sentinel %+v", w, ErrStreamCut)
	}
}

func TestError_TextHasTheCauseForTheLogOnly(t *testing.T) {
	cause := errors.New("dial tcp 10.0.0.7:5432: connection refused")
	e := New(http.StatusBadGateway, KindUpstream, "bad", "the backend failed").Wrap(cause)
	if e.Error() != "the backend failed: dial tcp 10.0.0.7:5432: connection refused" {
		t.Errorf("Error() = %q", e.Error())
	}
	if e.Message != "the backend failed" || !errors.Is(e, cause) {
		t.Errorf("Message %q, errors.Is(cause) %v", e.Message, errors.Is(e, cause))
	}
	if got := New(400, KindInvalidRequest, "c", "plain").Error(); got != "plain" {
		t.Errorf("Error() without cause = %q", got)
	}
}

func TestFrom_HidesWhatIsNotAnAPIError(t *testing.T) {
	inner := InvalidRequest("bad_field", "field %q is %d", "n", 3)
	if got := From(fmt.Errorf("decode: %w", inner)); got != inner {
		t.Errorf("From(wrapped *Error) = %+v, want the *Error itself", got)
	}
	if inner.Status != http.StatusBadRequest || inner.Kind != KindInvalidRequest || inner.Message != `field "n" is 3` {
		t.Errorf("InvalidRequest = %+v", inner)
	}
	secret := errors.New("pq: password authentication failed for user admin")
	got := From(secret)
	if got.Status != http.StatusInternalServerError || got.Kind != KindInternal || got.Code != "internal_error" {
		t.Errorf("From(plain error) = %+v", got)
	}
	if strings.Contains(got.Message, "password") || !errors.Is(got, secret) {
		t.Errorf("From(plain error): message %q must hide the cause and keep it for the log", got.Message)
	}
}

func TestUnavailable_NamesTheRequestAndHidesTheDatabase(t *testing.T) {
	cause := errors.New(`dial postgres://app:hunter2@db:5432/prod: timeout`)
	for _, tc := range []struct {
		id, wantMsg string
	}{
		{"req-1", "the gateway's database is unavailable; retry shortly (request req-1; the gateway log has the cause)"},
		{"", "the gateway's database is unavailable; retry shortly"},
	} {
		e := DatabaseUnavailable(tc.id, cause)
		if e.Status != http.StatusServiceUnavailable || e.Code != CodeDatabaseUnavailable || e.Message != tc.wantMsg {
			t.Errorf("DatabaseUnavailable(%q) = %d %q %q", tc.id, e.Status, e.Code, e.Message)
		}
		if e.Header.Get("Retry-After") != "1" || !errors.Is(e, cause) || strings.Contains(e.Message, "hunter2") {
			t.Errorf("DatabaseUnavailable(%q): header %v, cause kept %v, message %q", tc.id, e.Header, errors.Is(e, cause), e.Message)
		}
	}
}

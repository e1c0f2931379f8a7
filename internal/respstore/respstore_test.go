package respstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/respstore"
	"llmgate/internal/store"
	"llmgate/internal/store/sqlite"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newStore(t *testing.T) *respstore.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	rs := respstore.New(st, time.Hour, quiet)
	// Cleanups run last first: the purge a Save started ends before the
	// database closes and its directory is removed.
	t.Cleanup(func() { st.Close() })
	t.Cleanup(rs.Close)
	return rs
}

func text(s string) *string { return &s }

// answer is a completed response saying s, continuing prev when set.
func answer(id, prev, s string) *openai.Response {
	r := &openai.Response{ID: id, Object: "response", Status: openai.ResponseCompleted, Model: "m",
		Output: []openai.OutputItem{{Type: "message", ID: "msg_" + id, Role: "assistant", Status: "completed",
			Content: []openai.OutputContent{{Type: "output_text", Text: s}}}}}
	if prev != "" {
		r.PreviousResponseID = &prev
	}
	return r
}

// said lists each item as role:text.
func said(items []openai.InputItem) string {
	var out []string
	for _, it := range items {
		t := ""
		if it.Content.Text != nil {
			t = *it.Content.Text
		}
		for _, p := range it.Content.Parts {
			t += p.Text
		}
		out = append(out, it.Role+":"+t)
	}
	return strings.Join(out, " ")
}

func TestPrevious_ReturnsTheConversationForItsKeyOnly(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.Save(ctx, "req1", "key-a", answer("resp_1", "", "hello"), respstore.TurnItems(openai.ResponsesInput{Text: text("hi")}))
	s.Save(ctx, "req2", "key-a", answer("resp_2", "resp_1", "fine"), respstore.TurnItems(openai.ResponsesInput{Text: text("how are you")}))

	items, size, err := s.Previous(ctx, "req3", "key-a", "resp_2")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := said(items), "user:hi assistant:hello user:how are you assistant:fine"; got != want {
		t.Errorf("conversation = %q, want %q", got, want)
	}
	if size <= 0 {
		t.Errorf("size = %d, want the stored JSON's length", size)
	}
	if items, _, err := s.Previous(ctx, "req4", "key-a", "resp_1"); err != nil || len(items) != 2 {
		t.Errorf("Previous(resp_1) = %d items, %v; want the first turn alone", len(items), err)
	}

	for _, tc := range []struct{ name, key, id string }{
		{"another key", "key-b", "resp_2"},
		{"an unknown id", "key-a", "resp_9"},
	} {
		_, _, err := s.Previous(ctx, "req5", tc.key, tc.id)
		var ae *apierror.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "previous_response_not_found" || ae.Param != "previous_response_id" {
			t.Errorf("%s: Previous = %v, want a 400 previous_response_not_found", tc.name, err)
		}
	}
}

func TestSave_KeepsNoFailedResponse(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	failed := answer("resp_f", "", "")
	failed.Status = openai.ResponseFailed
	s.Save(ctx, "req1", "k", failed, nil)
	s.Save(ctx, "req2", "k", nil, nil) // nothing to store, no panic
	if _, _, err := s.Previous(ctx, "req3", "k", "resp_f"); err == nil {
		t.Fatal("a failed response was stored")
	}
	// A turn without input items is stored as an empty list, not null.
	s.Save(ctx, "req4", "k", answer("resp_e", "", "ok"), nil)
	if items, _, err := s.Previous(ctx, "req5", "k", "resp_e"); err != nil || said(items) != "assistant:ok" {
		t.Fatalf("Previous = %q, %v", said(items), err)
	}
}

func TestTurnItems_AStringIsOneUserMessage(t *testing.T) {
	if got := respstore.TurnItems(openai.ResponsesInput{Text: text("hi")}); said(got) != "user:hi" || got[0].Type != "message" {
		t.Errorf("TurnItems(text) = %+v", got)
	}
	in := []openai.InputItem{{Type: "message", Role: "developer", Content: openai.ResponsesContent{Text: text("be brief")}}}
	if got := respstore.TurnItems(openai.ResponsesInput{Items: in}); len(got) != 1 || said(got) != "developer:be brief" {
		t.Errorf("TurnItems(items) = %+v", got)
	}
}

func TestNewID_IsUniqueAndNamedLikeOpenAIs(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := respstore.NewID()
		if !strings.HasPrefix(id, "resp_") || len(id) != len("resp_")+48 || seen[id] {
			t.Fatalf("NewID() = %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
}

// auth authenticates "Bearer a" as key-a and "Bearer b" as key-b.
func auth(_ http.ResponseWriter, r *http.Request) (keys.Principal, error) {
	switch r.Header.Get("Authorization") {
	case "Bearer a":
		return keys.Principal{Key: &keys.Key{ID: "key-a"}}, nil
	case "Bearer b":
		return keys.Principal{Key: &keys.Key{ID: "key-b"}}, nil
	}
	return keys.Principal{}, apierror.New(http.StatusUnauthorized, apierror.KindAuthentication, "invalid_api_key", "bad key")
}

func do(h http.Handler, method, path, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	w.Header().Set("X-Request-Id", "rid-1") // as the server's edge does
	h.ServeHTTP(w, r)
	return w
}

func TestHandler_ReadsAndDeletesOnlyTheKeysOwnResponses(t *testing.T) {
	s := newStore(t)
	s.Save(context.Background(), "req1", "key-a", answer("resp_1", "", "hello"), nil)
	h := respstore.Handler(s, auth)
	steps := []struct {
		method, path, key string
		status            int
		body              string // in the answer
	}{
		{"GET", "/v1/responses/resp_1", "b", 404, "response_not_found"},
		{"DELETE", "/v1/responses/resp_1", "b", 404, "response_not_found"},
		{"GET", "/v1/responses/resp_1", "x", 401, "invalid_api_key"},
		{"GET", "/v1/responses/resp_1", "a", 200, `"id":"resp_1"`},
		{"POST", "/v1/responses/resp_1", "a", 405, "method_not_allowed"},
		{"GET", "/v1/responses/", "a", 404, `"not_found"`},
		{"GET", "/v1/responses/resp_1/input_items", "a", 404, `"not_found"`},
		{"DELETE", "/v1/responses/resp_1", "a", 200, `"deleted":true`},
		{"GET", "/v1/responses/resp_1", "a", 404, "response_not_found"},
	}
	for _, st := range steps {
		w := do(h, st.method, st.path, st.key)
		if w.Code != st.status || !strings.Contains(w.Body.String(), st.body) {
			t.Errorf("%s %s as %s = %d %s; want %d with %s", st.method, st.path, st.key, w.Code, w.Body, st.status, st.body)
		}
		if st.status == 405 && w.Header().Get("Allow") != "GET, DELETE" {
			t.Errorf("405 without Allow: %v", w.Header())
		}
	}
}

func TestHandler_WithoutStorageSaysSo(t *testing.T) {
	w := do(respstore.Handler(nil, auth), "GET", "/v1/responses/resp_1", "a")
	if w.Code != 404 || !strings.Contains(w.Body.String(), "response_not_stored") {
		t.Fatalf("= %d %s", w.Code, w.Body)
	}
}

// brokenDB fails every call with words that must stay in the log.
type brokenDB struct{}

var errDB = errors.New("dial tcp 10.1.2.3:5432: password authentication failed for user llmgate")

func (brokenDB) PutResponse(context.Context, store.StoredResponse) error { return errDB }
func (brokenDB) GetResponse(context.Context, string, string, time.Time) (*store.StoredResponse, error) {
	return nil, errDB
}
func (brokenDB) ResponseChain(context.Context, string, string, time.Time) ([]store.StoredResponse, error) {
	return nil, errDB
}
func (brokenDB) DeleteResponse(context.Context, string, string) (bool, error) { return false, errDB }
func (brokenDB) PurgeResponses(context.Context, time.Time) (int64, error)     { return 0, errDB }

func TestStoreFailures_Are503sThatNameTheRequestNotTheDatabase(t *testing.T) {
	s := respstore.New(brokenDB{}, 0, quiet)
	s.Save(context.Background(), "req1", "key-a", answer("resp_1", "", "x"), nil) // logged, not fatal

	_, _, err := s.Previous(context.Background(), "req-42", "key-a", "resp_1")
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != respstore.CodeUnavailable ||
		!strings.Contains(ae.Message, "req-42") || strings.Contains(ae.Message, "password") || !errors.Is(err, errDB) {
		t.Errorf("Previous = %#v", err)
	}
	for _, method := range []string{"GET", "DELETE"} {
		w := do(respstore.Handler(s, auth), method, "/v1/responses/resp_1", "a")
		if b := w.Body.String(); w.Code != 503 || !strings.Contains(b, "rid-1") || strings.Contains(b, "password") || w.Header().Get("Retry-After") != "1" {
			t.Errorf("%s = %d %s %v", method, w.Code, b, w.Header())
		}
	}
}

func TestPrevious_ABrokenChainIsNotFound(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.Save(ctx, "r1", "k", answer("resp_1", "", "a"), nil)
	s.Save(ctx, "r2", "k", answer("resp_2", "resp_1", "b"), nil)
	if w := do(respstore.Handler(s, func(http.ResponseWriter, *http.Request) (keys.Principal, error) {
		return keys.Principal{Key: &keys.Key{ID: "k"}}, nil
	}), "DELETE", "/v1/responses/resp_1", "k"); w.Code != 200 {
		t.Fatalf("DELETE = %d %s", w.Code, w.Body)
	}
	_, _, err := s.Previous(ctx, "r3", "k", "resp_2")
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Code != "previous_response_not_found" || !strings.Contains(ae.Message, "expired or was deleted") {
		t.Fatalf("Previous after its first turn was deleted = %v", err)
	}
}

// Package respstore keeps Responses API responses so that a later request
// can continue one with previous_response_id and GET/DELETE
// /v1/responses/{id} can read or delete it. Every response (unless the
// request says store: false) is kept for the key that made it, for a TTL.
// The relay stores a response before its last bytes (the body, or
// response.completed) reach the client, so the client cannot ask for it
// before it exists.
package respstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/store"
)

// CodeUnavailable is the code of a 503 for a request whose stored
// responses the database could not read or change.
const CodeUnavailable = "response_store_unavailable"

// purgeEvery is how often expired responses are deleted (on the back of a
// store, not on a timer).
const purgeEvery = 10 * time.Minute

// DefaultTTL is how long responses are kept when no TTL is configured.
const DefaultTTL = 30 * 24 * time.Hour

// Store keeps responses in the gateway's database.
type Store struct {
	st        store.Responses
	ttl       time.Duration
	log       *slog.Logger
	lastPurge atomic.Int64 // Unix ms

	// A purge of expired responses runs on its own goroutine; Close waits
	// for it, so that the database is closed only after it, and no purge
	// starts after Close.
	mu      sync.Mutex
	closed  bool
	purging sync.WaitGroup
}

// New returns a Store over st keeping responses for ttl (DefaultTTL when
// zero).
func New(st store.Responses, ttl time.Duration, log *slog.Logger) *Store {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if log == nil {
		log = slog.Default()
	}
	return &Store{st: st, ttl: ttl, log: log}
}

// NewID returns a gateway-unique response id: backends such as Ollama
// reuse their chat ids, which cannot key a store.
func NewID() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "resp_" + hex.EncodeToString(b[:])
}

// TurnItems returns the input of one request as items (a string input is
// one user message).
func TurnItems(in openai.ResponsesInput) []openai.InputItem {
	if in.Text != nil {
		return []openai.InputItem{{Type: "message", Role: "user", Content: openai.ResponsesContent{Text: in.Text}}}
	}
	return in.Items
}

// Previous returns the conversation up to and including the response id,
// as the key keyID may see it: each stored turn's input items, then its
// output items. size is the stored JSON's length, for estimating tokens.
// A database that fails is logged under requestID; the client reads only
// what to do.
func (s *Store) Previous(ctx context.Context, requestID, keyID, id string) (items []openai.InputItem, size int, err error) {
	chain, err := s.st.ResponseChain(ctx, id, keyID, time.Now())
	switch {
	case errors.Is(err, store.ErrBrokenChain):
		return nil, 0, previousNotFound(id, "an earlier response of that conversation has expired or was deleted; send the full conversation in input instead")
	case err != nil:
		s.log.Warn("response store unavailable: cannot read a stored conversation", "request_id", requestID, "err", err)
		return nil, 0, apierror.Unavailable(CodeUnavailable,
			"the stored responses cannot be read right now; retry shortly, or send the full conversation in input without previous_response_id", requestID, err)
	case chain == nil:
		return nil, 0, previousNotFound(id, "responses are kept for the key that created them, for responses_ttl (default 30 days); send the full conversation in input instead")
	}
	for _, r := range chain {
		for _, raw := range []json.RawMessage{r.Input, r.Output} {
			var part []openai.InputItem
			if err := json.Unmarshal(raw, &part); err != nil {
				s.log.Error("stored response cannot be read back", "request_id", requestID, "response_id", r.ID, "err", err)
				return nil, 0, apierror.Newf(http.StatusInternalServerError, apierror.KindInternal, "response_store_corrupt",
					"stored response %s cannot be read back; send the full conversation in input instead (request %s; the gateway log has the cause)", r.ID, requestID).Wrap(err)
			}
			items = append(items, part...)
			size += len(raw)
		}
	}
	return items, size, nil
}

func previousNotFound(id, hint string) *apierror.Error {
	e := apierror.InvalidRequest("previous_response_not_found", "Previous response with id '%s' not found: %s", id, hint)
	e.Param = "previous_response_id"
	return e
}

// Save stores a finished response with this turn's input for keyID. A
// failed response is not stored (nothing to continue from). A store error
// is logged: the client still gets its answer.
func (s *Store) Save(ctx context.Context, requestID, keyID string, resp *openai.Response, turn []openai.InputItem) {
	if resp == nil || resp.Status == openai.ResponseFailed {
		return
	}
	in, err1 := json.Marshal(turn)
	out, err2 := json.Marshal(resp.Output)
	body, err3 := json.Marshal(resp)
	if err := errors.Join(err1, err2, err3); err != nil {
		s.log.Error("stored response: encode", "request_id", requestID, "err", err)
		return
	}
	if string(in) == "null" { // no input items
		in = []byte("[]")
	}
	prev := ""
	if resp.PreviousResponseID != nil {
		prev = *resp.PreviousResponseID
	}
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.st.PutResponse(ctx, store.StoredResponse{ID: resp.ID, KeyID: keyID, Model: resp.Model, PreviousID: prev,
		Input: in, Output: out, Body: body, CreatedAt: now, ExpiresAt: now.Add(s.ttl)})
	if err != nil {
		s.log.Error("could not store a response; previous_response_id will not find it", "request_id", requestID, "response_id", resp.ID, "err", err)
		return
	}
	if last := s.lastPurge.Load(); now.UnixMilli()-last > purgeEvery.Milliseconds() && s.lastPurge.CompareAndSwap(last, now.UnixMilli()) {
		s.purge()
	}
}

// purge deletes expired responses on a goroutine of its own, unless the
// Store is closed.
func (s *Store) purge() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.purging.Add(1)
	go func() {
		defer s.purging.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if n, err := s.st.PurgeResponses(ctx, time.Now()); err != nil {
			s.log.Warn("purge expired responses", "err", err)
		} else if n > 0 {
			s.log.Info("purged expired responses", "count", n)
		}
	}()
}

// Close waits for a purge in flight and starts none after it: call it
// before closing the database.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.purging.Wait()
}

// Handler answers GET and DELETE /v1/responses/{id} for the principal
// auth returns. s may be nil (storage off): every id is then not stored.
// The request id a failure names is the answer's X-Request-Id (the
// server's edge sets it).
func Handler(s *Store, auth func(http.ResponseWriter, *http.Request) (keys.Principal, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s == nil {
			openai.WriteError(w, apierror.New(http.StatusNotFound, apierror.KindNotFound, "response_not_stored",
				"this gateway does not store responses (store_responses: false): send the full conversation as input instead of previous_response_id or a response id"))
			return
		}
		s.serveLookup(w, r, auth)
	})
}

func (s *Store) serveLookup(w http.ResponseWriter, r *http.Request, auth func(http.ResponseWriter, *http.Request) (keys.Principal, error)) {
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, DELETE")
		openai.WriteError(w, apierror.Newf(http.StatusMethodNotAllowed, apierror.KindInvalidRequest, "method_not_allowed",
			"%s %s is not supported: use GET to read a stored response or DELETE to delete it", r.Method, r.URL.Path))
		return
	}
	p, err := auth(w, r)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/v1/responses/")
	if id == "" || strings.Contains(id, "/") {
		openai.WriteError(w, apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "not_found",
			"%s is not an API path: use /v1/responses/{id} with a response id (resp_...)", r.URL.Path))
		return
	}
	notFound := apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "response_not_found",
		"No response found with id '%s' for this API key (responses are kept for the key that created them, for responses_ttl)", id)
	storeErr := func(err error) *apierror.Error {
		rid := w.Header().Get("X-Request-Id")
		s.log.Warn("response store unavailable", "request_id", rid, "method", r.Method, "err", err) // the database's words stay in the log
		return apierror.Unavailable(CodeUnavailable, "the stored responses cannot be reached right now; retry shortly", rid, err)
	}
	if r.Method == http.MethodDelete {
		ok, err := s.st.DeleteResponse(r.Context(), id, p.KeyID())
		switch {
		case err != nil:
			openai.WriteError(w, storeErr(err))
		case !ok:
			openai.WriteError(w, notFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "response", "deleted": true})
		}
		return
	}
	got, err := s.st.GetResponse(r.Context(), id, p.KeyID(), time.Now())
	switch {
	case err != nil:
		openai.WriteError(w, storeErr(err))
	case got == nil:
		openai.WriteError(w, notFound)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(got.Body)
	}
}

package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/server"
)

// memStore is a keys.Store in memory.
type memStore struct{ keys []*keys.Key }

func (m *memStore) CreateKey(_ context.Context, k *keys.Key) error {
	m.keys = append(m.keys, k)
	return nil
}
func (m *memStore) ListKeys(context.Context) ([]*keys.Key, error) { return m.keys, nil }
func (m *memStore) GetKey(_ context.Context, id string) (*keys.Key, error) {
	for _, k := range m.keys {
		if k.ID == id {
			return k, nil
		}
	}
	return nil, keys.ErrNotFound
}
func (m *memStore) RevokeKey(context.Context, string, time.Time) error { return nil }
func (m *memStore) KeysVersion(context.Context) (int64, error)         { return int64(len(m.keys)), nil }
func (m *memStore) GetSetting(context.Context, string) (string, error) { return "", nil }
func (m *memStore) SetSetting(context.Context, string, string) error   { return nil }

const (
	master  = "sk-lg-master-0123456789abcdef"
	good    = "sk-lg-good-0123456789abcdefgh"
	revoked = "sk-lg-revoked-0123456789abcdef"
	expired = "sk-lg-expired-0123456789abcdef"
)

// authServer is a gateway edge knowing the master key, one good key, one
// revoked and one expired.
func authServer(t *testing.T) *server.Server {
	t.Helper()
	past := time.Now().Add(-time.Hour)
	st := &memStore{keys: []*keys.Key{
		{ID: "key_good", Name: "good", Hash: keys.Hash(good)},
		{ID: "key_revoked", Hash: keys.Hash(revoked), RevokedAt: &past},
		{ID: "key_expired", Hash: keys.Hash(expired), ExpiresAt: &past},
	}}
	v, err := keys.NewVerifier(context.Background(), st, keys.HashBytes(master), nil)
	if err != nil {
		t.Fatal(err)
	}
	return server.New(server.Options{Verifier: v})
}

func authenticate(s *server.Server, hdr ...string) (keys.Principal, *apierror.Error) {
	r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	p, err := s.Authenticate(r)
	if err == nil {
		return p, nil
	}
	var e *apierror.Error
	if !errors.As(err, &e) {
		panic(err)
	}
	return p, e
}

func TestAuth_AcceptedForms(t *testing.T) {
	s := authServer(t)
	for _, c := range []struct {
		name string
		hdr  []string
		want string // key ID, or "master"
	}{
		{"Bearer", []string{"Authorization", "Bearer " + good}, "key_good"},
		{"lowercase bearer", []string{"Authorization", "bearer " + good}, "key_good"},
		{"upper-case BEARER", []string{"Authorization", "BEARER " + good}, "key_good"},
		{"extra spaces", []string{"Authorization", "  Bearer    " + good + "  "}, "key_good"},
		{"tab after Bearer", []string{"Authorization", "Bearer\t" + good}, "key_good"},
		{"x-api-key", []string{"x-api-key", good}, "key_good"},
		{"x-api-key with spaces around", []string{"x-api-key", "  " + good + " "}, "key_good"},
		{"master key", []string{"Authorization", "Bearer " + master}, "master"},
		{"both headers, same key", []string{"Authorization", "Bearer " + good, "x-api-key", good}, "key_good"},
		// Claude Code sends ANTHROPIC_AUTH_TOKEN as Bearer and
		// ANTHROPIC_API_KEY as x-api-key; the Bearer token wins.
		{"both headers, Authorization wins", []string{"Authorization", "Bearer " + good, "x-api-key", "sk-ant-api03-somethingelse"}, "key_good"},
		{"empty Bearer defers to x-api-key", []string{"Authorization", "Bearer ", "x-api-key", good}, "key_good"},
		{"empty Authorization defers to x-api-key", []string{"Authorization", "", "x-api-key", good}, "key_good"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, e := authenticate(s, c.hdr...)
			if e != nil {
				t.Fatalf("refused: %s: %s", e.Code, e.Message)
			}
			if got := p.KeyID(); got != c.want {
				t.Fatalf("authenticated as %q, want %q", got, c.want)
			}
		})
	}
}

func TestAuth_MalformedHeadersSayWhatToFix(t *testing.T) {
	s := authServer(t)
	for _, c := range []struct {
		name     string
		hdr      []string
		code     string
		contains []string
	}{
		{"no credential", nil, "missing_api_key",
			[]string{"missing API key", "Authorization: Bearer <your llmgate key>", "x-api-key", "llmgate keys create"}},
		{"empty x-api-key", []string{"x-api-key", "  "}, "missing_api_key", []string{"missing API key"}},
		{"Bearer without key", []string{"Authorization", "Bearer"}, "missing_api_key", []string{"Bearer scheme but no key"}},
		{"Bearer and spaces", []string{"Authorization", "Bearer    "}, "missing_api_key", []string{"Bearer scheme but no key"}},
		{"Bearer: key", []string{"Authorization", "Bearer: " + good}, "malformed_authorization", []string{"remove the colon after Bearer"}},
		{"Bearer:key", []string{"Authorization", "Bearer:" + good}, "malformed_authorization", []string{"remove the colon after Bearer"}},
		{"bare key", []string{"Authorization", good}, "malformed_authorization", []string{"bare key without the Bearer scheme", "Authorization: Bearer <key>"}},
		{"Bearer twice", []string{"Authorization", "Bearer Bearer " + good}, "malformed_authorization", []string{"Bearer twice", "must not start with 'Bearer '"}},
		{"quoted key", []string{"Authorization", `Bearer "` + good + `"`}, "malformed_authorization", []string{"remove the quotes"}},
		{"single-quoted key", []string{"Authorization", `Bearer '` + good + `'`}, "malformed_authorization", []string{"remove the quotes"}},
		{"key with a space", []string{"Authorization", "Bearer " + good + " extra"}, "malformed_authorization", []string{"contains a space"}},
		{"Basic scheme", []string{"Authorization", "Basic dXNlcjpwYXNz"}, "malformed_authorization",
			[]string{"unsupported Authorization scheme 'Basic'", "Bearer <key>", "x-api-key"}},
		{"Bearer in x-api-key", []string{"x-api-key", "Bearer " + good}, "malformed_authorization", []string{"x-api-key header holds 'Bearer <key>'", "send the key alone"}},
		{"quoted x-api-key", []string{"x-api-key", `"` + good + `"`}, "malformed_authorization", []string{"remove the quotes"}},
		{"malformed Authorization beside x-api-key", []string{"Authorization", "Bearer: " + good, "x-api-key", good}, "malformed_authorization",
			[]string{"remove the colon", "x-api-key header was sent too", "Authorization takes precedence"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, e := authenticate(s, c.hdr...)
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Status != http.StatusUnauthorized || e.Kind != apierror.KindAuthentication || e.Code != c.code {
				t.Fatalf("got %d %s %s, want 401 authentication %s: %s", e.Status, e.Kind, e.Code, c.code, e.Message)
			}
			for _, w := range c.contains {
				if !strings.Contains(e.Message, w) {
					t.Fatalf("message %q does not say %q", e.Message, w)
				}
			}
			if e.Header.Get("Www-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

// A value that is not a scheme name may be a key: it is never echoed.
func TestAuth_ErrorsNeverEchoTheSecret(t *testing.T) {
	s := authServer(t)
	for _, hdr := range [][]string{
		{"Authorization", good + " trailing"},
		{"Authorization", "Token " + good},
		{"Authorization", good},
		{"Authorization", "Bearer: " + good},
		{"Authorization", "Bearer " + good + " extra"},
		{"x-api-key", "Bearer " + good},
	} {
		_, e := authenticate(s, hdr...)
		if e == nil {
			t.Fatalf("%v accepted", hdr)
		}
		if strings.Contains(e.Message, good[6:16]) {
			t.Fatalf("%v: the message echoes the key: %s", hdr, e.Message)
		}
	}
}

func TestAuth_KeyStateErrors(t *testing.T) {
	s := authServer(t)
	for _, c := range []struct {
		secret, code string
		contains     []string
	}{
		{revoked, "key_revoked", []string{"sk-lg-…cdef", "has been revoked", "ask the gateway admin for a new key"}},
		{expired, "key_expired", []string{"sk-lg-…cdef", "has expired"}},
		{"sk-lg-unknown-0123456789abcdef", "invalid_api_key", []string{"invalid API key sk-lg-…cdef", "llmgate keys create"}},
		// A backend's own key gets a hint about llmgate keys.
		{"sk-proj-abcdefghijklmnopqrstuvwxyz", "invalid_api_key", []string{"…wxyz", "llmgate keys start with sk-lg-", "a backend's own key does not work here"}},
	} {
		_, e := authenticate(s, "Authorization", "Bearer "+c.secret)
		if e == nil || e.Status != 401 || e.Code != c.code {
			t.Fatalf("%s: got %+v, want 401 %s", c.secret, e, c.code)
		}
		for _, w := range c.contains {
			if !strings.Contains(e.Message, w) {
				t.Fatalf("%s: message %q does not say %q", c.secret, e.Message, w)
			}
		}
	}
}

// When both headers carry different keys and the one used is refused, the
// message says which header it came from and that the other was ignored.
func TestAuth_DisagreeingHeadersNamedWhenTheUsedKeyIsRefused(t *testing.T) {
	s := authServer(t)
	_, e := authenticate(s, "Authorization", "Bearer sk-lg-unknown-0123456789abcdef", "x-api-key", good)
	if e == nil || e.Code != "invalid_api_key" {
		t.Fatalf("got %+v", e)
	}
	for _, w := range []string{"from the Authorization header", "takes precedence", "x-api-key sk-lg-…efgh", "send only one"} {
		if !strings.Contains(e.Message, w) {
			t.Fatalf("message %q does not say %q", e.Message, w)
		}
	}
	if strings.Contains(e.Message, good) {
		t.Fatalf("message echoes the x-api-key: %s", e.Message)
	}
}

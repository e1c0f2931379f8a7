package server

import (
	"errors"
	"net/http"
	"strings"

	"llmgate/internal/apierror"
	"llmgate/internal/keys"
)

// credential extracts the API key from Authorization or x-api-key, with an
// error that names the exact mistake when the header is malformed. When
// both headers are sent, Authorization is the one used (as Claude Code
// does with ANTHROPIC_AUTH_TOKEN over ANTHROPIC_API_KEY); an Authorization
// header that holds no key at all ("Bearer ") defers to x-api-key.
func credential(r *http.Request) (string, error) {
	h := r.Header
	apiKey := strings.TrimSpace(h.Get("X-Api-Key"))
	if auth := strings.TrimSpace(h.Get("Authorization")); auth != "" {
		key, err := bearer(auth)
		if err == nil {
			return key, nil
		}
		if apiKey != "" {
			if err.Code == "missing_api_key" {
				return checkAPIKey(apiKey)
			}
			err.Message += " (an x-api-key header was sent too, but Authorization takes precedence: fix or remove one of them)"
		}
		return "", err
	}
	if apiKey != "" {
		return checkAPIKey(apiKey)
	}
	return "", unauthorized("missing_api_key", "missing API key: send the header 'Authorization: Bearer <your llmgate key>' (or 'x-api-key: <key>'); create a key with 'llmgate keys create'")
}

// bearer parses an Authorization header value (already trimmed).
func bearer(auth string) (string, *apierror.Error) {
	scheme, key, hasSpace := cutSpace(auth) // auth is trimmed: a space means a non-empty key
	switch {
	case strings.EqualFold(scheme, "Bearer") && !hasSpace:
		return "", unauthorized("missing_api_key", "the Authorization header has the Bearer scheme but no key: send 'Authorization: Bearer <your llmgate key>'")
	case strings.EqualFold(scheme, "Bearer"):
		if s2, rest2, ok := cutSpace(key); ok && strings.EqualFold(strings.TrimSuffix(s2, ":"), "Bearer") && strings.TrimSpace(rest2) != "" {
			return "", unauthorized("malformed_authorization", "the Authorization header says Bearer twice ('Bearer Bearer <key>'): the key itself must not start with 'Bearer ' (check the environment variable holding it, such as OPENAI_API_KEY)")
		}
		if err := keyShape(key, "after Bearer"); err != nil {
			return "", err
		}
		return key, nil
	case len(scheme) > len("Bearer:") && strings.EqualFold(scheme[:len("Bearer:")], "Bearer:") && !hasSpace:
		return "", unauthorized("malformed_authorization", "malformed Authorization header 'Bearer:<key>': remove the colon after Bearer and send 'Authorization: Bearer <key>'")
	case strings.HasSuffix(scheme, ":") && strings.EqualFold(strings.TrimSuffix(scheme, ":"), "Bearer"):
		return "", unauthorized("malformed_authorization", "malformed Authorization header 'Bearer: …': remove the colon after Bearer and send 'Authorization: Bearer <key>'")
	case !hasSpace:
		return "", unauthorized("malformed_authorization", "the Authorization header holds a bare key without the Bearer scheme: send 'Authorization: Bearer <key>'")
	case schemeName(scheme):
		return "", unauthorized("malformed_authorization", "unsupported Authorization scheme '"+scheme+"': send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
	default:
		// Not a scheme name: perhaps a key followed by junk. Never echo it.
		return "", unauthorized("malformed_authorization", "the Authorization header does not start with 'Bearer ': send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
	}
}

// checkAPIKey checks an x-api-key value (already trimmed).
func checkAPIKey(key string) (string, error) {
	if s, rest, ok := cutSpace(key); ok && strings.EqualFold(strings.TrimSuffix(s, ":"), "Bearer") && strings.TrimSpace(rest) != "" {
		return "", unauthorized("malformed_authorization", "the x-api-key header holds 'Bearer <key>': send the key alone, 'x-api-key: <key>' (or use 'Authorization: Bearer <key>')")
	}
	if err := keyShape(key, "in x-api-key"); err != nil {
		return "", err
	}
	return key, nil
}

// keyShape refuses values that cannot be a key, saying why.
func keyShape(key, where string) *apierror.Error {
	if strings.HasPrefix(key, `"`) || strings.HasPrefix(key, `'`) {
		return unauthorized("malformed_authorization", "the API key is wrapped in quotes: remove the quotes around the key (check how the environment variable was set)")
	}
	if strings.ContainsAny(key, " \t") {
		return unauthorized("malformed_authorization", "the API key "+where+" contains a space: send only the key, which has none (check the environment variable holding it)")
	}
	return nil
}

// cutSpace splits s at its first run of spaces or tabs.
func cutSpace(s string) (before, after string, found bool) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, "", false
	}
	return s[:i], strings.TrimLeft(s[i:], " \t"), true
}

// schemeName reports whether s looks like an HTTP auth scheme name (Basic,
// Digest, Token...) rather than a credential, so it is safe to echo.
func schemeName(s string) bool {
	if len(s) == 0 || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if (c < 'a' || c > 'z') && s[i] != '-' {
			return false
		}
	}
	return true
}

// authenticate returns the principal behind the request's credential, or
// the one an in-process caller attached with keys.WithPrincipal. w, when
// not nil, carries the request id a refusal names.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (keys.Principal, error) {
	if p, ok := keys.PrincipalFrom(r.Context()); ok {
		return p, nil
	}
	secret, err := credential(r)
	if err != nil {
		return keys.Principal{}, err
	}
	p, err := s.verifier.Verify(secret)
	if err == nil {
		return p, nil
	}
	var e *apierror.Error
	switch {
	case errors.Is(err, keys.ErrUnavailable):
		// The verifier logged the store's error; the client learns only
		// that its key could not be checked, never the database's words.
		var id string
		if w != nil {
			id = w.Header().Get("X-Request-Id")
		}
		return p, apierror.Unavailable(apierror.CodeDatabaseUnavailable, "API key "+keys.Hint(secret)+" is not among the keys this gateway has loaded, "+
			"and the gateway's database, which would know a key created moments ago, is unavailable: retry shortly, and check the key if it persists", id, err)
	case errors.Is(err, keys.ErrRevoked):
		e = unauthorized("key_revoked", "API key "+keys.Hint(secret)+" has been revoked: ask the gateway admin for a new key")
	case errors.Is(err, keys.ErrExpired):
		e = unauthorized("key_expired", "API key "+keys.Hint(secret)+" has expired: ask the gateway admin for a new key")
	default:
		msg := "invalid API key " + keys.Hint(secret) + ": it is not a key this gateway issued; use a key from 'llmgate keys create' or the master key"
		if !strings.HasPrefix(secret, keys.Prefix) {
			msg += " (llmgate keys start with " + keys.Prefix + "; a backend's own key does not work here)"
		}
		e = unauthorized("invalid_api_key", msg)
	}
	// Both headers, different keys: say which one was checked.
	if other := strings.TrimSpace(r.Header.Get("X-Api-Key")); other != "" && other != secret {
		e.Message += "; this key came from the Authorization header, which takes precedence over the different key in x-api-key " +
			keys.Hint(other) + ": send only one of them"
	}
	return p, e
}

func unauthorized(code, msg string) *apierror.Error {
	e := apierror.New(http.StatusUnauthorized, apierror.KindAuthentication, code, msg)
	e.Header = http.Header{"Www-Authenticate": {`Bearer realm="llmgate"`}}
	return e
}

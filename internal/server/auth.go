package server

import (
	"errors"
	"net/http"
	"strings"

	"llmgate/internal/apierror"
	"llmgate/internal/keys"
)

// credential extracts the API key from Authorization or x-api-key, with an
// error that names the exact mistake when the header is malformed.
func credential(r *http.Request) (string, error) {
	h := r.Header
	if auth := h.Get("Authorization"); auth != "" {
		auth = strings.TrimSpace(auth)
		scheme, rest, hasSpace := strings.Cut(auth, " ")
		switch {
		case strings.EqualFold(scheme, "Bearer") && hasSpace:
			key := strings.TrimSpace(rest)
			if key == "" {
				return "", unauthorized("missing_api_key", "the Authorization header has the Bearer scheme but no key: send 'Authorization: Bearer <your llmgate key>'")
			}
			if strings.HasPrefix(key, `"`) || strings.HasPrefix(key, `'`) {
				return "", unauthorized("malformed_authorization", "the API key is wrapped in quotes: remove the quotes around the key (check how the environment variable was set)")
			}
			return key, nil
		case strings.HasSuffix(scheme, ":") && strings.EqualFold(strings.TrimSuffix(scheme, ":"), "Bearer"):
			return "", unauthorized("malformed_authorization", "malformed Authorization header 'Bearer: …': remove the colon after Bearer and send 'Authorization: Bearer <key>'")
		case strings.EqualFold(scheme, "Bearer"):
			return "", unauthorized("missing_api_key", "the Authorization header has the Bearer scheme but no key: send 'Authorization: Bearer <your llmgate key>'")
		case !hasSpace:
			return "", unauthorized("malformed_authorization", "the Authorization header holds a bare key without the Bearer scheme: send 'Authorization: Bearer <key>'")
		default:
			return "", unauthorized("malformed_authorization", "unsupported Authorization scheme '"+truncate(scheme, 20)+"': send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
		}
	}
	if k := strings.TrimSpace(h.Get("X-Api-Key")); k != "" {
		return k, nil
	}
	return "", unauthorized("missing_api_key", "missing API key: send the header 'Authorization: Bearer <your llmgate key>' (or 'x-api-key: <key>'); create a key with 'llmgate keys create'")
}

// authenticate returns the principal behind the request's credential.
func (s *Server) authenticate(r *http.Request) (keys.Principal, error) {
	secret, err := credential(r)
	if err != nil {
		return keys.Principal{}, err
	}
	p, err := s.verifier.Verify(secret)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, keys.ErrRevoked):
		return p, unauthorized("key_revoked", "API key "+keys.Hint(secret)+" has been revoked: ask the gateway admin for a new key")
	case errors.Is(err, keys.ErrExpired):
		return p, unauthorized("key_expired", "API key "+keys.Hint(secret)+" has expired: ask the gateway admin for a new key")
	default:
		msg := "invalid API key " + keys.Hint(secret) + ": it is not a key this gateway issued; use a key from 'llmgate keys create' or the master key"
		if !strings.HasPrefix(secret, keys.Prefix) {
			msg += " (llmgate keys start with " + keys.Prefix + "; a backend's own key does not work here)"
		}
		return p, unauthorized("invalid_api_key", msg)
	}
}

func unauthorized(code, msg string) *apierror.Error {
	e := apierror.New(http.StatusUnauthorized, apierror.KindAuthentication, code, msg)
	e.Header = http.Header{"Www-Authenticate": {`Bearer realm="llmgate"`}}
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

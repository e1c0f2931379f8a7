package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/store"
)

// cookieName holds the session id. The __Host- prefix is used over TLS,
// where browsers then refuse the cookie unless it is Secure, host-only and
// Path=/; over plain HTTP (loopback) the cookie is scoped to /ui.
const (
	cookieName       = "llmgate_session"
	secureCookieName = "__Host-llmgate_session"
	csrfHeader       = "X-CSRF-Token"
	// maxSessionsPerKey caps the sign-ins of one key (or of the master
	// key); a new one ends the oldest beyond it.
	maxSessionsPerKey = 100
)

// session is one signed-in browser. Sessions live in the database, shared
// by every replica behind a load balancer: a row holds the SHA-256 of the
// cookie value, the CSRF token and the key's ID (or the master flag), never
// a secret. Each request re-reads the key, so revocation, expiry and
// allow-list changes apply at once on every replica.
type session struct {
	idHash    string // hex SHA-256 of the cookie value
	csrf      string
	principal keys.Principal
	expires   time.Time
}

// admin reports whether the session signed in with the master key.
func (s *session) admin() bool { return s.principal.Master }

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func hashID(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// createSession stores a new session for p and returns the cookie value.
// Expired sessions are purged and the key's oldest sign-ins beyond the cap
// ended on the way.
func (c *Console) createSession(ctx context.Context, p keys.Principal) (string, *session, error) {
	now := c.opt.Now()
	id := randomToken()
	row := store.Session{IDHash: hashID(id), CSRF: randomToken(), Master: p.Master, CreatedAt: now, ExpiresAt: now.Add(c.opt.SessionTTL)}
	if p.Master && c.opt.MasterHash != nil {
		row.KeyHash = c.opt.MasterHash()
	}
	if !p.Master {
		row.KeyID, row.KeyHash = p.Key.ID, p.Key.Hash
	}
	if _, err := c.opt.Store.PurgeSessions(ctx, now); err != nil {
		c.log.Warn("console: purge expired sessions", "err", err)
	}
	if err := c.opt.Store.CreateSession(ctx, row); err != nil {
		return "", nil, err
	}
	if _, err := c.opt.Store.TrimSessions(ctx, row.KeyID, row.Master, maxSessionsPerKey); err != nil {
		c.log.Warn("console: cap sessions", "key_id", p.KeyID(), "err", err)
	}
	return id, &session{idHash: row.IDHash, csrf: row.CSRF, principal: p, expires: row.ExpiresAt}, nil
}

// errSessionEnded is a session whose key can no longer sign in; its row is
// deleted and the message says why.
type errSessionEnded struct{ msg string }

func (e errSessionEnded) Error() string { return e.msg }

// resolve turns a stored session into the request's principal, reading the
// key again: a revoked, expired, rotated or deleted key ends the session.
func (c *Console) resolve(ctx context.Context, row *store.Session) (*session, error) {
	s := &session{idHash: row.IDHash, csrf: row.CSRF, expires: row.ExpiresAt}
	var k *keys.Key
	var err error
	if !row.Master {
		k, err = c.opt.Store.GetKey(ctx, row.KeyID)
	}
	var ended string
	switch {
	case row.Master:
		// Bound to the master key it signed in with: a changed (say,
		// leaked and replaced) master key ends every admin session.
		if c.opt.MasterHash != nil && (row.KeyHash == "" || row.KeyHash != c.opt.MasterHash()) {
			ended = "the master key was changed"
		}
	case errors.Is(err, keys.ErrNotFound):
		ended = "your key no longer exists"
	case err != nil:
		return nil, err
	case k.Hash != row.KeyHash:
		ended = "your key was rotated"
	default:
		if uerr := k.Usable(c.opt.Now()); uerr != nil {
			ended = "your key is no longer valid (" + uerr.Error() + ")"
		}
	}
	if ended != "" {
		if derr := c.opt.Store.DeleteSession(ctx, row.IDHash); derr != nil {
			c.log.Warn("console: end session", "err", derr)
		}
		return nil, errSessionEnded{ended + ": sign in again"}
	}
	if row.Master {
		s.principal = keys.Principal{Master: true}
	} else {
		s.principal = keys.Principal{Key: k}
	}
	return s, nil
}

func isTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	ck := &http.Cookie{Name: cookieName, Value: value, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: maxAge}
	if isTLS(r) {
		ck.Name, ck.Path, ck.Secure = secureCookieName, "/", true
	}
	return ck
}

// sessionOf returns the request's session (nil when it has none, or it
// expired or was signed out on any replica).
func (c *Console) sessionOf(r *http.Request) (*session, error) {
	for _, name := range []string{secureCookieName, cookieName} {
		ck, err := r.Cookie(name)
		if err != nil || ck.Value == "" {
			continue
		}
		row, err := c.opt.Store.GetSession(r.Context(), hashID(ck.Value), c.opt.Now())
		if err != nil {
			return nil, err
		}
		if row != nil {
			return c.resolve(r.Context(), row)
		}
	}
	return nil, nil
}

// sameOrigin rejects cross-site requests: browsers send Sec-Fetch-Site and
// Origin on every state-changing fetch, and a forged form post from another
// site carries a foreign Origin. Non-browser clients without either header
// still need the CSRF token, which only the console page can read.
func sameOrigin(r *http.Request) error {
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" && sfs != "none" {
		return errors.New("cross-site request refused (Sec-Fetch-Site: " + sfs + ")")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return errors.New("cross-origin request refused (Origin " + o + " is not " + r.Host + ")")
		}
	}
	return nil
}

// session wraps a handler that needs a signed-in user. State-changing
// methods must pass the same-origin check and carry the session's CSRF
// token; adminOnly handlers refuse user-key sessions.
func (c *Console) session(adminOnly bool, h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessionOf(r)
		var ended errSessionEnded
		switch {
		case errors.As(err, &ended):
			writeError(w, http.StatusUnauthorized, ended.msg)
			return
		case err != nil:
			c.unavailable(w, "read session", err)
			return
		case s == nil:
			writeError(w, http.StatusUnauthorized, "not signed in (or the session expired): sign in with the master key or your API key")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := sameOrigin(r); err != nil {
				writeError(w, http.StatusForbidden, err.Error())
				return
			}
			tok := r.Header.Get(csrfHeader)
			if tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.csrf)) != 1 {
				writeError(w, http.StatusForbidden, "missing or wrong CSRF token: reload the console page")
				return
			}
		}
		if adminOnly && !s.admin() {
			writeError(w, http.StatusForbidden, "this needs the master key: you are signed in with an API key, which sees its own usage only")
			return
		}
		h(w, r, s)
	}
}

type loginRequest struct {
	Key string `json:"key"`
}

func (c *Console) handleLogin(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	var req loginRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "send a JSON body {\"key\": \"...\"}")
		return
	}
	secret := strings.TrimSpace(req.Key)
	if secret == "" {
		writeError(w, http.StatusBadRequest, "enter the master key or an API key")
		return
	}
	p, err := c.opt.Verify(secret)
	if errors.Is(err, keys.ErrUnavailable) {
		c.unavailable(w, "sign-in key lookup", err)
		return
	}
	if err != nil {
		msg := "that key was not accepted"
		switch {
		case errors.Is(err, keys.ErrRevoked):
			msg = "that key has been revoked"
		case errors.Is(err, keys.ErrExpired):
			msg = "that key has expired"
		}
		c.log.Info("console sign-in refused", "hint", keys.Hint(secret), "remote", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, msg+": use the master key (LLMGATE_MASTER_KEY) or an API key from 'llmgate keys create'")
		return
	}
	id, s, err := c.createSession(r.Context(), p)
	if err != nil {
		c.unavailable(w, "store session", err)
		return
	}
	http.SetCookie(w, c.cookie(r, id, int(c.opt.SessionTTL.Seconds())))
	c.log.Info("console sign-in", "admin", p.Master, "key_id", p.KeyID(), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, meOf(s))
}

func (c *Console) handleLogout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.opt.Store.DeleteSession(r.Context(), s.idHash); err != nil {
		c.unavailable(w, "sign out", err)
		return
	}
	http.SetCookie(w, c.cookie(r, "", -1))
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

type me struct {
	Role    string    `json:"role"` // admin or user
	KeyID   string    `json:"key_id,omitempty"`
	KeyName string    `json:"key_name,omitempty"`
	KeyHint string    `json:"key_hint,omitempty"`
	Models  []string  `json:"allowed_models,omitempty"`
	CSRF    string    `json:"csrf"`
	Expires time.Time `json:"expires"`
}

func meOf(s *session) me {
	m := me{Role: "user", CSRF: s.csrf, Expires: s.expires}
	if s.admin() {
		m.Role = "admin"
		return m
	}
	if k := s.principal.Key; k != nil {
		m.KeyID, m.KeyName, m.KeyHint, m.Models = k.ID, k.Name, k.Hint, k.Models
	}
	return m
}

func (c *Console) handleMe(w http.ResponseWriter, r *http.Request, s *session) {
	writeJSON(w, http.StatusOK, meOf(s))
}

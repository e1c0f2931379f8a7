package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"llmgate/internal/keys"
)

// cookieName holds the session id. The __Host- prefix is used over TLS,
// where browsers then refuse the cookie unless it is Secure, host-only and
// Path=/; over plain HTTP (loopback) the cookie is scoped to /ui.
const (
	cookieName       = "llmgate_session"
	secureCookieName = "__Host-llmgate_session"
	csrfHeader       = "X-CSRF-Token"
	maxSessions      = 10000
)

// session is one signed-in browser. The key's secret stays server-side,
// in memory only: the playground needs it to call the API as that key.
type session struct {
	idHash    [32]byte
	csrf      string
	secret    string
	principal keys.Principal
	expires   time.Time
}

// admin reports whether the session signed in with the master key.
func (s *session) admin() bool { return s.principal.Master }

type sessions struct {
	mu  sync.Mutex
	m   map[[32]byte]*session // by SHA-256 of the cookie value: a memory dump does not yield live cookies
	ttl time.Duration
	now func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[[32]byte]*session{}, ttl: ttl, now: now}
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (ss *sessions) create(p keys.Principal, secret string) (id string, s *session) {
	id = randomToken()
	s = &session{idHash: sha256.Sum256([]byte(id)), csrf: randomToken(), secret: secret, principal: p, expires: ss.now().Add(ss.ttl)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	if len(ss.m) >= maxSessions {
		for k, v := range ss.m {
			if now.After(v.expires) {
				delete(ss.m, k)
			}
		}
		if len(ss.m) >= maxSessions { // still full: drop the one closest to expiry
			var oldest [32]byte
			var at time.Time
			for k, v := range ss.m {
				if at.IsZero() || v.expires.Before(at) {
					oldest, at = k, v.expires
				}
			}
			delete(ss.m, oldest)
		}
	}
	ss.m[s.idHash] = s
	return id, s
}

func (ss *sessions) get(id string) *session {
	if id == "" {
		return nil
	}
	h := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[h]
	if s == nil {
		return nil
	}
	if ss.now().After(s.expires) {
		delete(ss.m, h)
		return nil
	}
	return s
}

func (ss *sessions) delete(s *session) {
	ss.mu.Lock()
	delete(ss.m, s.idHash)
	ss.mu.Unlock()
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

func (c *Console) sessionOf(r *http.Request) *session {
	for _, name := range []string{secureCookieName, cookieName} {
		if ck, err := r.Cookie(name); err == nil {
			if s := c.sessions.get(ck.Value); s != nil {
				return s
			}
		}
	}
	return nil
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
		s := c.sessionOf(r)
		if s == nil {
			writeError(w, http.StatusUnauthorized, "not signed in (or the session expired): sign in with the master key or your API key")
			return
		}
		// A revoked or expired key ends its sessions at once.
		if _, err := c.opt.Verify(s.secret); err != nil {
			c.sessions.delete(s)
			writeError(w, http.StatusUnauthorized, "your key is no longer valid ("+err.Error()+"): sign in again")
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
	id, s := c.sessions.create(p, secret)
	http.SetCookie(w, c.cookie(r, id, int(c.opt.SessionTTL.Seconds())))
	c.log.Info("console sign-in", "admin", p.Master, "key_id", p.KeyID(), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, meOf(s))
}

func (c *Console) handleLogout(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.delete(s)
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

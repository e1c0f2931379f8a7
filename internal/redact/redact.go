// Package redact hides passwords in text the gateway prints: database and
// Redis URLs in the start-up log, reload warnings, CLI output and error
// messages. One function, Secrets, serves every place, so that a form of
// password it learns to hide is hidden everywhere.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces every hidden value (the form net/url's URL.Redacted and
// pgx use).
const Mask = "xxxxx"

// keyValue matches a password given as a key/value pair: a query-string
// parameter (postgres://h/db?password=s&sslmode=disable, or sslpassword)
// or a libpq keyword/value DSN ("host=h password=s", "password = 's s'").
var keyValue = regexp.MustCompile(`(?i)\b((?:ssl)?(?:password|passwd|pwd)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&;'"]+)`)

// Secrets returns s with every password it holds replaced by Mask: the
// password of each URL's user information ("postgres://user:pw@host",
// "redis://:pw@host"; the user name stays, it helps to diagnose), and
// password, sslpassword, passwd and pwd key/value pairs (query strings and
// DSNs). s may be a URL alone or any text holding some, such as an error
// message. Text without a password is returned unchanged.
func Secrets(s string) string {
	if strings.Contains(s, "://") {
		s = userinfo(s)
	}
	if strings.Contains(s, "=") {
		s = keyValue.ReplaceAllString(s, "${1}"+Mask)
	}
	return s
}

// userinfo masks the password of every scheme://user:password@ in s.
func userinfo(s string) string {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		start := i + 3
		b.WriteString(rest[:start])
		rest = rest[start:]
		// The URL runs to the first space or quote; its authority to the
		// first '/', '?' or '#' - unless a password holds a '/': then the
		// user information ends at the last '@' before any '?' or '#'.
		end := strings.IndexAny(rest, " \t\r\n\"'`<>")
		if end < 0 {
			end = len(rest)
		}
		u := rest[:end]
		auth := u
		if j := strings.IndexAny(u, "/?#"); j >= 0 {
			auth = u[:j]
		}
		at := strings.LastIndexByte(auth, '@')
		if at < 0 {
			pre := u
			if j := strings.IndexAny(u, "?#"); j >= 0 {
				pre = u[:j]
			}
			at = strings.LastIndexByte(pre, '@')
		}
		if at >= 0 {
			if c := strings.IndexByte(u[:at], ':'); c >= 0 {
				b.WriteString(u[:c+1])
				b.WriteString(Mask)
				rest = rest[at:]
				continue
			}
		}
		b.WriteString(u)
		rest = rest[end:]
	}
	b.WriteString(rest)
	return b.String()
}

package doctor

import (
	"net"
	"net/url"
	"strings"
)

func trimSlash(s string) string { return strings.TrimRight(s, "/") }

// endpointSuffixes are paths people paste into a base URL by mistake;
// clients append them again.
var endpointSuffixes = []string{"/chat/completions", "/completions", "/responses", "/messages", "/models", "/embeddings"}

// isLoopback reports whether host names this machine.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkURLShape looks at the base URL without touching the network.
func (d *diagnosis) checkURLShape() {
	c := Check{ID: "url.shape", Title: "base URL shape", Status: StatusPass}
	defer func() { d.add(c) }()
	raw := cleanValue(d.baseURL)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		c.Status = StatusFail
		c.Detail = "cannot use " + quote(d.baseURL, 80) + " as a base URL"
		if err == nil && u.Scheme == "" || u != nil && u.Host == "" {
			c.Detail += ": it needs a scheme and a host"
		}
		c.Fix = "Use a full URL such as " + DefaultBaseURL + "."
		d.blocked = "URL"
		return
	}
	// Requests go to the URL without query and fragment: clients that keep
	// them append paths after the query, which no server understands.
	d.api = trimSlash(u.Scheme + "://" + u.Host + u.EscapedPath())
	path := strings.TrimRight(u.Path, "/")
	var notes []string
	warn := func(detail, fix string) {
		notes = append(notes, detail)
		if c.Fix == "" {
			c.Status, c.Fix = StatusWarn, fix
		}
	}
	fail := func(detail, fix string) {
		notes = append(notes, detail)
		if c.Status != StatusFail {
			c.Status, c.Fix = StatusFail, fix
		}
	}
	fixed := u.Scheme + "://" + u.Host
	switch {
	case strings.Contains(path+"/", "/v1/v1/"):
		fail("path "+path+" repeats /v1, so requests go to /v1/v1/… and get 404",
			"Remove the duplicate /v1: use "+fixed+strings.Replace(path, "/v1/v1", "/v1", 1)+".")
	case hasEndpointSuffix(path):
		base := path[:strings.LastIndex(path, "/v1")+len("/v1")]
		if !strings.Contains(path, "/v1") {
			base = ""
		}
		fail("path "+path+" includes an endpoint; clients append it again",
			"Stop the base URL at /v1: use "+fixed+base+".")
	case !strings.HasSuffix(path, "/v1") && !strings.Contains(path, "/v1/"):
		warn("path "+orRoot(path)+" has no /v1; OpenAI clients append /chat/completions directly",
			"Append /v1 unless the server documents another prefix: "+fixed+path+"/v1.")
	}
	if u.RawQuery != "" {
		if hasTracking(u.Query()) {
			fail("query "+quote(u.RawQuery, 60)+" contains tracking parameters copied with the URL",
				"Remove the query string from the base URL.")
		} else {
			warn("query "+quote(u.RawQuery, 60)+" is dropped or mangled by most OpenAI clients when they append paths",
				"Remove the query string, or pass it with the client's default-query option.")
		}
	}
	if u.Fragment != "" {
		fail("fragment #"+u.Fragment+" is not sent to servers", "Remove the #… part of the base URL.")
	}
	if strings.HasSuffix(u.Path, "/") {
		warn("trailing slash; clients that join strings send //chat/completions",
			"Drop the trailing slash: "+fixed+path+".")
	}
	if u.User != nil {
		warn("URL carries user credentials, which clients do not send as an API key",
			"Remove user:password@ from the URL and pass the key as OPENAI_API_KEY.")
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) && !isPrivate(u.Hostname()) {
		warn("plain http to "+u.Hostname()+" sends the key unencrypted",
			"Use https:// for hosts outside this machine and private network.")
	}
	if raw != d.baseURL {
		fail("value has surrounding blanks or quotes", "Remove the blanks or quotes around the base URL.")
	}
	if len(notes) == 0 {
		c.Detail = d.api
	} else {
		c.Detail = strings.Join(notes, "; ")
	}
}

func orRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

func hasEndpointSuffix(path string) bool {
	for _, s := range endpointSuffixes {
		if strings.HasSuffix(path, s) {
			return true
		}
	}
	return false
}

func hasTracking(q url.Values) bool {
	for k := range q {
		k = strings.ToLower(k)
		if strings.HasPrefix(k, "utm_") || k == "fbclid" || k == "gclid" || k == "ref" || k == "ref_src" {
			return true
		}
	}
	return false
}

// isPrivate reports RFC 1918 / ULA addresses and single-label or .local
// names, where plain http is a common, acceptable lab setup.
func isPrivate(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsPrivate() || ip.IsLinkLocalUnicast()
	}
	return !strings.Contains(host, ".") || strings.HasSuffix(host, ".local") || strings.HasSuffix(host, ".internal")
}

// urlCandidates are corrected base URLs to probe when the given one answers
// 404: the duplicate /v1 removed, an endpoint suffix removed, /v1 appended.
func urlCandidates(api string) []string {
	u, err := url.Parse(api)
	if err != nil {
		return nil
	}
	root := u.Scheme + "://" + u.Host
	path := strings.TrimRight(u.Path, "/")
	var out []string
	addPath := func(p string) {
		c := root + p
		for _, o := range out {
			if o == c {
				return
			}
		}
		if c != api {
			out = append(out, c)
		}
	}
	for strings.Contains(path+"/", "/v1/v1/") {
		path = strings.Replace(path, "/v1/v1", "/v1", 1)
		addPath(path)
	}
	for _, s := range endpointSuffixes {
		if strings.HasSuffix(path, s) {
			path = strings.TrimSuffix(path, s)
			addPath(path)
		}
	}
	if !strings.HasSuffix(path, "/v1") {
		addPath(path + "/v1")
	}
	if path != "/v1" {
		addPath("/v1")
	}
	return out
}

// quote returns s cut to n bytes on one line, for showing bodies and values.
func quote(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return "“" + s + "”"
}

package doctor

import (
	"fmt"
	"strings"
)

// Variables the doctor reads, in precedence order. A base URL variable is
// paired with the key variable of the same family so that OPENAI_BASE_URL is
// tested with OPENAI_API_KEY, not with an unrelated LLMGATE_API_KEY.
var (
	baseURLVars = []struct {
		name string
		keys []string
		// anthropic marks a root URL that clients extend with /v1/messages.
		anthropic bool
	}{
		{"LLMGATE_BASE_URL", []string{"LLMGATE_API_KEY"}, false},
		{"OPENAI_BASE_URL", []string{"OPENAI_API_KEY"}, false},
		{"OPENAI_API_BASE", []string{"OPENAI_API_KEY"}, false},
		{"ANTHROPIC_BASE_URL", []string{"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"}, true},
	}
	keyVars   = []string{"LLMGATE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"}
	modelVars = []string{"LLMGATE_MODEL", "OPENAI_MODEL", "ANTHROPIC_MODEL"}
)

// lookup returns a variable's value when it is set to something other than
// blanks.
func (d *diagnosis) lookup(name string) (string, bool) {
	v, ok := d.env(name)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	return v, true
}

// resolveInputs fills base URL, key and model from options, then environment,
// then defaults, remembering where each came from.
func (d *diagnosis) resolveInputs() {
	o := d.opts
	keyFamily := keyVars
	switch {
	case o.BaseURL != "":
		d.baseURL, d.baseSrc = o.BaseURL, "--base-url"
	default:
		for _, bv := range baseURLVars {
			if v, ok := d.lookup(bv.name); ok {
				d.baseURL, d.baseSrc = v, bv.name
				if root := trimSlash(cleanValue(v)); bv.anthropic && !strings.HasSuffix(root, "/v1") {
					// A root that already ends in /v1 is a mistake that
					// checkConsistency names; testing it as is avoids /v1/v1.
					d.baseURL = root + "/v1"
				}
				keyFamily = append(append([]string(nil), bv.keys...), keyVars...)
				break
			}
		}
		if d.baseURL == "" {
			d.baseURL, d.baseSrc = DefaultBaseURL, "default"
		}
	}
	if o.APIKey != "" {
		d.key, d.keySrc = o.APIKey, "--api-key"
	} else {
		for _, name := range keyFamily {
			if v, ok := d.lookup(name); ok {
				d.key, d.keySrc, d.keyVar = v, name, name
				break
			}
		}
	}
	if o.Model != "" {
		d.model, d.modelSrc = o.Model, "--model"
	} else {
		for _, name := range modelVars {
			if v, ok := d.lookup(name); ok {
				d.model, d.modelSrc = strings.TrimSpace(v), name
				break
			}
		}
	}
	// A key with a line break cannot be sent at all (Go refuses the header);
	// send it trimmed so the other checks still run, and let checkKeyVariables
	// report the break.
	d.keyForRequests = d.key
	if strings.ContainsAny(d.key, "\r\n") {
		d.keyForRequests = strings.TrimSpace(d.key)
	}
}

// cleanValue strips what shells, .env loaders and copy-paste leave around a
// value: blanks, line breaks and one pair of matching quotes.
func cleanValue(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = strings.TrimSpace(v[1 : len(v)-1])
	}
	return v
}

// cleanKey is cleanValue plus removal of an "Authorization" scheme that
// was pasted into the key ("Bearer sk-…", "Bearer: sk-…").
func cleanKey(k string) string {
	k = cleanValue(k)
	if hasBearerPrefix(k) {
		k = strings.TrimSpace(strings.TrimLeft(k[len("bearer"):], ": "))
	}
	return k
}

func hasBearerPrefix(k string) bool {
	return len(k) > 6 && strings.EqualFold(k[:6], "bearer") && (k[6] == ' ' || k[6] == ':')
}

// valueProblem describes what is wrong with a variable's raw value, or "".
func valueProblem(v string, isKey bool) (problem, fix string) {
	switch {
	case strings.TrimSpace(v) == "":
		return "set but empty", "export it with a value or unset it, so clients fall back to the right variable"
	case strings.ContainsAny(v, "\r\n"):
		return "contains a line break (often from `$(cat keyfile)` or a Windows file)", "re-export it without the line break, e.g. export NAME=\"$(tr -d '\\r\\n' < keyfile)\""
	case v != strings.TrimSpace(v):
		return "has leading or trailing blanks", "re-export it without the surrounding blanks"
	case len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0]:
		return "is wrapped in literal quotes (docker --env-file and systemd keep them)", "remove the quotes where the variable is defined"
	case isKey && hasBearerPrefix(v):
		return "starts with \"Bearer\"; clients add the scheme themselves and send \"Bearer Bearer …\"", "set it to the bare key without the \"Bearer\" prefix"
	}
	return "", ""
}

// checkKeyVariables reports empty, blank-padded, quoted or scheme-prefixed
// key and URL variables, and whether any key was found.
func (d *diagnosis) checkKeyVariables() {
	c := Check{ID: "env.keys", Title: "key and URL variables", Status: StatusPass}
	var problems []string
	names := append(append([]string(nil), keyVars...), "LLMGATE_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL")
	for i, name := range names {
		v, ok := d.env(name)
		if !ok {
			continue
		}
		problem, fix := valueProblem(v, i < len(keyVars))
		if problem == "" {
			continue
		}
		problems = append(problems, name+" "+problem)
		status := StatusFail
		if strings.TrimSpace(v) == "" {
			status = StatusWarn
		}
		// The first failing variable gives the fix; an empty variable only
		// gives it when nothing worse was found.
		if c.Status == StatusPass || (c.Status == StatusWarn && status == StatusFail) {
			c.Status = status
			c.Fix = strings.ToUpper(fix[:1]) + strings.ReplaceAll(fix[1:], "NAME", name) + " (" + name + ")."
		}
	}
	if p, _ := valueProblem(d.opts.APIKey, true); d.opts.APIKey != "" && p != "" {
		problems = append(problems, "--api-key "+p)
		c.Status = StatusFail
		c.Fix = "Pass the bare key to --api-key, without quotes, blanks or a \"Bearer\" prefix."
	}
	switch {
	case len(problems) > 0:
		c.Detail = strings.Join(problems, "; ")
	case d.key == "":
		c.Status = StatusWarn
		c.Detail = "no key found in --api-key, " + strings.Join(keyVars, ", ")
		c.Fix = "Export OPENAI_API_KEY (or pass --api-key) unless the server needs no key."
	default:
		c.Detail = fmt.Sprintf("key %s from %s", Fingerprint(d.key), d.keySrc)
	}
	if c.Status != StatusFail && d.baseSrc != "" {
		c.Detail += "; base URL from " + d.baseSrc
	}
	d.add(c)
}

// Fingerprint shows enough of a key to tell keys apart and never the key:
// the prefix up to its last dash or underscore in the first eight
// characters, and the last four characters ("sk-lg-…abcd").
func Fingerprint(k string) string {
	k = cleanKey(k)
	n := len(k)
	switch {
	case n == 0:
		return ""
	case n < 9:
		return fmt.Sprintf("(%d-character key)", n)
	case n < 16:
		return "…" + k[n-2:]
	}
	prefix := k[:3]
	if i := strings.LastIndexAny(k[:8], "-_"); i > 0 {
		prefix = k[:i+1]
	}
	return prefix + "…" + k[n-4:]
}

// checkConsistency compares the endpoint and key variables of the OpenAI,
// Anthropic and llmgate families: Claude Code reads the ANTHROPIC_ ones,
// most other clients the OPENAI_ ones, and they drift apart.
func (d *diagnosis) checkConsistency() {
	c := Check{ID: "env.consistency", Title: "OpenAI vs Anthropic variables", Status: StatusPass}
	type val struct{ name, v string }
	var bases, keys []val
	for _, bv := range baseURLVars {
		v, ok := d.lookup(bv.name)
		if !ok {
			continue
		}
		v = trimSlash(cleanValue(v))
		if bv.anthropic {
			if strings.HasSuffix(v, "/v1") {
				c.Status = StatusFail
				c.Detail = "ANTHROPIC_BASE_URL ends in /v1, so Claude Code requests /v1/v1/messages"
				c.Fix = "Set ANTHROPIC_BASE_URL=" + strings.TrimSuffix(v, "/v1") + "; Claude Code appends /v1/messages itself."
				v = strings.TrimSuffix(v, "/v1")
			}
			v += "/v1"
		}
		bases = append(bases, val{bv.name, v})
	}
	for _, k := range keyVars {
		if v, ok := d.lookup(k); ok {
			keys = append(keys, val{k, cleanKey(v)})
		}
	}
	var notes []string
	for _, b := range bases[min(1, len(bases)):] {
		if !sameURL(b.v, bases[0].v) {
			notes = append(notes, fmt.Sprintf("%s points at %s but %s at %s", bases[0].name, bases[0].v, b.name, b.v))
		}
	}
	for _, k := range keys[min(1, len(keys)):] {
		if k.v != keys[0].v {
			notes = append(notes, fmt.Sprintf("%s is %s but %s is %s", keys[0].name, Fingerprint(keys[0].v), k.name, Fingerprint(k.v)))
		}
	}
	switch {
	case len(notes) > 0:
		c.Detail = joinNonEmpty(c.Detail, strings.Join(notes, "; "))
		if c.Status == StatusPass {
			c.Status = StatusWarn
			c.Fix = "Point every family at the same endpoint and key (eval \"$(llmgate connect env)\" sets them together), or expect clients to disagree."
		}
	case c.Status == StatusPass && len(bases)+len(keys) > 2:
		c.Detail = "the endpoint and key variables agree"
	case c.Status == StatusPass:
		c.Status, c.Detail = StatusSkip, "fewer than two families set; nothing to compare"
	}
	d.add(c)
}

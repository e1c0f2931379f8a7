package doctor

import (
	"reflect"
	"strings"
	"testing"
)

func TestFingerprint_NeverShowsTheKey(t *testing.T) {
	for in, want := range map[string]string{
		"sk-lg-0123456789abcdef":            "sk-lg-…cdef",
		"sk-ant-api03-AAAABBBBCCCCDDDD1234": "sk-ant-…1234",
		"abcdefghijklmnopqrst":              "abc…qrst",
		"short":                             "(5-character key)",
		"0123456789ab":                      "…ab",
		`  "sk-lg-0123456789abcdef"  `:      "sk-lg-…cdef",
		"":                                  "",
	} {
		if got := Fingerprint(in); got != want {
			t.Errorf("Fingerprint(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNearest_SuggestsTyposAndSubstringsOnly(t *testing.T) {
	list := []string{"qwen2.5-7b-instruct", "llama-3.1-8b-instruct", "meta-llama/Llama-3.1-70B-Instruct", "gpt-4o"}
	cases := map[string][]string{
		"qwen2.5-7b-instrct":  {"qwen2.5-7b-instruct"},
		"Qwen2.5-7B-Instruct": {"qwen2.5-7b-instruct"},
		"llama-3.1-8b":        {"llama-3.1-8b-instruct"},
		"gpt-4o-mini":         {"gpt-4o"},
		"claude-sonnet-4":     {},
	}
	for in, want := range cases {
		got := Nearest(in, list, 1)
		if len(want) == 0 && len(got) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Nearest(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestURLShape_FindsEachMistake(t *testing.T) {
	cases := []struct {
		url    string
		status Status
		detail string
		fix    string
	}{
		{"http://127.0.0.1:4000/v1", StatusPass, "http://127.0.0.1:4000/v1", ""},
		{"http://127.0.0.1:4000/v1/", StatusWarn, "trailing slash", "Drop the trailing slash: http://127.0.0.1:4000/v1."},
		{"http://127.0.0.1:4000", StatusWarn, "has no /v1", "http://127.0.0.1:4000/v1"},
		{"http://127.0.0.1:4000/v1/v1", StatusFail, "repeats /v1", "use http://127.0.0.1:4000/v1."},
		{"http://127.0.0.1:4000/v1/chat/completions", StatusFail, "includes an endpoint", "use http://127.0.0.1:4000/v1."},
		{"https://gw.example.com/v1?utm_source=newsletter", StatusFail, "tracking parameters", "Remove the query string"},
		{"https://gw.example.com/openai/v1?api-version=2024-10-21", StatusWarn, "dropped or mangled", "default-query"},
		{"http://gw.example.com/v1", StatusWarn, "sends the key unencrypted", "https://"},
		{"http://gpu-box:8000/v1", StatusPass, "http://gpu-box:8000/v1", ""},
		{"http://192.168.1.20:8000/v1", StatusPass, "", ""},
		{"127.0.0.1:4000/v1", StatusFail, "cannot use", DefaultBaseURL},
		{`"http://127.0.0.1:4000/v1"`, StatusFail, "surrounding blanks or quotes", "Remove the blanks or quotes"},
	}
	for _, c := range cases {
		d := newDiagnosis(Options{BaseURL: c.url, LookupEnv: envMap(), HomeDir: "/nonexistent", WorkDir: "/nonexistent"})
		d.checkURLShape()
		got := d.checks[0]
		if got.Status != c.status || !strings.Contains(got.Detail, c.detail) || !strings.Contains(got.Fix, c.fix) {
			t.Errorf("%s: %s %q fix %q; want %s with %q / %q", c.url, got.Status, got.Detail, got.Fix, c.status, c.detail, c.fix)
		}
	}
}

func TestURLCandidates_OfferLikelyFixes(t *testing.T) {
	for in, want := range map[string][]string{
		"http://h:1/v1/v1":               {"http://h:1/v1"},
		"http://h:1":                     {"http://h:1/v1"},
		"http://h:1/v1/chat/completions": {"http://h:1/v1"},
		"http://h:1/api":                 {"http://h:1/api/v1", "http://h:1/v1"},
	} {
		if got := urlCandidates(in); !reflect.DeepEqual(got, want) {
			t.Errorf("urlCandidates(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestCleanKey_StripsWhatClientsGetWrong(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer: sk-1":   "sk-1",
		"Bearer sk-1":    "sk-1",
		"bearer:sk-1":    "sk-1",
		"'sk-1'":         "sk-1",
		"\"sk-1\"\n":     "sk-1",
		" sk-1 ":         "sk-1",
		"sk-bearer-xyz1": "sk-bearer-xyz1",
	} {
		if got := cleanKey(in); got != want {
			t.Errorf("cleanKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeyVariables_LineBreakIsAFailureAndStillSendable(t *testing.T) {
	d := newDiagnosis(Options{LookupEnv: envMap("OPENAI_API_KEY", "sk-lg-0123456789abcdef\n"), HomeDir: "/nonexistent", WorkDir: "/nonexistent"})
	d.checkKeyVariables()
	c := d.checks[0]
	if c.Status != StatusFail || !strings.Contains(c.Detail, "line break") || !strings.Contains(c.Fix, "OPENAI_API_KEY") {
		t.Errorf("got %s %q fix %q", c.Status, c.Detail, c.Fix)
	}
	if d.keyForRequests != "sk-lg-0123456789abcdef" {
		t.Errorf("key for requests %q", d.keyForRequests)
	}
}

func TestConsistency_FindsDriftBetweenFamilies(t *testing.T) {
	d := newDiagnosis(Options{HomeDir: "/nonexistent", WorkDir: "/nonexistent", LookupEnv: envMap(
		"OPENAI_BASE_URL", "http://localhost:4000/v1/", "ANTHROPIC_BASE_URL", "http://127.0.0.1:8000",
		"OPENAI_API_KEY", "sk-lg-aaaaaaaaaaaa1111", "ANTHROPIC_AUTH_TOKEN", "sk-lg-bbbbbbbbbbbb2222")})
	d.checkConsistency()
	c := d.checks[0]
	if c.Status != StatusWarn || !strings.Contains(c.Detail, "OPENAI_BASE_URL points at http://localhost:4000/v1 but ANTHROPIC_BASE_URL at http://127.0.0.1:8000/v1") ||
		!strings.Contains(c.Detail, "OPENAI_API_KEY is sk-lg-…1111 but ANTHROPIC_AUTH_TOKEN is sk-lg-…2222") || !strings.Contains(c.Fix, "llmgate connect env") {
		t.Errorf("got %s %q fix %q", c.Status, c.Detail, c.Fix)
	}

	d = newDiagnosis(Options{HomeDir: "/nonexistent", WorkDir: "/nonexistent", LookupEnv: envMap(
		"OPENAI_BASE_URL", "http://localhost:4000/v1", "ANTHROPIC_BASE_URL", "http://127.0.0.1:4000/v1")})
	d.checkConsistency()
	c = d.checks[0]
	if c.Status != StatusFail || !strings.Contains(c.Fix, "ANTHROPIC_BASE_URL=http://127.0.0.1:4000;") {
		t.Errorf("got %s %q fix %q", c.Status, c.Detail, c.Fix)
	}

	d = newDiagnosis(Options{HomeDir: "/nonexistent", WorkDir: "/nonexistent", LookupEnv: envMap(
		"OPENAI_BASE_URL", "http://localhost:4000/v1", "ANTHROPIC_BASE_URL", "http://127.0.0.1:4000",
		"OPENAI_API_KEY", "sk-lg-aaaaaaaaaaaa1111", "ANTHROPIC_AUTH_TOKEN", "sk-lg-aaaaaaaaaaaa1111")})
	d.checkConsistency()
	if c = d.checks[0]; c.Status != StatusPass {
		t.Errorf("agreeing variables: %s %q", c.Status, c.Detail)
	}
}

// TestReport_SummaryCountsAddUpToTheChecks: the summary line and the exit
// message count the same checks (skipped ones included), so they agree.
func TestReport_SummaryCountsAddUpToTheChecks(t *testing.T) {
	r := Report{Checks: []Check{{Status: StatusPass}, {Status: StatusPass}, {Status: StatusWarn}, {Status: StatusFail}, {Status: StatusSkip}, {Status: StatusSkip}}}
	r.tally()
	if r.Passed+r.Warnings+r.Failed+r.Skipped != len(r.Checks) || r.Skipped != 2 || r.OK {
		t.Errorf("tally %+v", r)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "6 checks: 2 passed, 1 warnings, 1 failed, 2 skipped"; !strings.Contains(b.String(), want) || r.Summary() != want {
		t.Errorf("summary %q, text:\n%s", r.Summary(), b.String())
	}
}

// Package doctor diagnoses an OpenAI- or Anthropic-compatible endpoint the way
// a client would reach it: environment variables, URL shape, proxy, DNS, TCP,
// TLS, authentication, model list, chat, streaming, the Anthropic Messages API
// and the client configuration files that point at the endpoint. Every check
// ends in a status and, when it does not pass, one sentence that says what to
// change.
package doctor

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Status is the outcome of one check.
type Status string

// Check outcomes. Only StatusFail makes a report fail; warnings describe
// something that works but will bite some clients.
const (
	StatusPass Status = "pass"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
	StatusSkip Status = "skip"
)

// Symbol returns the one-character mark used in the text report.
func (s Status) Symbol() string {
	switch s {
	case StatusPass:
		return "✓"
	case StatusWarn:
		return "!"
	case StatusFail:
		return "✗"
	default:
		return "-"
	}
}

// Check is one line of the checklist.
type Check struct {
	// ID is a stable dotted name such as "net.tcp" for scripts and tests.
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status Status `json:"status"`
	// Detail says what was observed.
	Detail string `json:"detail,omitempty"`
	// Fix is one sentence saying what to change; empty when the check passed.
	Fix string `json:"fix,omitempty"`
	// DurationMS is the time the check's network call took, when it made one.
	DurationMS float64 `json:"duration_ms,omitempty"`
}

// Metrics are the figures measured by the streaming request.
type Metrics struct {
	TTFTMS       float64 `json:"ttft_ms,omitempty"`
	TotalMS      float64 `json:"total_ms,omitempty"`
	OutputTokens int     `json:"output_tokens,omitempty"`
	// TokensPerSecond is the decode rate after the first token:
	// (output_tokens - 1) / (total - ttft).
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
	// TokensEstimated is true when the server reported no usage and tokens
	// were counted as content chunks.
	TokensEstimated bool `json:"tokens_estimated,omitempty"`
	// Timing is how an llmgate gateway said the time to the first event
	// divided (its Server-Timing header); nil when the endpoint said
	// nothing.
	Timing *Timing `json:"server_timing,omitempty"`
}

// Timing is an llmgate gateway's account of a request's time before its
// answer began, in milliseconds: its own work, waiting for the backend,
// and waiting in the gateway (a fair queue, an engine start, a retry).
type Timing struct {
	GatewayMS float64 `json:"gateway_ms"`
	BackendMS float64 `json:"backend_ms"`
	WaitMS    float64 `json:"wait_ms,omitempty"`
}

// Report is the result of Run.
type Report struct {
	BaseURL string `json:"base_url"`
	// BaseURLSource names where the base URL came from ("--base-url",
	// "OPENAI_BASE_URL", "default").
	BaseURLSource string `json:"base_url_source"`
	// EffectiveBaseURL differs from BaseURL when the doctor found a corrected
	// URL that answers and ran the later checks against it.
	EffectiveBaseURL string `json:"effective_base_url,omitempty"`
	Model            string `json:"model,omitempty"`
	ModelSource      string `json:"model_source,omitempty"`
	// KeyFingerprint shows the key's prefix and last four characters only.
	KeyFingerprint string   `json:"key_fingerprint,omitempty"`
	KeySource      string   `json:"key_source,omitempty"`
	Checks         []Check  `json:"checks"`
	Metrics        *Metrics `json:"metrics,omitempty"`
	Passed         int      `json:"passed"`
	Warnings       int      `json:"warnings"`
	Failed         int      `json:"failed"`
	Skipped        int      `json:"skipped"`
	OK             bool     `json:"ok"`
}

// Summary counts the checks by outcome; the counts add up to the checks.
func (r *Report) Summary() string {
	return fmt.Sprintf("%d checks: %d passed, %d warnings, %d failed, %d skipped", len(r.Checks), r.Passed, r.Warnings, r.Failed, r.Skipped)
}

// Check returns the check with the given ID, or nil.
func (r *Report) Check(id string) *Check {
	for i := range r.Checks {
		if r.Checks[i].ID == id {
			return &r.Checks[i]
		}
	}
	return nil
}

// Options configures Run. Zero values are filled from the environment and
// defaults, so doctor.Run(ctx, doctor.Options{}) diagnoses whatever the
// shell's OPENAI_BASE_URL / OPENAI_API_KEY point at.
type Options struct {
	// BaseURL is the OpenAI-style base URL (normally ending in /v1). Empty
	// means LLMGATE_BASE_URL, OPENAI_BASE_URL, OPENAI_API_BASE,
	// ANTHROPIC_BASE_URL (+ /v1), then DefaultBaseURL.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer". Empty means the key variable
	// paired with the base URL's variable, then any other key variable.
	APIKey string
	// Model to test. Empty means LLMGATE_MODEL, OPENAI_MODEL,
	// ANTHROPIC_MODEL, then the first model the server lists.
	Model string
	// RequireAnthropic makes a missing Anthropic Messages endpoint a failure
	// instead of a warning.
	RequireAnthropic bool
	// SkipClients disables reading client configuration files.
	SkipClients bool
	// Timeout bounds each generation request; connection steps use the
	// smaller of Timeout and 5 s. Zero means 20 s.
	Timeout time.Duration

	// LookupEnv reads environment variables; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// HomeDir is where client config files are looked for; empty means the
	// user's home directory.
	HomeDir string
	// WorkDir is where a project .claude/settings.json is looked for; empty
	// means the current directory.
	WorkDir string
	// LookupHost resolves host names; nil means net.DefaultResolver. Tests
	// map fake names to 127.0.0.1 with it.
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// TLSConfig is cloned for TLS connections; nil means system roots.
	TLSConfig *tls.Config
}

// DefaultBaseURL is the gateway's default listen address with the OpenAI path.
const DefaultBaseURL = "http://127.0.0.1:4000/v1"

const defaultTimeout = 20 * time.Second

// Run executes every check in order and returns the report. It never
// panics on a misbehaving server and honours ctx for cancellation.
func Run(ctx context.Context, opts Options) Report {
	d := newDiagnosis(opts)
	d.run(ctx)
	return d.report()
}

// diagnosis carries the state shared by the checks of one run.
type diagnosis struct {
	opts   Options
	env    func(string) (string, bool)
	checks []Check

	baseURL, baseSrc    string
	key, keySrc, keyVar string
	model, modelSrc     string

	// api is the base URL the HTTP checks use: the given one with a trailing
	// slash removed, or a corrected one found by probing.
	api string
	// direct is set when the proxy failed and requests bypass it.
	direct bool
	// blocked names the check whose failure makes later network checks
	// pointless; they are reported as skipped.
	blocked string
	// authOK records that the key (or no key) is accepted.
	authOK bool
	// keyForRequests is the key sent: the given one, or a cleaned one once
	// the auth check proved the server accepts only that.
	keyForRequests string
	models         []string
	metrics        *Metrics

	client *http.Client
	dialer *net.Dialer
	// resent counts requests sent again on a fresh connection (see send).
	resent atomic.Int32
}

func newDiagnosis(opts Options) *diagnosis {
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.HomeDir == "" {
		opts.HomeDir, _ = os.UserHomeDir()
	}
	if opts.WorkDir == "" {
		opts.WorkDir, _ = os.Getwd()
	}
	d := &diagnosis{opts: opts, env: opts.LookupEnv}
	d.resolveInputs()
	d.dialer = &net.Dialer{Timeout: d.connectTimeout(), KeepAlive: 30 * time.Second}
	d.client = &http.Client{
		Transport: d.transport(),
		// Redirects are reported, not followed: clients turn a POST into a
		// GET on 301/302, so a redirecting base URL breaks chat requests.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return d
}

// connectTimeout bounds DNS, TCP and TLS steps.
func (d *diagnosis) connectTimeout() time.Duration {
	return min(d.opts.Timeout, 5*time.Second)
}

func (d *diagnosis) add(c Check) *Check {
	d.checks = append(d.checks, c)
	return &d.checks[len(d.checks)-1]
}

// find returns the check recorded with id, or nil.
func (d *diagnosis) find(id string) *Check {
	for i := range d.checks {
		if d.checks[i].ID == id {
			return &d.checks[i]
		}
	}
	return nil
}

// skip records a check that could not run because an earlier one failed.
func (d *diagnosis) skip(id, title string) {
	d.add(Check{ID: id, Title: title, Status: StatusSkip, Detail: "skipped: " + d.blocked + " failed"})
}

func (d *diagnosis) run(ctx context.Context) {
	d.checkKeyVariables()
	d.checkConsistency()
	d.checkURLShape()
	if d.blocked == "" {
		d.checkProxy(ctx)
	} else {
		d.skip("env.proxy", "proxy")
	}
	d.checkNetwork(ctx)
	d.checkAuthAndModels(ctx)
	d.checkChat(ctx)
	d.checkTools(ctx)
	d.checkStream(ctx)
	d.checkAnthropic(ctx)
	d.checkResponses(ctx)
	d.checkPerf()
	d.checkKeepAlive()
	if !d.opts.SkipClients {
		d.checkClients()
	}
}

func (d *diagnosis) report() Report {
	r := Report{
		BaseURL:        d.baseURL,
		BaseURLSource:  d.baseSrc,
		Model:          d.model,
		ModelSource:    d.modelSrc,
		KeyFingerprint: Fingerprint(d.key),
		KeySource:      d.keySrc,
		Checks:         d.checks,
		Metrics:        d.metrics,
	}
	// Servers sometimes echo the key in error messages; the report quotes
	// those, so every detail is scrubbed of the key before it leaves.
	for i := range r.Checks {
		for _, k := range []string{d.key, cleanKey(d.key), d.keyForRequests} {
			if len(k) >= 8 {
				r.Checks[i].Detail = strings.ReplaceAll(r.Checks[i].Detail, k, Fingerprint(k))
				r.Checks[i].Fix = strings.ReplaceAll(r.Checks[i].Fix, k, Fingerprint(k))
			}
		}
	}
	if d.api != "" && d.api != trimSlash(d.baseURL) {
		r.EffectiveBaseURL = d.api
	}
	r.tally()
	return r
}

// tally counts the checks by outcome.
func (r *Report) tally() {
	r.Passed, r.Warnings, r.Failed, r.Skipped = 0, 0, 0, 0
	for _, c := range r.Checks {
		switch c.Status {
		case StatusPass:
			r.Passed++
		case StatusWarn:
			r.Warnings++
		case StatusFail:
			r.Failed++
		default:
			r.Skipped++
		}
	}
	r.OK = r.Failed == 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

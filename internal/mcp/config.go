package mcpserver

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by Config.FromEnv. MCP clients such as Cline
// start the server with these in the "env" block of their settings file.
const (
	EnvBaseURL = "LLMGATE_BASE_URL"
	EnvAPIKey  = "LLMGATE_API_KEY"
	EnvModel   = "LLMGATE_MODEL"
	EnvTimeout = "LLMGATE_TIMEOUT"
)

// Defaults used when neither a flag nor the environment sets a value.
const (
	DefaultBaseURL = "http://127.0.0.1:4000"
	DefaultTimeout = 120 * time.Second
)

// Config says which OpenAI-compatible endpoint the tools call and how.
type Config struct {
	// BaseURL is the API root as the user wrote it; Normalize turns it into
	// the form the client uses (scheme, host and the /v1 prefix).
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>" when not empty.
	APIKey string
	// Model is the default model for chat when the caller names none.
	Model string
	// Timeout bounds one upstream request from send to the last byte.
	Timeout time.Duration
}

// FromEnv fills the fields that are still empty from the environment, read
// through getenv (os.Getenv in production), then applies the defaults.
// Flags set before calling FromEnv therefore win over the environment.
func (c *Config) FromEnv(getenv func(string) string) error {
	if c.BaseURL == "" {
		c.BaseURL = strings.TrimSpace(getenv(EnvBaseURL))
	}
	if c.APIKey == "" {
		c.APIKey = strings.TrimSpace(getenv(EnvAPIKey))
	}
	if c.Model == "" {
		c.Model = strings.TrimSpace(getenv(EnvModel))
	}
	if c.Timeout == 0 {
		if v := strings.TrimSpace(getenv(EnvTimeout)); v != "" {
			d, err := parseTimeout(v)
			if err != nil {
				return fmt.Errorf("%s=%q: %w", EnvTimeout, v, err)
			}
			c.Timeout = d
		}
	}
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return nil
}

// parseTimeout accepts a Go duration ("90s", "2m") or a bare number of
// seconds ("90"), because people write both in JSON settings files.
func parseTimeout(v string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 {
			return 0, errors.New("the time-out must be positive")
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New(`write the time-out as seconds ("120") or a duration ("2m")`)
	}
	if d <= 0 {
		return 0, errors.New("the time-out must be positive")
	}
	return d, nil
}

// NormalizeBaseURL turns what people paste as an OpenAI base URL into the
// API root that paths such as /models are appended to. It accepts the host
// with or without /v1 ("http://h:4000", "http://h:4000/v1/") and a missing
// scheme ("127.0.0.1:4000"). A URL that already has a path other than "/"
// is kept as written, because some providers serve the API under another
// root (".../openai/v1", ".../v1beta/openai").
func NormalizeBaseURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", errors.New("the base URL is empty: set " + EnvBaseURL + " to the endpoint, e.g. http://127.0.0.1:4000")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("the base URL %q is not a URL: set %s like http://127.0.0.1:4000", raw, EnvBaseURL)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("the base URL %q must start with http:// or https://", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("the base URL %q has no host: set %s like http://127.0.0.1:4000", raw, EnvBaseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	path := strings.TrimRight(u.Path, "/")
	// People paste the full endpoint they see in docs; cut it back to the root.
	for _, suffix := range []string{"/chat/completions", "/completions", "/models"} {
		path = strings.TrimSuffix(path, suffix)
	}
	if path == "" {
		path = "/v1"
	}
	u.Path, u.RawPath = path, ""
	return u.String(), nil
}

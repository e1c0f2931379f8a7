package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Features switch the gateway's optional parts on and off. Each has an
// environment variable that overrides the file (see ApplyEnv), for
// containers and one-off runs.
type Features struct {
	// AccessLog writes one log line per request (default on;
	// LLMGATE_ACCESS_LOG).
	AccessLog *bool `yaml:"access_log"`
	// Console serves the web console at /ui (default on; LLMGATE_CONSOLE).
	Console *bool `yaml:"console"`
	// MetricsKey, when set, is the bearer token /metrics requires
	// (LLMGATE_METRICS_KEY); empty leaves /metrics open, as most exporters
	// are, which is why the gateway listens on loopback by default.
	MetricsKey string `yaml:"metrics_key"`
	// BodyReadTimeout bounds the time a client takes to send a request
	// body (default DefaultBodyReadTimeout): a client trickling a large
	// body cannot hold the request open.
	BodyReadTimeout Duration `yaml:"body_read_timeout"`
	// MaxBodyReadsPerKey caps the request bodies one key may be sending at
	// once (default DefaultMaxBodyReadsPerKey; 0 = no cap); beyond it a
	// request is a 429 before its body is read.
	MaxBodyReadsPerKey *int `yaml:"max_body_reads_per_key"`
	// MaxLargeBodyMemory caps the bytes of request bodies of 1 MiB or more
	// in flight at once, from when they are read (default
	// DefaultMaxLargeBodyMemory; 0 = no cap): such a body, decoded or
	// translated, holds 10–40 times its size until its request ends.
	// Beyond it a large body waits up to body_read_timeout, then gets a
	// 503.
	MaxLargeBodyMemory *int64 `yaml:"max_large_body_memory"`
	// MetricsKeyLabels labels per-request metrics with the key id (default
	// on; LLMGATE_METRICS_KEY_LABELS). Off, /metrics shows no key ids and
	// counts requests, tokens and cost across keys only.
	MetricsKeyLabels *bool `yaml:"metrics_key_labels"`
}

// Defaults of the body-reading limits.
const (
	DefaultBodyReadTimeout    = 60 * time.Second
	DefaultMaxBodyReadsPerKey = 16
	DefaultMaxLargeBodyMemory = 64 << 20
)

// LargeBodyMemory returns the cap on the bytes of large request bodies
// in flight (0: none).
func (f Features) LargeBodyMemory() int64 {
	if f.MaxLargeBodyMemory == nil {
		return DefaultMaxLargeBodyMemory
	}
	return max(*f.MaxLargeBodyMemory, 0)
}

// BodyReadLimit returns the body read time-out and the per-key cap on
// bodies being read at once (0: none).
func (f Features) BodyReadLimit() (time.Duration, int) {
	t := time.Duration(f.BodyReadTimeout)
	if t <= 0 {
		t = DefaultBodyReadTimeout
	}
	n := DefaultMaxBodyReadsPerKey
	if f.MaxBodyReadsPerKey != nil {
		n = max(*f.MaxBodyReadsPerKey, 0)
	}
	return t, n
}

// AccessLogOn reports whether the access log is on.
func (f Features) AccessLogOn() bool { return f.AccessLog == nil || *f.AccessLog }

// ConsoleOn reports whether the web console is served.
func (f Features) ConsoleOn() bool { return f.Console == nil || *f.Console }

// MetricsKeyLabelsOn reports whether metrics carry key ids.
func (f Features) MetricsKeyLabelsOn() bool { return f.MetricsKeyLabels == nil || *f.MetricsKeyLabels }

// ApplyEnv applies the environment's overrides of the feature switches:
// LLMGATE_ACCESS_LOG, LLMGATE_CONSOLE and LLMGATE_METRICS_KEY_LABELS
// (on/off, true/false, 1/0) and LLMGATE_METRICS_KEY. An unreadable switch is an error naming it.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	for _, sw := range []struct {
		env string
		dst **bool
	}{{"LLMGATE_ACCESS_LOG", &c.AccessLog}, {"LLMGATE_CONSOLE", &c.Console}, {"LLMGATE_METRICS_KEY_LABELS", &c.MetricsKeyLabels}} {
		v, ok := lookup(sw.env)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		on, err := parseSwitch(v)
		if err != nil {
			return fmt.Errorf("environment variable %s=%q: %w", sw.env, v, err)
		}
		*sw.dst = &on
	}
	if v, ok := lookup("LLMGATE_METRICS_KEY"); ok && strings.TrimSpace(v) != "" {
		c.MetricsKey = strings.TrimSpace(v)
	}
	return nil
}

func parseSwitch(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "yes", "enabled":
		return true, nil
	case "off", "no", "disabled":
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("use on or off")
	}
	return b, nil
}

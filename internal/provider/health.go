package provider

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"llmgate/internal/dialect"
)

// HealthCheck returns the active check settings: whether checks are on, the
// URL probed, the interval and the per-probe time-out.
func (b *Backend) HealthCheck() (on bool, probeURL string, interval, timeout time.Duration) {
	h := b.health
	if !h.On() {
		return false, "", 0, 0
	}
	return true, b.healthURL(), time.Duration(h.Interval), time.Duration(h.Timeout)
}

// HealthURL is the URL active checks and probes use: the configured
// path on the backend's origin, else the model list, which every
// compatible server has (under /v1 for the Anthropic dialect, whose base
// URL has none).
func (b *Backend) HealthURL() string { return b.healthURL() }

func (b *Backend) healthURL() string {
	if b.health == nil || b.health.Path == "" {
		if b.Dialect == dialect.Anthropic {
			return b.BaseURL + "/v1/models"
		}
		return b.BaseURL + "/models"
	}
	u, err := url.Parse(b.BaseURL)
	if err != nil {
		return b.BaseURL + b.health.Path
	}
	u.Path, u.RawPath = b.health.Path, ""
	return u.String()
}

// Probe sends one health check request with the backend's credentials. A
// 2xx answer is healthy; anything else is an error saying what was seen.
func (b *Backend) Probe(ctx context.Context, probeURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeURL, nil)
	if err != nil {
		return err
	}
	if b.apiKey != "" {
		if b.Dialect == dialect.Anthropic {
			req.Header.Set("X-Api-Key", b.apiKey)
		} else {
			req.Header.Set("Authorization", "Bearer "+b.apiKey)
		}
	}
	for k, v := range b.headers {
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return b.Classify(ctx, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("health check %s answered %d", probeURL, resp.StatusCode)
	}
	return nil
}

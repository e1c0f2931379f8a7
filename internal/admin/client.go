package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"llmgate/internal/usage"
)

// Client calls the admin API of a running gateway.
type Client struct {
	// BaseURL is the gateway's address, with or without /v1.
	BaseURL string
	// MasterKey authenticates every call.
	MasterKey string
	HTTP      *http.Client
	// local marks a client bound in process to a handler (NewLocalClient):
	// its errors are the handler's messages alone, since there is no
	// server, URL or HTTP status to speak of.
	local bool
}

// NewLocalClient returns a client that serves its calls with h in
// process, as the CLI does on a database file with no gateway running.
func NewLocalClient(h http.Handler) *Client {
	return &Client{BaseURL: "http://local", HTTP: &http.Client{Transport: handlerTransport{h}}, local: true}
}

// handlerTransport serves requests with a handler in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// NewClient returns a client for the gateway at base.
func NewClient(base, masterKey string) *Client {
	base = strings.TrimRight(base, "/")
	base = strings.TrimSuffix(base, "/v1")
	return &Client{BaseURL: base, MasterKey: masterKey, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.MasterKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is the gateway running? check --url)", c.BaseURL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var env struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &env) == nil && env.Error.Message != "" {
			if c.local {
				return errors.New(env.Error.Message)
			}
			return fmt.Errorf("admin API: %s (HTTP %d)", env.Error.Message, resp.StatusCode)
		}
		return fmt.Errorf("admin API: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if w, ok := out.(io.Writer); ok {
		_, err = w.Write(data)
		return err
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// ListKeys lists keys.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out []Key
	return out, c.do(ctx, http.MethodGet, "/admin/keys", nil, &out)
}

// CreateKey creates a key; the secret is in the answer only.
func (c *Client) CreateKey(ctx context.Context, spec KeySpec) (*Issued, error) {
	var out Issued
	return &out, c.do(ctx, http.MethodPost, "/admin/keys", spec, &out)
}

// GetKey shows one key with its spend in the current budget period.
func (c *Client) GetKey(ctx context.Context, id string) (*Key, error) {
	var out Key
	return &out, c.do(ctx, http.MethodGet, "/admin/keys/"+url.PathEscape(id), nil, &out)
}

// UpdateKey changes the fields set in spec.
func (c *Client) UpdateKey(ctx context.Context, id string, spec KeySpec) (*Key, error) {
	var out Key
	return &out, c.do(ctx, http.MethodPatch, "/admin/keys/"+url.PathEscape(id), spec, &out)
}

// RevokeKey revokes a key.
func (c *Client) RevokeKey(ctx context.Context, id string) (*Key, error) {
	var out Key
	return &out, c.do(ctx, http.MethodPost, "/admin/keys/"+url.PathEscape(id)+"/revoke", nil, &out)
}

// RotateKey gives a key a new secret.
func (c *Client) RotateKey(ctx context.Context, id string) (*Issued, error) {
	var out Issued
	return &out, c.do(ctx, http.MethodPost, "/admin/keys/"+url.PathEscape(id)+"/rotate", nil, &out)
}

// UsageQuery selects a usage summary.
type UsageQuery struct {
	Since, Until string // durations back from now (24h, 7d) or RFC 3339
	By           []string
	Key, Model   string
}

func (q UsageQuery) values(format string) string {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("since", q.Since)
	set("until", q.Until)
	set("by", strings.Join(q.By, ","))
	set("key", q.Key)
	set("model", q.Model)
	set("format", format)
	return v.Encode()
}

// Usage returns summary rows.
func (c *Client) Usage(ctx context.Context, q UsageQuery) ([]usage.SummaryRow, error) {
	var out []usage.SummaryRow
	return out, c.do(ctx, http.MethodGet, "/admin/usage?"+q.values("json"), nil, &out)
}

// UsageCSV writes the summary as CSV to w.
func (c *Client) UsageCSV(ctx context.Context, q UsageQuery, w io.Writer) error {
	return c.do(ctx, http.MethodGet, "/admin/usage?"+q.values("csv"), nil, w)
}

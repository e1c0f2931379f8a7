package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// RequestOptions are the sampling and transport settings every request of
// a run shares.
type RequestOptions struct {
	// Temperature is sent as is; 0 (the default) makes runs comparable.
	Temperature float64
	// IgnoreEOS asks vLLM-compatible servers to generate exactly max_tokens.
	// Cloud APIs reject the field, so it is off unless asked for.
	IgnoreEOS bool
	// ContinuousUsage asks vLLM for usage in every chunk
	// (stream_options.continuous_usage_stats), which makes the per-token
	// inter-token latency exact instead of estimated.
	ContinuousUsage bool
	// ExtraBody is merged into every request body.
	ExtraBody map[string]any
	// Timeout bounds one request from send to last byte; 0 means 10 minutes.
	Timeout time.Duration
}

// buildBody renders the JSON body for one prompt. Bodies are built before a
// cell starts so that no encoding work sits between the scheduled send time
// and the send.
func buildBody(t *Target, p *Prompt, o *RequestOptions, maxTokens int) ([]byte, error) {
	body := map[string]any{
		"model":       t.Model,
		"stream":      true,
		"temperature": o.Temperature,
	}
	so := map[string]any{"include_usage": true}
	if o.ContinuousUsage {
		so["continuous_usage_stats"] = true
	}
	body["stream_options"] = so
	if t.Endpoint == EndpointCompletions {
		prompt := p.Text
		if prompt == "" && len(p.Messages) > 0 {
			prompt = string(p.Messages)
		}
		body["prompt"] = prompt
		if maxTokens > 0 {
			body["max_tokens"] = maxTokens
		}
	} else {
		if len(p.Messages) > 0 {
			body["messages"] = p.Messages
		} else {
			body["messages"] = []map[string]string{{"role": "user", "content": p.Text}}
		}
		if maxTokens > 0 {
			// max_tokens is what older servers (llama.cpp, Ollama, TGI)
			// read; max_completion_tokens is OpenAI's current name. vLLM
			// and OpenAI accept both.
			body["max_tokens"] = maxTokens
		}
	}
	if o.IgnoreEOS {
		body["ignore_eos"] = true
	}
	for k, v := range o.ExtraBody {
		body[k] = v
	}
	return json.Marshal(body)
}

// newTransport returns an HTTP/1.1 transport whose pool holds exactly conns
// connections per host, so every in-flight request has its own connection
// and none is opened mid-measurement after the warm-up. HTTP/2 is off: one
// multiplexed connection would serialise frames for all streams and hide the
// per-stream timing the benchmark reports. Compression is off because a
// gzip stream is decoded in blocks and would batch chunk arrivals.
func newTransport(conns int) *http.Transport {
	if conns <= 0 {
		conns = 1024
	}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ReadBufferSize:        32 << 10,
		WriteBufferSize:       8 << 10,
		ForceAttemptHTTP2:     false,
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	return tr
}

// ProxyFor reports the proxy the environment (HTTP_PROXY, HTTPS_PROXY,
// NO_PROXY) selects for a URL, or "" for a direct connection. Reports show
// it because a proxy in the path changes every latency figure.
func ProxyFor(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	p, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	if err != nil || p == nil {
		return ""
	}
	p.User = nil
	return p.String()
}

// classifyTransportError names the error kind for a failure before or
// during the response body.
func classifyTransportError(ctx context.Context, err error, inBody bool) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTimeout
	}
	if errors.Is(err, context.Canceled) {
		return ErrCanceled
	}
	if inBody {
		return ErrStreamCut
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return ErrConnect
	}
	return ErrTransport
}

// Error kinds counted per cell. HTTP failures are "http_<status>".
const (
	ErrTimeout     = "timeout"
	ErrCanceled    = "canceled"
	ErrStreamCut   = "stream_cut"
	ErrConnect     = "connect"
	ErrTransport   = "transport"
	ErrErrorEvent  = "error_in_stream"
	ErrNoContent   = "no_content"
	ErrNotStreamed = "not_streamed"
	ErrBadChunk    = "bad_chunk"
)

func httpErrKind(status int) string { return fmt.Sprintf("http_%d", status) }

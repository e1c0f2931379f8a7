package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"llmgate/internal/servertiming"
	"llmgate/internal/sse"
)

// streamMaxTokens is large enough for a decode rate and small enough to
// stay quick on a CPU backend.
const streamMaxTokens = 32

// openStream posts a streaming request and returns the response when it is
// an event stream; otherwise it returns the read result to explain.
func (d *diagnosis) openStream(ctx context.Context, url string, headers map[string]string, body any) (*http.Response, httpResult) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, httpResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "llmgate-doctor")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := d.send(req)
	if err != nil {
		return nil, httpResult{err: err}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if is2xx(resp.StatusCode) && mt == "text/event-stream" {
		return resp, httpResult{status: resp.StatusCode, header: resp.Header}
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return nil, httpResult{status: resp.StatusCode, header: resp.Header, body: rb}
}

// checkStream streams a short completion with include_usage and reports
// three lines: that content streams, that it ends with [DONE], and usage.
func (d *diagnosis) checkStream(ctx context.Context) {
	if d.blocked != "" {
		d.skip("stream", "streaming")
		d.skip("stream.done", "stream ends with [DONE]")
		d.skip("stream.usage", "stream reports usage")
		return
	}
	st := Check{ID: "stream", Title: "streaming"}
	done := Check{ID: "stream.done", Title: "stream ends with [DONE]"}
	usage := Check{ID: "stream.usage", Title: "stream reports usage"}
	finish := func() { d.add(st); d.add(done); d.add(usage) }
	defer finish()
	notRun := func() {
		done.Status, done.Detail = StatusSkip, "skipped: no stream"
		usage.Status, usage.Detail = StatusSkip, "skipped: no stream"
	}
	rctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req := map[string]any{"model": d.model, "max_tokens": streamMaxTokens, "temperature": 0, "stream": true,
		"stream_options": map[string]bool{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": "Count from 1 to 20, separated by spaces."}}}
	start := time.Now()
	resp, r := d.openStream(rctx, d.api+"/chat/completions", d.bearer(d.keyForRequests), req)
	if resp == nil && useMaxCompletionTokens(r, req) {
		start = time.Now()
		resp, r = d.openStream(rctx, d.api+"/chat/completions", d.bearer(d.keyForRequests), req)
	}
	if resp == nil {
		st.Status = StatusFail
		notRun()
		switch {
		case r.err != nil:
			st.Detail, st.Fix = "streaming request failed: "+shortErr(r.err), requestErrFix(r.err, d.opts.Timeout)
		case is2xx(r.status):
			st.Detail = fmt.Sprintf("stream:true answered HTTP %d with Content-Type %q instead of an event stream: %s", r.status, r.header.Get("Content-Type"), quote(string(r.body), 100))
			st.Fix = "The server (or a proxy buffering responses) does not stream; enable streaming, or turn off response buffering in the proxy."
		default:
			st.Detail, st.Fix = d.explainStatus("streaming POST /chat/completions", r)
		}
		return
	}
	defer resp.Body.Close()
	timing := gatewayTiming(resp.Header)
	var (
		rd          = sse.NewReader(resp.Body, 0)
		chunks      int
		ttft, last  time.Duration
		sawDone     bool
		usageTokens = -1
		streamErr   string
		readErr     error
		badChunk    string
	)
	for {
		ev, err := rd.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		if ev.Done() {
			sawDone = true
			break
		}
		if ev.Data == nil {
			continue
		}
		var ck struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Delta struct {
					Content          string          `json:"content"`
					ReasoningContent string          `json:"reasoning_content"`
					Reasoning        string          `json:"reasoning"`
					ToolCalls        json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(ev.Data, &ck); err != nil {
			if badChunk == "" {
				badChunk = quote(string(ev.Data), 80)
			}
			continue
		}
		if len(ck.Error) > 0 && string(ck.Error) != "null" {
			streamErr = errorMessage(ev.Data)
			continue
		}
		now := time.Since(start)
		for _, ch := range ck.Choices {
			dl := ch.Delta
			if dl.Content != "" || dl.ReasoningContent != "" || dl.Reasoning != "" || len(dl.ToolCalls) > 0 {
				// TTFT as vLLM's bench defines it: the first chunk with
				// non-empty choices carrying output, reasoning included.
				if chunks == 0 {
					ttft = now
				}
				chunks++
				last = now
				break
			}
		}
		if ck.Usage != nil {
			usageTokens = ck.Usage.CompletionTokens
		}
	}
	total := time.Since(start)
	st.DurationMS = ms(total)
	switch {
	case streamErr != "":
		st.Status, st.Detail = StatusFail, "the stream carried an error: "+streamErr
		st.Fix = "The server failed mid-stream; check its log for this request."
	case readErr != nil:
		st.Status, st.Detail = StatusFail, "the stream broke after "+plural(chunks, "content chunk")+": "+shortErr(readErr)
		st.Fix = "The connection closed mid-stream; check the server's log (crash, out of memory) and any proxy's read time-out."
		if isTimeout(readErr) {
			st.Fix = requestErrFix(readErr, d.opts.Timeout)
		}
	case chunks == 0:
		st.Status, st.Detail = StatusFail, "the stream carried no content chunks"
		if badChunk != "" {
			st.Detail += "; unparsable data: " + badChunk
		}
		st.Fix = "The server sends events clients cannot read; check it implements OpenAI chat.completion.chunk events."
	default:
		st.Status = StatusPass
		st.Detail = fmt.Sprintf("%d content chunks, first after %.0f ms", chunks, ms(ttft))
	}
	if sawDone {
		done.Status, done.Detail = StatusPass, "data: [DONE] received"
	} else {
		done.Status, done.Detail = StatusFail, "the stream ended without data: [DONE]"
		done.Fix = "End every stream with `data: [DONE]`; many clients treat a stream without it as cut off."
	}
	if usageTokens < 0 && readErr != nil {
		usage.Status, usage.Detail = StatusSkip, "the stream broke before a usage chunk could arrive"
	} else if usageTokens >= 0 {
		usage.Status, usage.Detail = StatusPass, fmt.Sprintf("usage chunk reports %d completion tokens", usageTokens)
	} else {
		usage.Status = StatusWarn
		usage.Detail = "no usage chunk although stream_options.include_usage was true"
		usage.Fix = "Clients that track tokens or cost will see none; use a server version that honours stream_options.include_usage."
	}
	if chunks > 0 {
		m := &Metrics{TTFTMS: ms(ttft), TotalMS: ms(last), OutputTokens: usageTokens, Timing: timing}
		if usageTokens < 0 {
			m.OutputTokens, m.TokensEstimated = chunks, true
		}
		if m.OutputTokens > 1 && last > ttft {
			m.TokensPerSecond = float64(m.OutputTokens-1) / (last - ttft).Seconds()
		}
		d.metrics = m
	}
}

// checkPerf reports the streaming request's figures as one line.
func (d *diagnosis) checkPerf() {
	c := Check{ID: "perf", Title: "TTFT and decode rate"}
	m := d.metrics
	if m == nil {
		c.Status, c.Detail = StatusSkip, "no streamed tokens to measure"
		d.add(c)
		return
	}
	c.Status = StatusPass
	src := "usage"
	if m.TokensEstimated {
		src = "counted as chunks"
	}
	c.Detail = fmt.Sprintf("TTFT %.0f ms; %d tokens (%s)", m.TTFTMS, m.OutputTokens, src)
	if m.TokensPerSecond > 0 {
		c.Detail += fmt.Sprintf(" at %.1f tokens/s after the first", m.TokensPerSecond)
	}
	if t := m.Timing; t != nil {
		c.Detail += fmt.Sprintf("; the gateway says: %s of its own, %s waiting for the backend", fineMS(t.GatewayMS), fineMS(t.BackendMS))
		if t.WaitMS > 0 {
			c.Detail += fmt.Sprintf(", %s waiting in a queue, an engine start or a retry", fineMS(t.WaitMS))
		}
		if t.GatewayMS >= slowGatewayMS {
			c.Status = StatusWarn
			c.Fix = "The gateway itself took long before the answer began: look at its host (CPU starved, swapping) and at the disk under its spool_dir " +
				"(each answer waits for its usage record's journal write); llmgate_overhead_seconds shows whether every request is slow."
		}
	}
	c.Detail += "; one request, not a benchmark (use llmgate bench)"
	d.add(c)
}

// fineMS formats milliseconds down to the microsecond below 1 ms.
func fineMS(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.3f ms", v)
	}
	return fmtMS(v)
}

// slowGatewayMS is the gateway's own time before an answer above which
// doctor warns: a healthy llmgate takes tens of microseconds.
const slowGatewayMS = 100

// gatewayTiming reads an llmgate gateway's Server-Timing (nil when the
// answer has no gateway entry: not an llmgate, or an older one).
func gatewayTiming(h http.Header) *Timing {
	g, ok := servertiming.Get(h, "gateway")
	if !ok {
		return nil
	}
	b, _ := servertiming.Get(h, "backend")
	w, _ := servertiming.Get(h, "wait")
	return &Timing{GatewayMS: ms(g), BackendMS: ms(b), WaitMS: ms(w)}
}

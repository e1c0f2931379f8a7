package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// EngineStart is a wait for an engine to start that bench saw and kept out
// of the latency figures.
type EngineStart struct {
	Target string `json:"target"`
	// Seconds is how long the wait lasted as bench saw it: from its first
	// look to the engine's readiness (Source "health": the server's GET
	// /health answered 503 until then, as llama.cpp's does while it loads
	// a model), or from the request's send to its first data
	// (Source "gateway": the gateway said "waiting for engine" meanwhile).
	// The engine may have started before bench looked; the time is a
	// lower bound for "health" and includes one prompt for "gateway".
	Seconds float64 `json:"seconds"`
	Source  string  `json:"source"`
	// When says where it happened: "before the first cell", or the cell
	// (and run) whose requests waited; Requests counts those requests.
	When     string `json:"when"`
	Requests int    `json:"requests,omitempty"`
}

// Sources of an EngineStart.
const (
	EngineStartHealth  = "health"
	EngineStartGateway = "gateway"
)

// healthPoll is how often a server whose /health says it is not ready is
// asked again.
const healthPoll = 250 * time.Millisecond

// waitReady makes sure a target's engine is up before its first cell, and
// reports how long that took. A server whose GET /health answers 503 (an
// engine loading its model) is asked again until it answers otherwise, for
// at most the request time-out. A gateway target then gets one small request:
// if the gateway had to start an engine for it, its waiting comments say
// so and the time to the first data is the start. Anything else (no
// /health, an error) is left to the measured requests to show.
func (o *Options) waitReady(ctx context.Context, t *Target, client *http.Client, ti int) []EngineStart {
	var out []EngineStart
	limit := o.Request.Timeout
	if limit <= 0 {
		limit = 10 * time.Minute
	}
	start := time.Now()
	waited := false
	for time.Since(start) < limit && ctx.Err() == nil {
		// 503 is what an engine loading its model answers (llama.cpp's
		// "Loading model"); another status, or none, is not waited for,
		// so a server without /health, or a wrong URL, costs one request.
		if healthStatus(ctx, client, t.root()+"/health") != http.StatusServiceUnavailable {
			break
		}
		if !waited && o.Progress != nil {
			fmt.Fprintf(o.Progress, "[%s]: GET /health says the engine is not ready (503); waiting for it\n", t.Name)
		}
		waited = true
		select {
		case <-ctx.Done():
		case <-time.After(healthPoll):
		}
	}
	if waited {
		out = append(out, EngineStart{Target: t.Name, Seconds: round3(time.Since(start).Seconds()), Source: EngineStartHealth, When: "before the first cell"})
	}
	if !t.IsGateway || ctx.Err() != nil {
		return out
	}
	body, err := buildBody(t, &Prompt{Text: "Hi"}, &o.Request, 1)
	if err != nil {
		return out
	}
	q := &requester{client: client, target: t, url: t.URL(), timeout: limit, idBase: fmt.Sprintf("llmgate-bench-%d-ready-", ti)}
	var res Result
	q.do(ctx, body, &Prompt{Text: "Hi"}, 0, time.Time{}, &res)
	if res.EngineWait > 0 {
		out = append(out, EngineStart{Target: t.Name, Seconds: round3(res.EngineWait.Seconds()), Source: EngineStartGateway, When: "before the first cell"})
	}
	return out
}

// healthStatus is the status of GET url, 0 when there was no answer.
func healthStatus(ctx context.Context, client *http.Client, url string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	return resp.StatusCode
}

// writeEngineStarts prints the engine starts bench saw.
func writeEngineStarts(w io.Writer, r *Report) {
	for _, e := range r.EngineStarts {
		how := "GET /health answered not ready until then"
		if e.Source == EngineStartGateway {
			how = "the gateway's \"waiting for engine\" comments, to the first data"
		}
		extra := ""
		if e.Requests > 0 {
			extra = fmt.Sprintf(", %d request(s) waited", e.Requests)
		}
		fmt.Fprintf(w, "engine start %s: %.1f s %s (%s%s); kept out of the latency figures\n", e.Target, e.Seconds, e.When, how, extra)
	}
}

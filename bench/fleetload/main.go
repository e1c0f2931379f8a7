// Command fleetload drives an agent-like workload through a gateway and
// reports what cache-aware routing changes: time to first token, the
// share of prompt tokens the engines served from their prefix cache (as
// their usage reports it), and throughput.
//
// Each of -sessions conversations has its own system prompt of
// -system-words words and runs -turns turns one after the other; a turn
// appends a tool result of -tool-words words and the previous answer,
// as coding agents do, after a pause of up to -think while the agent runs
// its tools. The sessions run at once. With -unique every
// request gets a fresh system prompt, so no prefix is ever shared (the
// control workload).
//
// bench/fleet.sh runs it against 4 simulated replicas and 2 llama-server
// replicas through least_outstanding and cache_aware.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

type result struct {
	ttft           time.Duration
	prompt, cached int
	err            error
}

func main() {
	var (
		url         = flag.String("url", "http://127.0.0.1:8080/v1", "gateway base URL (OpenAI API)")
		key         = flag.String("key", os.Getenv("LLMGATE_KEY"), "API key")
		model       = flag.String("model", "m", "model")
		sessions    = flag.Int("sessions", 16, "conversations at once")
		turns       = flag.Int("turns", 6, "turns per conversation")
		systemWords = flag.Int("system-words", 3000, "words of each session's system prompt")
		toolWords   = flag.Int("tool-words", 150, "words of the tool result each turn adds")
		maxTokens   = flag.Int("max-tokens", 16, "max_tokens per turn")
		unique      = flag.Bool("unique", false, "a fresh system prompt on every request: nothing to share")
		label       = flag.String("label", "", "label printed with the figures")
		timeout     = flag.Duration("timeout", 5*time.Minute, "bound on the whole run")
		seed        = flag.Uint64("seed", 1, "seed of the prompts' words")
		think       = flag.Duration("think", 0, "pause before each turn, uniform in [0, think): the agent running its tools (without it, closed-loop sessions return to the replica they just freed)")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *sessions * 2}}
	var mu sync.Mutex
	var results []result
	start := time.Now()
	var wg sync.WaitGroup
	for s := range *sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(*seed, uint64(s)))
			system := words(rng, *systemWords)
			msgs := []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": "Start on the task."}}
			for turn := range *turns {
				if *think > 0 {
					select {
					case <-time.After(time.Duration(rng.Int64N(int64(*think)))):
					case <-ctx.Done():
						return
					}
				}
				if *unique {
					msgs[0]["content"] = words(rng, *systemWords)
				}
				body, _ := json.Marshal(map[string]any{"model": *model, "messages": msgs, "stream": true,
					"max_tokens": *maxTokens, "stream_options": map[string]bool{"include_usage": true}})
				r, answer := send(ctx, client, *url, *key, fmt.Sprintf("session-%d", s), body)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				if r.err != nil {
					fmt.Fprintf(os.Stderr, "session %d turn %d: %v\n", s, turn, r.err)
					return
				}
				msgs = append(msgs, map[string]string{"role": "assistant", "content": answer},
					map[string]string{"role": "user", "content": "Tool result: " + words(rng, *toolWords)})
			}
		}()
	}
	wg.Wait()
	dur := time.Since(start)
	report(*label, results, dur)
}

func send(ctx context.Context, client *http.Client, url, key, session string, body []byte) (result, string) {
	var r result
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		r.err = err
		return r, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		return r, ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		r.err = fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(b.String()))
		return r, ""
	}
	var answer strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) || bytes.Equal(line, []byte("data: [DONE]")) {
			continue
		}
		var ev struct {
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal(line[6:], &ev) != nil {
			continue
		}
		if len(ev.Choices) > 0 {
			d := ev.Choices[0].Delta
			if r.ttft == 0 && (d.Content != "" || d.ReasoningContent != "") {
				r.ttft = time.Since(t0)
			}
			answer.WriteString(d.Content)
		}
		if u := ev.Usage; u != nil {
			r.prompt = u.PromptTokens
			if u.Details != nil {
				r.cached = u.Details.CachedTokens
			}
		}
	}
	if err := sc.Err(); err != nil {
		r.err = err
	} else if r.ttft == 0 {
		r.err = fmt.Errorf("no content in the answer")
	}
	return r, answer.String()
}

func report(label string, rs []result, dur time.Duration) {
	var ttfts []time.Duration
	var prompt, cached, failed int
	for _, r := range rs {
		if r.err != nil {
			failed++
			continue
		}
		ttfts = append(ttfts, r.ttft)
		prompt += r.prompt
		cached += r.cached
	}
	slices.Sort(ttfts)
	pct := func(p float64) float64 {
		if len(ttfts) == 0 {
			return 0
		}
		return float64(ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))].Microseconds()) / 1000
	}
	share := 0.0
	if prompt > 0 {
		share = 100 * float64(cached) / float64(prompt)
	}
	fmt.Printf("%-28s requests %d failed %d  TTFT p50 %.1f ms p95 %.1f ms  cached %.1f%% of %d prompt tokens  %.2f req/s  %.0f prompt tok/s  (%.1fs)\n",
		label, len(ttfts), failed, pct(0.5), pct(0.95), share, prompt, float64(len(ttfts))/dur.Seconds(), float64(prompt)/dur.Seconds(), dur.Seconds())
}

// vocabulary is varied enough that a tokenizer gives about one token a
// word.
var vocabulary = strings.Fields(`the a function returns value error file test build module package import
	config server client request response stream token cache prefix engine replica route deploy queue load
	metric scrape session turn agent tool result read write edit search replace commit branch merge review
	index table column query schema migrate record ledger budget limit key secret header body json yaml
	go rust python shell docker kernel memory thread lock channel context cancel timeout retry backoff`)

func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		if rng.IntN(12) == 0 {
			fmt.Fprintf(&b, "%d", rng.IntN(1000))
		}
	}
	return b.String()
}

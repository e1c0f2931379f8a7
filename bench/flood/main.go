// Command flood measures what one key flooding a deployment does to
// another key's time to first token, through an llmgate gateway: key A
// keeps -flood streaming requests in flight (closed loop, -flood-tokens
// output tokens each) while key B sends -quiet small streaming requests
// one at a time. It prints B's mean TTFT and A's output throughput over
// the same window. With -quiet 0 it measures A alone for -window.
//
// bench/flood.sh starts the simulator and the gateway (without and with
// the fair queue) and runs every case.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:4000/v1", "the gateway's OpenAI base URL")
	model := flag.String("model", "m", "model")
	keyA := flag.String("key-a", "", "the flooding key")
	keyB := flag.String("key-b", "", "the quiet key")
	flood := flag.Int("flood", 48, "key A's requests in flight (0: none)")
	floodTokens := flag.Int("flood-tokens", 200, "output tokens of each of A's requests")
	quiet := flag.Int("quiet", 20, "key B's requests, one at a time (0: measure A alone for -window)")
	quietTokens := flag.Int("quiet-tokens", 8, "output tokens of each of B's requests")
	warm := flag.Int("warm", 8, "A's requests to finish before measuring (the flood in steady state)")
	window := flag.Duration("window", 20*time.Second, "with -quiet 0, how long A alone is measured")
	flag.Parse()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *flood + 8, MaxConnsPerHost: *flood + 8}}
	ctx, stop := context.WithCancel(context.Background())
	var aDone, aTokens atomic.Int64
	var measuring atomic.Bool
	var wg sync.WaitGroup
	for range *flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := stream(ctx, client, *url, *keyA, *model, *floodTokens)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintln(os.Stderr, "A:", err)
						os.Exit(1) // a flood that fails measures nothing
					}
					continue
				}
				aDone.Add(1)
				if measuring.Load() {
					aTokens.Add(int64(r.tokens))
				}
			}
		}()
	}
	for *flood > 0 && aDone.Load() < int64(*warm) {
		time.Sleep(10 * time.Millisecond)
	}
	measuring.Store(true)
	start := time.Now()
	var ttfts []time.Duration
	fails := 0
	if *quiet == 0 {
		time.Sleep(*window)
	}
	for range *quiet {
		r, err := stream(ctx, client, *url, *keyB, *model, *quietTokens)
		if err != nil {
			fmt.Fprintln(os.Stderr, "B:", err)
			if fails++; fails > 3 {
				os.Exit(1)
			}
			continue
		}
		ttfts = append(ttfts, r.ttft)
	}
	elapsed := time.Since(start)
	measuring.Store(false)
	stop()
	wg.Wait()

	out := map[string]any{"flood": *flood, "flood_tokens": *floodTokens, "window_s": round(elapsed.Seconds())}
	if *flood > 0 {
		out["a_output_tokens_per_s"] = round(float64(aTokens.Load()) / elapsed.Seconds())
	}
	if *quiet > 0 {
		sort.Slice(ttfts, func(i, j int) bool { return ttfts[i] < ttfts[j] })
		var sum time.Duration
		for _, d := range ttfts {
			sum += d
		}
		if len(ttfts) > 0 {
			out["b_mean_ttft_ms"] = round(float64(sum.Microseconds()) / 1000 / float64(len(ttfts)))
			out["b_p50_ttft_ms"] = round(float64(ttfts[len(ttfts)/2].Microseconds()) / 1000)
			out["b_max_ttft_ms"] = round(float64(ttfts[len(ttfts)-1].Microseconds()) / 1000)
		}
		out["b_requests"], out["b_failed"] = len(ttfts), fails
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func round(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }

type result struct {
	ttft   time.Duration
	tokens int
}

// stream sends one streaming chat request and reads it to the end: TTFT
// is the first chunk with content (timestamped when read, before any
// parsing of later chunks), tokens the usage's completion tokens.
func stream(ctx context.Context, c *http.Client, url, key, model string, maxTokens int) (result, error) {
	body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"messages":[{"role":"user","content":"Write a story about a lighthouse."}]}`, model, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return result{}, fmt.Errorf("status %d: %s", resp.StatusCode, b.String())
	}
	var r result
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		at := time.Since(t0)
		data := line[6:]
		if bytes.Equal(data, []byte("[DONE]")) {
			break
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(data, &ch) != nil {
			continue
		}
		if r.ttft == 0 && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			r.ttft = at
		}
		if ch.Usage != nil {
			r.tokens = ch.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	if r.ttft == 0 {
		return r, fmt.Errorf("no content in the stream")
	}
	return r, nil
}

package bench

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

func TestSummarize_MatchesNumpyDefinitions(t *testing.T) {
	s := Summarize([]float64{4, 1, 3, 2})
	// numpy: mean 2.5, median 2.5, std (ddof=0) sqrt(1.25), percentile
	// (linear) p90 = 3.7, p99 = 3.97.
	if s.Mean != 2.5 || s.Median != 2.5 || !near(s.Std, math.Sqrt(1.25), 1e-12) ||
		!near(s.P90, 3.7, 1e-12) || !near(s.P99, 3.97, 1e-12) || s.Min != 1 || s.Max != 4 {
		t.Errorf("got %+v", s)
	}
	if z := Summarize(nil); z.Mean != 0 || z.P99 != 0 || z.Count != 0 {
		t.Errorf("empty input: %+v, want zeros", z)
	}
}

func TestArrivals_FollowVLLMGammaProcessAndRescale(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	offs := Arrivals(1000, 50, 1, rng)
	if got := offs[len(offs)-1]; !near(got.Seconds(), 1000.0/50, 1e-6) {
		t.Errorf("last arrival %v, want n/rate = 20s after rescaling", got)
	}
	// Poisson: gap coefficient of variation ≈ 1; burstiness 4 ≈ 0.5.
	cv := func(o []time.Duration) float64 {
		var gaps []float64
		prev := time.Duration(0)
		for _, x := range o {
			gaps = append(gaps, (x - prev).Seconds())
			prev = x
		}
		s := Summarize(gaps)
		return s.Std / s.Mean
	}
	if c := cv(offs); !near(c, 1, 0.15) {
		t.Errorf("Poisson gap CV %.2f, want ≈1", c)
	}
	if c := cv(Arrivals(2000, 50, 4, rng)); !near(c, 0.5, 0.1) {
		t.Errorf("burstiness 4 gap CV %.2f, want ≈0.5", c)
	}
	if c := cv(Arrivals(100, 50, math.Inf(1), rng)); c > 1e-6 {
		t.Errorf("infinite burstiness must be a constant rate, CV %.4f", c)
	}
	for _, o := range Arrivals(10, math.Inf(1), 1, rng) {
		if o != 0 {
			t.Fatal("rate inf must send everything at once")
		}
	}
}

func TestLoadTargets_ReadsYAMLAndJSONAndResolvesKeys(t *testing.T) {
	env := map[string]string{"TEST_GATEWAY_KEY": "sk-lg-gw", "OPENAI_API_KEY": "sk-openai", "LLMGATE_API_KEY": "sk-lg-env"}
	getenv := func(k string) string { return env[k] }
	f, _ := os.Open("testdata/targets.yaml")
	defer f.Close()
	ts, err := LoadTargets(f, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 || ts[1].APIKey != "sk-lg-gw" || ts[0].APIKey != "sk-lg-env" || ts[2].Endpoint != EndpointCompletions {
		t.Errorf("targets: %+v", ts)
	}
	if ts[2].URL() != "http://127.0.0.1:8000/v1/completions" || ts[0].URL() != "http://127.0.0.1:8000/v1/chat/completions" {
		t.Errorf("urls %s %s", ts[2].URL(), ts[0].URL())
	}
	j, _ := os.Open("testdata/targets.json")
	defer j.Close()
	ts, err = LoadTargets(j, getenv)
	if err != nil || ts[0].APIKey != "sk-explicit" {
		t.Errorf("json: %+v %v", ts, err)
	}
	delete(env, "LLMGATE_API_KEY")
	ts, _ = TargetsFromFlags("http://127.0.0.1:1/v1", "", []string{"a", "b"}, "", getenv)
	if len(ts) != 2 || ts[1].APIKey != "sk-openai" || ts[1].Name != "b" {
		t.Errorf("flags: %+v", ts)
	}
	for _, bad := range []string{
		"targets:\n  - base_url: http://x/v1\n    model: m\n    modle: typo\n",
		"targets:\n  - base_url: ftp://x\n    model: m\n",
		"targets:\n  - base_url: http://x/v1\n    model: m\n    endpoint: embeddings\n",
		"targets: []\n",
	} {
		if _, err := LoadTargets(strings.NewReader(bad), getenv); err == nil {
			t.Errorf("accepted bad config %q", bad)
		}
	}
}

func TestWorkload_RandomLengthsStayInRangeAndPromptsDiffer(t *testing.T) {
	w := Workload{InputLen: 100, OutputLen: 50, RangeRatio: 0.2, Seed: 7}
	ps, err := w.Prompts(200)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if p.InputTokens < 80 || p.InputTokens > 120 || p.MaxTokens < 40 || p.MaxTokens > 60 {
			t.Fatalf("lengths out of range: %d/%d", p.InputTokens, p.MaxTokens)
		}
		if n := len(strings.Fields(p.Text)); n != p.InputTokens {
			t.Fatalf("prompt has %d words, planned %d", n, p.InputTokens)
		}
		seen[p.Text] = true
	}
	if len(seen) != 200 {
		t.Errorf("only %d distinct prompts of 200", len(seen))
	}
	again, _ := w.Prompts(200)
	if again[17].Text != ps[17].Text {
		t.Error("same seed must give the same prompts")
	}
}

func TestWorkload_ReadsShareGPTAndJSONL(t *testing.T) {
	w := Workload{Dataset: "sharegpt", Path: "testdata/sharegpt_small.json", OutputLen: 99, Seed: 1}
	ps, err := w.Prompts(4)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Text == "hi" || p.MaxTokens == 99 || p.MaxTokens < 4 {
			t.Errorf("sharegpt prompt %+v: single-turn rows must be dropped and output length taken from the reply", p)
		}
	}
	w = Workload{Dataset: "jsonl", Path: "testdata/prompts.jsonl", OutputLen: 99}
	ps, err = w.Prompts(2)
	if err != nil {
		t.Fatal(err)
	}
	var sawMessages, sawPrompt bool
	for _, p := range ps {
		if len(p.Messages) > 0 && p.MaxTokens == 12 {
			sawMessages = true
		}
		if p.Text != "" && p.MaxTokens == 64 {
			sawPrompt = true
		}
	}
	if !sawMessages || !sawPrompt {
		t.Errorf("jsonl prompts %+v", ps)
	}
	if _, err := (&Workload{Dataset: "sharegpt"}).Prompts(1); err == nil {
		t.Error("sharegpt without a path accepted")
	}
}

package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
)

// Prompt is one request's input. Either Text (a completion prompt or a
// single user message) or Messages (raw chat messages) is set.
type Prompt struct {
	Text     string
	Messages json.RawMessage
	// InputTokens is the expected prompt length. Without a tokenizer it is
	// an estimate; the server's usage.prompt_tokens replaces it when sent.
	InputTokens int
	// MaxTokens is sent as max_tokens / max_completion_tokens; 0 omits it.
	MaxTokens int
}

// Workload describes how prompts are produced.
type Workload struct {
	// Dataset is random (default), fixed, sharegpt or jsonl.
	Dataset string
	// Path is the ShareGPT JSON or JSONL file.
	Path string
	// FixedPrompt is the prompt for the fixed dataset.
	FixedPrompt string
	// InputLen and OutputLen are the mean lengths in tokens for random
	// prompts; OutputLen also caps fixed and file prompts that give no length.
	InputLen, OutputLen int
	// RangeRatio draws lengths uniformly from [len*(1-r), len*(1+r)], as
	// vLLM's --random-range-ratio does.
	RangeRatio float64
	// Seed makes prompt generation and arrivals reproducible.
	Seed uint64
}

// words are short, common English words that most BPE vocabularies encode
// as one token each with their leading space, so a random prompt of n words
// is close to n tokens. The server's usage count is the truth.
var words = strings.Fields(`the of and to in is was for on as with by at from his
that it an are this be or had not but have which were one you all their they
she her has more been will can there would who so when what up out if about
into than them some could other time two may then do first any my now such
like our over man me even most made after also did many before must through
back years where much your way well down should because each just those
people how too little state good very make world still own see men work long
get here between both life being under never day same another know while last
might us great old year off come since against go came right used take three`)

// Prompts generates n prompts for the workload.
func (w *Workload) Prompts(n int) ([]Prompt, error) {
	if n <= 0 {
		return nil, errors.New("number of prompts must be positive")
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x6c6c6d67617465))
	switch w.Dataset {
	case "", "random":
		return w.random(rng, n)
	case "fixed":
		if w.FixedPrompt == "" {
			return nil, errors.New("fixed dataset needs --prompt")
		}
		out := make([]Prompt, n)
		for i := range out {
			out[i] = Prompt{Text: w.FixedPrompt, InputTokens: EstimateTokens(w.FixedPrompt), MaxTokens: w.OutputLen}
		}
		return out, nil
	case "sharegpt":
		return w.fromFile(rng, n, readShareGPT)
	case "jsonl":
		return w.fromFile(rng, n, w.readJSONL)
	default:
		return nil, fmt.Errorf("unknown dataset %q: use random, fixed, sharegpt or jsonl", w.Dataset)
	}
}

func (w *Workload) lengths(rng *rand.Rand, mean int) int {
	if w.RangeRatio <= 0 || mean <= 1 {
		return max(mean, 1)
	}
	lo := int(float64(mean) * (1 - w.RangeRatio))
	hi := int(float64(mean) * (1 + w.RangeRatio))
	lo = max(lo, 1)
	if hi <= lo {
		return lo
	}
	return lo + rng.IntN(hi-lo+1)
}

func (w *Workload) random(rng *rand.Rand, n int) ([]Prompt, error) {
	if w.InputLen <= 0 || w.OutputLen <= 0 {
		return nil, errors.New("random dataset needs positive --input-len and --output-len")
	}
	if w.RangeRatio < 0 || w.RangeRatio >= 1 {
		return nil, errors.New("--range-ratio must be in [0, 1)")
	}
	out := make([]Prompt, n)
	var sb strings.Builder
	for i := range out {
		in := w.lengths(rng, w.InputLen)
		sb.Reset()
		// A distinct leading number keeps servers from serving the prompt
		// from a prefix cache shared with an earlier request.
		fmt.Fprintf(&sb, "%d", rng.Uint32())
		for j := 1; j < in; j++ {
			sb.WriteByte(' ')
			sb.WriteString(words[rng.IntN(len(words))])
		}
		out[i] = Prompt{Text: sb.String(), InputTokens: in, MaxTokens: w.lengths(rng, w.OutputLen)}
	}
	return out, nil
}

func (w *Workload) fromFile(rng *rand.Rand, n int, read func(io.Reader) ([]Prompt, error)) ([]Prompt, error) {
	if w.Path == "" {
		return nil, fmt.Errorf("%s dataset needs --dataset-path", w.Dataset)
	}
	f, err := os.Open(w.Path)
	if err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	defer f.Close()
	pool, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", w.Path, err)
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("%s: no usable prompts", w.Path)
	}
	// Shuffle once with the seed, then cycle: vLLM samples without
	// replacement and repeats when asked for more prompts than exist.
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	out := make([]Prompt, n)
	for i := range out {
		out[i] = pool[i%len(pool)]
		if out[i].MaxTokens == 0 {
			out[i].MaxTokens = w.OutputLen
		}
	}
	return out, nil
}

// readShareGPT reads the ShareGPT format: an array of {"conversations":
// [{"from":"human","value":...},{"from":"gpt","value":...},...]}. Like vLLM
// it takes the first turn as the prompt and the reply's length as the output
// length, and drops very short or very long pairs.
func readShareGPT(r io.Reader) ([]Prompt, error) {
	var rows []struct {
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.NewDecoder(r).Decode(&rows); err != nil {
		return nil, fmt.Errorf("not a ShareGPT JSON array: %w", err)
	}
	var out []Prompt
	for _, row := range rows {
		if len(row.Conversations) < 2 {
			continue
		}
		in := EstimateTokens(row.Conversations[0].Value)
		outLen := EstimateTokens(row.Conversations[1].Value)
		if in < 4 || outLen < 4 || in > 1024 || in+outLen > 2048 {
			continue
		}
		out = append(out, Prompt{Text: row.Conversations[0].Value, InputTokens: in, MaxTokens: outLen})
	}
	return out, nil
}

// readJSONL reads one JSON object per line with "prompt" (string) or
// "messages" (chat messages), and optional "max_tokens" or "output_len".
func (w *Workload) readJSONL(r io.Reader) ([]Prompt, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []Prompt
	line := 0
	for sc.Scan() {
		line++
		b := strings.TrimSpace(sc.Text())
		if b == "" {
			continue
		}
		var row struct {
			Prompt    string          `json:"prompt"`
			Messages  json.RawMessage `json:"messages"`
			MaxTokens int             `json:"max_tokens"`
			OutputLen int             `json:"output_len"`
		}
		if err := json.Unmarshal([]byte(b), &row); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		p := Prompt{Text: row.Prompt, Messages: row.Messages, MaxTokens: row.MaxTokens}
		if p.MaxTokens == 0 {
			p.MaxTokens = row.OutputLen
		}
		switch {
		case p.Text != "":
			p.InputTokens = EstimateTokens(p.Text)
		case len(p.Messages) > 0:
			p.InputTokens = EstimateTokens(string(p.Messages))
		default:
			return nil, fmt.Errorf("line %d: needs \"prompt\" or \"messages\"", line)
		}
		out = append(out, p)
	}
	return out, sc.Err()
}

// EstimateTokens approximates a token count without a tokenizer: about four
// characters per token for English text. Reports label such counts as
// estimates.
func EstimateTokens(s string) int {
	n := (len(s) + 3) / 4
	return max(n, 1)
}

package sim

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
)

// Token counting approximation. The simulator has no tokenizer; it counts
// about four bytes of UTF-8 text per token, which is close to what BPE
// tokenizers of the Qwen and Llama families give for English prose, and adds
// the overhead of a ChatML-style chat template: five tokens per message
// (<|im_start|>, role, newline, <|im_end|>, newline) and three for the
// generation prompt (<|im_start|>assistant newline).
const (
	bytesPerToken        = 4
	chatTokensPerMessage = 5
	chatGenerationPrompt = 3
)

// countTextTokens approximates the number of tokens in s.
func countTextTokens(s string) int {
	if s == "" {
		return 0
	}
	return (len(s) + bytesPerToken - 1) / bytesPerToken
}

// vocab is the word list generated text is drawn from; each entry is one
// output token. Sentences end with "." tokens so text reads like prose.
var vocab = strings.Fields(`the a of and to in is that it for on with as was at by
an be this from or are which have has not but can will one all would there
their more also other into some time when than two first been like its only
new these over such after most make may could way use then them any many
model engine token batch queue request latency stream server answer question
simple example result value system memory cache prompt output input reply
data test fast slow clear small large early late short long good best next
each every within before during under between through against about without
simulated response continuous scheduler decode prefill kernel tensor layer
attention weight context window sequence sample greedy throughput metric`)

// generation is a precomputed completion: the token texts and where the
// visible text ends (a stop string truncates it). text and ends are the
// content; tokens counts every token, reasoning and tool calls included.
type generation struct {
	text       string // full visible text
	ends       []int  // ends[i] = byte offset in the untruncated text after token i
	tokens     int    // tokens the engine must generate
	finish     string // "stop", "length" or "tool_calls"
	stopReason any    // nil, or the stop string that matched
	// ans holds reasoning and tool calls of a chat answer; nil for plain
	// text, whose tokens are all content.
	ans *answer
}

// delta returns the visible text of tokens [from, to).
func (g *generation) delta(from, to int) string {
	start := 0
	if from > 0 {
		start = g.ends[from-1]
	}
	end := g.ends[to-1]
	if start > len(g.text) {
		start = len(g.text)
	}
	if end > len(g.text) {
		end = len(g.text)
	}
	return g.text[start:end]
}

// seedFor derives the sampling seed of a request. Greedy sampling
// (temperature 0) depends on the prompt only, as a real engine's argmax
// does; seeded sampling depends on seed and prompt; unseeded sampling uses
// a fresh random value.
func seedFor(prompt string, temperature float64, seed *int64, random func() uint64) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(prompt))
	switch {
	case temperature == 0:
	case seed != nil:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(*seed))
		_, _ = h.Write(b[:])
		_, _ = h.Write([]byte{0xff})
	default:
		return random()
	}
	return h.Sum64()
}

// generate produces up to maxTokens tokens from seed. Without ignoreEOS the
// text ends naturally after an exponentially distributed number of tokens
// with the given mean. Stop strings end the output before the string.
func generate(seed uint64, maxTokens int, ignoreEOS bool, meanTokens int, stops []string) generation {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	limit := maxTokens
	finish := "length"
	if !ignoreEOS {
		natural := 1 + int(-float64(meanTokens)*math.Log(1-r.Float64()))
		if natural < limit {
			limit = natural
			finish = "stop"
		}
	}
	var sb strings.Builder
	g := generation{ends: make([]int, 0, limit), finish: finish}
	capital := true
	sinceStop := 0
	maxStop := 0
	for _, s := range stops {
		maxStop = max(maxStop, len(s))
	}
	for i := 0; i < limit; i++ {
		var w string
		k := r.IntN(len(vocab) + 12)
		switch {
		case sinceStop >= 6 && k >= len(vocab)+6:
			w, capital, sinceStop = ".", true, 0
		case sinceStop >= 3 && k >= len(vocab):
			w = ","
		default:
			word := vocab[k%len(vocab)]
			if capital {
				word = strings.ToUpper(word[:1]) + word[1:]
				capital = false
			}
			if i > 0 {
				word = " " + word
			}
			w = word
			sinceStop++
		}
		sb.WriteString(w)
		g.ends = append(g.ends, sb.Len())
		if maxStop > 0 {
			// Only the tail can contain a newly completed stop string.
			full := sb.String()
			from := max(0, len(full)-len(w)-maxStop)
			for _, s := range stops {
				if s == "" {
					continue
				}
				if j := strings.Index(full[from:], s); j >= 0 {
					g.text = full[:from+j]
					g.tokens = i + 1
					g.finish = "stop"
					g.stopReason = s
					return g
				}
			}
		}
	}
	g.text = sb.String()
	g.tokens = limit
	return g
}

// embed returns a deterministic unit-norm vector for text.
func embed(text string, dim int) []float32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(text))
	s := h.Sum64()
	r := rand.New(rand.NewPCG(s, s^0x5851f42d4c957f2d))
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	normalize(v)
	return v
}

// normalize scales v to unit length in place.
func normalize(v []float32) {
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		return
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
}

// embeddingBase64 encodes v as little-endian float32 bytes in base64, the
// encoding OpenAI and vLLM use for encoding_format "base64".
func embeddingBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

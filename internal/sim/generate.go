package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"llmgate/internal/sse"
)

// genRequest is what chat and text completions have in common once parsed.
type genRequest struct {
	chat         bool
	e            *engine
	model        string // name echoed in responses
	prompt       string // text the output is seeded from
	echo         string // completions with echo=true prepend the prompt
	promptTokens int
	hashes       []uint64 // chained hashes of the prompt's full KV blocks
	// hasher is the prompt's hasher after its last token (chat requests),
	// from which the answer's blocks are hashed.
	hasher       *prefixHasher
	maxTokens    *int
	temperature  float64
	seed         *int64
	stops        []string
	ignoreEOS    bool
	stream       bool
	includeUsage bool
	// continuousUsage adds running usage to every chunk (vLLM's
	// stream_options.continuous_usage_stats).
	continuousUsage bool
	// explicitMax reports that the client set the output limit (otherwise
	// maxTokens is what the context leaves).
	explicitMax bool
	// plan is a chat request's tools, tool choice and thinking; nil for
	// text completions.
	plan *chatPlan
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	eng := s.begin(w, r, &req)
	if eng == nil {
		return
	}
	prompt, tokens, e := parsePrompt(req.Prompt, "prompt")
	if e != nil {
		writeAPIError(w, e)
		return
	}
	g := genRequest{e: eng, model: eng.mc.Name, prompt: prompt, promptTokens: tokens, maxTokens: req.MaxTokens,
		seed: req.Seed, stops: req.Stop, ignoreEOS: req.IgnoreEOS, stream: req.Stream, hashes: promptHashes(prompt, tokens, eng.mc.BlockSize)}
	if g.maxTokens == nil {
		// The legacy completions API defaults max_tokens to 16 (OpenAI and vLLM).
		n := 16
		g.maxTokens = &n
	}
	if req.Echo {
		g.echo = prompt
	}
	if e := s.commonChecks(&g, req.N, req.Temperature, req.StreamOptions); e != nil {
		writeAPIError(w, e)
		return
	}
	s.serveGeneration(w, r, g)
}

// commonChecks validates sampling parameters and the context length, in
// vLLM's words.
func (s *Server) commonChecks(g *genRequest, n *int, temperature *float64, so *streamOptions) *apiError {
	if n != nil && *n != 1 {
		return badRequest("n", "n must be 1: the simulator generates one choice per request (got n=%d); send separate requests instead", *n)
	}
	if temperature != nil {
		if *temperature < 0 {
			return badRequest("temperature", "temperature must be non-negative, got %g.", *temperature)
		}
		g.temperature = *temperature
	} else {
		g.temperature = 1
	}
	if so != nil {
		if !g.stream {
			return badRequest("stream_options", "Stream options can only be defined when `stream=True`.")
		}
		g.includeUsage = so.IncludeUsage == nil || *so.IncludeUsage
		g.continuousUsage = g.includeUsage && so.ContinuousUsageStats
	}
	if g.maxTokens != nil && *g.maxTokens < 1 {
		return badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *g.maxTokens)
	}
	if s.llamaCpp() {
		return s.llamaContextCheck(g)
	}
	limit := g.e.mc.MaxModelLen
	if g.promptTokens >= limit {
		return badRequest("", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.",
			limit, g.promptTokens)
	}
	g.explicitMax = g.maxTokens != nil
	if g.maxTokens == nil {
		left := limit - g.promptTokens
		g.maxTokens = &left
	} else if g.promptTokens+*g.maxTokens > limit {
		return badRequest("", "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
			*g.maxTokens, limit, g.promptTokens, *g.maxTokens, limit, g.promptTokens)
	}
	return nil
}

// serveGeneration runs a request through the engine and writes the
// response, streamed or whole.
func (s *Server) serveGeneration(w http.ResponseWriter, r *http.Request, g genRequest) {
	if e := s.injectFault(); e != nil {
		writeAPIError(w, e)
		return
	}
	seed := seedFor(g.prompt, g.temperature, g.seed, s.uint64)
	var gen generation
	if g.plan != nil {
		var e *apiError
		if gen, e = s.buildChat(&g, seed); e != nil {
			writeAPIError(w, e)
			return
		}
	} else {
		gen = generate(seed, *g.maxTokens, g.ignoreEOS, g.e.mc.MeanOutputTokens, g.stops)
	}
	q := newSeq(g.promptTokens, gen.tokens)
	q.hashes = g.hashes
	if gen.ans == nil && g.hasher != nil {
		// A plain-text answer comes back in the next turn's prompt as
		// the assistant message, whose header the generation prompt
		// already was: the next prompt's blocks match these.
		q.outHashes = g.hasher.continued(gen.text)
	}
	q.finishReason = gen.finish
	if gen.finish == "tool_calls" {
		// The engine stopped at EOS; "tool_calls" is the API layer's word.
		q.finishReason = "stop"
	}
	cutAt := -1
	if g.stream && s.cfg.Faults.CutStreamRate > 0 && s.float() < s.cfg.Faults.CutStreamRate {
		cutAt = 0
		if gen.tokens >= 2 {
			cutAt = 1 + s.intN(gen.tokens-1)
		}
	}
	if !g.e.submit(q) {
		writeAPIError(w, s.queueFull(g.e))
		return
	}
	// Whatever happens next (client gone, stream cut, shutdown), the engine
	// must stop working on this sequence.
	defer q.cancelled.Store(true)

	prefix := "cmpl-"
	if g.chat {
		prefix = "chatcmpl-"
	}
	id := prefix + randomHex()
	created := time.Now().Unix()
	usage := gen.usage(g.promptTokens)
	if !g.stream {
		if !s.wait(r, q) {
			if r.Context().Err() == nil {
				writeAPIError(w, s.precheck())
			}
			return
		}
		usage.PromptTokensDetails = s.promptDetails(q, rawNull)
		timings := s.timings(q, g.promptTokens)
		if g.chat {
			writeJSON(w, http.StatusOK, chatResponse{ID: id, Object: "chat.completion", Created: created, Model: g.model,
				Choices: []chatChoice{{Message: gen.message(), FinishReason: gen.finish, StopReason: gen.stopReason}}, Usage: usage, Timings: timings})
			return
		}
		fin := gen.finish
		writeJSON(w, http.StatusOK, completionResponse{ID: id, Object: "text_completion", Created: created, Model: g.model,
			Choices: []completionChoice{{Text: g.echo + gen.text, FinishReason: &fin, StopReason: gen.stopReason}}, Usage: usage, Timings: timings})
		return
	}

	sse.SetHeaders(w.Header())
	if s.llamaCpp() {
		// llama-server closes the connection after each streamed answer.
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	sw := sse.NewWriter(w)
	st := streamer{w: sw, id: id, created: created, model: g.model, chat: g.chat, gen: &gen,
		promptTokens: g.promptTokens, continuousUsage: g.continuousUsage, echo: g.echo}
	sent := 0
	for {
		select {
		case <-q.notify:
		case <-r.Context().Done():
			return
		case <-s.closed:
			panic(http.ErrAbortHandler)
		}
		n, done := q.snapshot()
		if n <= sent && !done {
			continue
		}
		if sent == 0 && g.chat {
			st.role()
		}
		// One chunk per token, as vLLM sends when the client keeps up. (vLLM
		// merges the tokens of a lagging client into one chunk; the
		// simulator does not, so transcripts are reproducible under load.)
		for ; sent < n; sent++ {
			if sent == cutAt {
				break
			}
			if gen.ans != nil {
				st.answerToken(sent, done && sent == n-1)
			} else {
				st.tokens(sent, sent+1, done && sent == n-1)
			}
		}
		if cutAt >= 0 && sent >= cutAt {
			// Drop the connection without a finish chunk or [DONE], as a
			// crashed engine or a broken proxy would.
			panic(http.ErrAbortHandler)
		}
		if sw.Err() != nil {
			return
		}
		if done {
			break
		}
	}
	if g.includeUsage {
		usage.PromptTokensDetails = s.promptDetails(q, nil)
		st.usage(usage, s.timings(q, g.promptTokens))
	}
	_ = sw.WriteDone()
}

// promptDetails is usage.prompt_tokens_details of a finished sequence:
// the prompt tokens its prefix cache served, or hidden (as vLLM answers
// when it served none, or when started without
// --enable-prompt-tokens-details).
func (s *Server) promptDetails(q *seq, hidden json.RawMessage) json.RawMessage {
	n := q.cachedTokens()
	if !s.llamaCpp() && (s.cfg.HidePromptTokensDetails || n == 0) {
		// vLLM leaves the details out when nothing was cached
		// (serving_chat.py: "if self.enable_prompt_tokens_details and
		// num_cached_tokens").
		return hidden
	}
	return json.RawMessage(`{"cached_tokens":` + strconv.Itoa(n) + `}`)
}

// wait blocks until q is done; false if the client left or the server closed.
func (s *Server) wait(r *http.Request, q *seq) bool {
	for {
		if _, done := q.snapshot(); done {
			return true
		}
		select {
		case <-q.notify:
		case <-r.Context().Done():
			return false
		case <-s.closed:
			return false
		}
	}
}

// streamer writes one response's SSE chunks.
type streamer struct {
	w               *sse.Writer
	id              string
	created         int64
	model           string
	chat            bool
	gen             *generation
	promptTokens    int
	continuousUsage bool
	echo            string // prompt to prepend to the first chunk (completions echo)
}

// running returns the usage so far for continuous usage stats, or nil.
func (st *streamer) running(completion int) *usageInfo {
	if !st.continuousUsage {
		return nil
	}
	return &usageInfo{PromptTokens: st.promptTokens, CompletionTokens: completion, TotalTokens: st.promptTokens + completion}
}

func (st *streamer) write(v any) {
	b, err := marshal(v)
	if err != nil {
		return
	}
	_ = st.w.WriteData(b)
}

// role writes vLLM's first chat chunk: the assistant role and empty content.
func (st *streamer) role() {
	empty := ""
	st.write(chatChunk{ID: st.id, Object: "chat.completion.chunk", Created: st.created, Model: st.model,
		Choices: []chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}}},
		Usage:   st.running(0), PromptTokenIDs: rawNull})
}

// tokens writes tokens [from, to) as one chunk; final marks the finish
// chunk.
func (st *streamer) tokens(from, to int, final bool) {
	text := st.echo
	st.echo = ""
	if to > from {
		text += st.gen.delta(from, to)
	}
	var finish *string
	if final {
		f := st.gen.finish
		finish = &f
	}
	if st.chat {
		c := chatChunkChoice{Delta: chatDelta{Content: &text}, FinishReason: finish, TokenIDs: rawNull}
		if final {
			c.StopReason = rawNull
			if st.gen.stopReason != nil {
				c.StopReason, _ = json.Marshal(st.gen.stopReason)
			}
		}
		st.write(chatChunk{ID: st.id, Object: "chat.completion.chunk", Created: st.created, Model: st.model,
			Choices: []chatChunkChoice{c}, Usage: st.running(to)})
		return
	}
	var stop any
	if final {
		stop = st.gen.stopReason
	}
	st.write(completionChunk{ID: st.id, Object: "text_completion", Created: st.created, Model: st.model,
		Choices: []completionChunkChoice{{Text: text, FinishReason: finish, StopReason: stop}}, Usage: st.running(to)})
}

// answerToken writes token i of a chat answer with reasoning or tool calls:
// nothing for a token that shows nothing (think tags, tool-call framing),
// unless it is the last, whose chunk carries the finish reason with an
// empty delta as vLLM sends it.
func (st *streamer) answerToken(i int, final bool) {
	d, ok := st.gen.chatDelta(i)
	if !ok && !final {
		return
	}
	c := chatChunkChoice{Delta: d, TokenIDs: rawNull}
	if final {
		f := st.gen.finish
		c.FinishReason = &f
		c.StopReason = rawNull
		if st.gen.stopReason != nil {
			c.StopReason, _ = json.Marshal(st.gen.stopReason)
		}
	}
	st.write(chatChunk{ID: st.id, Object: "chat.completion.chunk", Created: st.created, Model: st.model,
		Choices: []chatChunkChoice{c}, Usage: st.running(i + 1)})
}

// usage writes the usage-only chunk that include_usage asks for.
func (st *streamer) usage(u usageInfo, timings *llamaTimings) {
	object := "text_completion"
	if st.chat {
		object = "chat.completion.chunk"
	}
	st.write(completionUsageChunk{ID: st.id, Object: object, Created: st.created, Model: st.model,
		Choices: []any{}, Usage: u, Timings: timings})
}

// messageText extracts the text of a chat message content: a string, a
// list of parts (text parts count; other parts are ignored), or null.
func messageText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("must be a string, a list of content parts, or null")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// promptHashes returns the KV block hashes of a completions prompt as
// parsePrompt returned it: text, or a JSON list of n token ids.
func promptHashes(prompt string, n, blockSize int) []uint64 {
	h := newPrefixHasher(blockSize)
	var ids []int64
	if strings.HasPrefix(prompt, "[") && json.Unmarshal([]byte(prompt), &ids) == nil && len(ids) == n {
		for _, id := range ids {
			h.token(strconv.FormatInt(id, 10))
		}
		return h.hashes()
	}
	h.text(prompt)
	return h.hashes()
}

// parsePrompt reads a completions or tokenize prompt: a string, a list of
// one string, a list of token ids, or a list of one such list.
// It returns the text used for seeding and the prompt token count.
func parsePrompt(raw json.RawMessage, param string) (string, int, *apiError) {
	empty := badRequest(param, "Either prompt or prompt_embeds must be provided and non-empty.")
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0, empty
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return "", 0, empty
		}
		return s, countTextTokens(s), nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return "", 0, empty
		}
		return string(raw), len(ids), nil
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", 0, badRequest(param, "%s must be a string, a list of strings, or a list of token ids", param)
	}
	if len(many) != 1 {
		return "", 0, badRequest(param, "the simulator serves one %s per request (got %d); send each as its own request", param, len(many))
	}
	return parsePrompt(many[0], param)
}

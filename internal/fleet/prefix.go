// Package fleet holds what cache- and load-aware routing knows about a
// fleet of engine replicas: the hashes of the prompt prefixes the gateway
// sent to each one, the load each engine reports on its /metrics, and the
// scorer that turns both into an order of deployments. It knows nothing of
// how deployments are listed (configuration, DNS discovery): callers hand
// it a snapshot per deployment and get indexes back.
package fleet

import (
	"hash/maphash"

	"llmgate/internal/jsonscan"
)

// BlockBytes is the size of one prefix block in bytes of the request body:
// about 64 tokens of English or code at ~4 bytes a token, the order of an
// engine's KV block (vLLM 16 tokens, SGLang 1, llama.cpp a whole slot), so
// that a match is counted in units that matter for prefill without
// hashing every few bytes.
const BlockBytes = 256

// BytesPerToken converts a capacity in tokens into blocks.
const BytesPerToken = 4

// seed makes block hashes differ between processes (nothing outside this
// process ever sees them) and keeps them equal within one.
var seed = maphash.MakeSeed()

// prefixMembers are the top-level members that make up what an engine
// renders into its prompt, in the order the chat templates render them:
// the system prompt and instructions, then the tool definitions, then the
// conversation. A member absent from a dialect is simply not there.
var prefixMembers = [...]string{"system", "instructions", "tools", "messages", "input", "prompt"}

// PrefixBlocks appends to buf the chained hashes of the request body's
// prompt, one per full block of BlockBytes: block k's hash covers every
// byte before its end, so two requests share their first n hashes exactly
// when they share their first n·BlockBytes bytes of prompt. The bytes are
// the client's own (no re-encoding): agents resend the same serialisation
// of the earlier turns, so a conversation's next turn extends the
// previous one's bytes. Members are taken in a fixed order (system,
// instructions, tools, messages, input, prompt) whatever their order in
// the body. The trailing partial block is not hashed: engines cache whole
// blocks too. A body that is not a JSON object gives no blocks.
func PrefixBlocks(body []byte, buf []uint64) []uint64 {
	var spans [len(prefixMembers)]jsonscan.Span
	found := false
	_ = jsonscan.Fields(body, func(key []byte, val jsonscan.Span) bool {
		for i, name := range prefixMembers {
			if string(key) == name {
				spans[i] = val
				found = true
			}
		}
		return true
	})
	if !found {
		return buf
	}
	var (
		prev  uint64
		block [BlockBytes]byte // a block that spans two members
		fill  int              // bytes of it so far
	)
	emit := func(chunk []byte) {
		// Chained: block k's hash mixes block k-1's, so it stands for
		// every byte before it.
		prev = mix(prev*0x9e3779b97f4a7c15 ^ maphash.Bytes(seed, chunk))
		buf = append(buf, prev)
	}
	for i, sp := range spans {
		if !sp.Valid() {
			continue
		}
		// A separator naming the member, so that moving bytes from one
		// member to the next changes the hash.
		sep := [2]byte{0, byte(i)}
		for _, p := range [2][]byte{sep[:], body[sp.Start:sp.End]} {
			if fill > 0 {
				n := copy(block[fill:], p)
				fill += n
				p = p[n:]
				if fill < BlockBytes {
					continue
				}
				emit(block[:])
				fill = 0
			}
			for len(p) >= BlockBytes {
				emit(p[:BlockBytes])
				p = p[BlockBytes:]
			}
			fill = copy(block[:], p)
		}
	}
	return buf
}

// SessionKey returns the conversation key a request body carries: the
// OpenAI "user" field, else Anthropic's metadata.user_id (Claude Code puts
// its session there). "" when there is none.
func SessionKey(body []byte) string {
	var user, meta jsonscan.Span
	_ = jsonscan.Fields(body, func(key []byte, val jsonscan.Span) bool {
		switch string(key) {
		case "user":
			user = val
		case "metadata":
			meta = val
		}
		return true
	})
	if user.Valid() {
		if s, ok := jsonscan.String(body, user); ok && s != "" {
			return s
		}
	}
	if meta.Valid() {
		m := body[meta.Start:meta.End]
		var id jsonscan.Span
		_ = jsonscan.Fields(m, func(key []byte, val jsonscan.Span) bool {
			if string(key) == "user_id" {
				id = val
			}
			return true
		})
		if id.Valid() {
			if s, ok := jsonscan.String(m, id); ok {
				return s
			}
		}
	}
	return ""
}

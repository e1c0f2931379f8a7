// Package sim is an in-process simulator of a vLLM server: the same HTTP
// API, field for field, in front of a continuous-batching timing model, so
// the gateway, the benchmark and demos can run against something that
// behaves like an inference engine under load without a GPU.
//
// # API
//
// /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models,
// /v1/rerank, /tokenize, /health, /ping, /version and /metrics answer as
// vLLM 0.11 does: ids
// "chatcmpl-<32 hex>", "cmpl-…", "embd-…"; non-streaming bodies carry every
// field vLLM's pydantic models dump (service_tier, system_fingerprint,
// prompt_logprobs, prompt_token_ids, kv_transfer_params as null, stop_reason,
// token_ids); chat streams start with a role chunk {"role":"assistant",
// "content":""}, carry one chunk per token, put finish_reason and
// stop_reason on the last token's chunk, add a usage chunk with "choices": []
// only when stream_options.include_usage is set, and end with data: [DONE].
// Errors use vLLM's envelope {"error":{"message","type","param","code"}}:
// unknown model 404 NotFoundError, context overflow 400 BadRequestError
// with vLLM's wording, a wrong API key 401 {"error": "Unauthorized"}.
//
// # Context length
//
// /v1/models lists each model's max_model_len, as vLLM does. A request
// whose prompt plus output limit exceeds it is refused with 400 in vLLM's
// words ("'max_tokens' or 'max_completion_tokens' is too large: …");
// max_completion_tokens, when present, wins over max_tokens; without
// either, the output may use what the context leaves.
//
// # Tool calls
//
// A chat request offering tools is answered as vLLM with
// --enable-auto-tool-choice and the hermes parser (Qwen's) answers it. With
// tool_choice "required" or {"type":"function","function":{"name":…}} the
// answer is a tool call: message.tool_calls (ids "chatcmpl-tool-<32 hex>"),
// content "" and finish_reason "tool_calls" (vLLM 0.11 reports "stop" for
// forced calls that are not streamed; the simulator follows OpenAI and
// later vLLM). With tool_choice "auto" (or none given) a call is made with
// probability Config.ToolCallRate (default 0), content null; never in
// answer to a tool result (a "tool" message after the last assistant
// message), so agent loops end. "none" drops the tools. Config.
// MaxParallelToolCalls > 1 allows several calls per answer unless the
// request sets parallel_tool_calls false. The draws are seeded like the
// text: a request seed, or greedy sampling, reproduces them.
//
// Arguments are drawn from the tool's parameters JSON Schema and are valid
// against it (required properties, types, enum and const, nested objects
// and arrays, bounds, multipleOf, lengths, simple string formats, local
// $ref, anyOf/oneOf/allOf), written with Python's json.dumps spacing as
// vLLM's parsers write them. Streams carry vLLM's deltas: the call's first
// delta holds index, id, type and function.name, later ones pieces of
// function.arguments; the framing tokens (<tool_call>, the JSON header,
// </tool_call>) show nothing but take decode steps and count as completion
// tokens. max_tokens can cut a required call mid-way (finish_reason
// "length"); a call the model chose itself is made only when it fits.
// Requests that misuse tool_choice get vLLM's 400s ("When using
// `tool_choice`, `tools` must be set.", a named tool not among the tools).
//
// # Reasoning
//
// Models with ModelConfig.Reasoning (the qwen3-32b preset) answer as vLLM
// with --reasoning-parser qwen3: chat answers start with reasoning that
// streams as delta.reasoning_content before any content (non-streaming:
// message.reasoning_content). chat_template_kwargs {"enable_thinking":
// false} turns it off, include_reasoning false hides it (its tokens are
// still generated). The <think> and </think> tags cost a token each and
// show nothing. Usage counts the reasoning in completion_tokens and adds
// completion_tokens_details.reasoning_tokens (the tokens between the tags),
// as vLLM releases with reasoning-token usage report it; models without a
// reasoning parser keep vLLM 0.11's usage shape. Reasoning length is
// exponential with mean MeanReasoningTokens, bounded so an answer follows:
// at most half of an output limit the client set (a real model can spend a
// whole small budget thinking; the simulator leaves room for the answer),
// and none at all under 6 tokens.
//
// # Embeddings
//
// input may be a string, a list of strings, a list of token ids or a list
// of lists of token ids, as in vLLM: one embedding per input (index in
// order), usage summed, every input checked against max_model_len.
//
// # Scripted mode
//
// Config.Script (llmgate sim --script FILE, llmgate serve --demo
// --sim-script FILE) answers chat requests with canned turns, so an agent
// run against the simulator is deterministic. The file is YAML (or JSON):
//
//	on_unmatched: generate        # or error: unmatched requests get a 400
//	turns:
//	  - match: "read the file hello.txt"   # substring of the new user/tool messages
//	    when_tool: Read                    # optional: the request offers these tools
//	    model: qwen2.5-7b-instruct         # optional: only for this served model
//	    after_tool: false                  # optional: require / forbid a tool result
//	    reasoning: "I should read it."     # optional reasoning_content
//	    text: "Reading it now."            # optional content
//	    tool_calls:                        # optional calls
//	      - name: Read
//	        arguments: {file_path: /work/hello.txt}  # a mapping, or a JSON object string
//	        id: call_1                     # optional; default chatcmpl-tool-<hex>
//
// A bare list of turns is a script too. Each turn needs text, reasoning or
// tool_calls. match: is tested against the text of the user and tool
// messages after the last assistant message (so the answer to a tool
// result can match the tool's output, and an earlier request's words no
// longer match). For each request the first turn in file order whose
// match: occurs and whose conditions hold answers it; turns with match:
// can answer any number of requests. Otherwise the next turn without
// match: answers it if its conditions hold, and is then used up: such turns
// answer in order. A turn whose tool_calls name tools the request does not
// offer does not fit, so one script can hold the same step for clients
// whose tools differ (Claude Code's Read, Codex's shell, opencode's read).
// Requests no turn fits get generated text (on_unmatched: generate, the
// default) or a 400 naming the text they were matched on (error). Turns are
// laid out as tokens like generated answers (text cut into word and
// punctuation tokens, the tool-call framing, the think tags) and go through
// the engine, so prefill and decode timing, max_tokens, streaming and usage
// behave as for any answer; include_reasoning and enable_thinking apply to
// scripted reasoning. Stop strings do not apply to scripted text. Only chat
// completions are scripted.
//
// # Timing model
//
// Each model has one engine goroutine that runs steps back to back, as
// vLLM V1's engine core does. A step's batch is built like vLLM V1's
// scheduler: running sequences first (one decode token each, or the next
// chunk of an unfinished prefill), then waiting requests in FIFO order
// while fewer than MaxNumSeqs run and the step's token budget
// (MaxNumBatchedTokens) lasts. Prompts longer than the remaining budget are
// prefilled in chunks over several steps (chunked prefill, vLLM V1's
// default); a prompt's first output token is sampled in the step that
// completes its prefill. A step lasts
//
//	DecodeBase + DecodePerSeq*B + [PrefillBase + PrefillPerToken*T if T > 0]
//
// where B is the number of sequences in the batch and T the prompt tokens
// prefilled in it, and every sequence in the batch that has finished its
// prefill gets one token at the end of the step. At batch size 1 this gives
// TTFT = PrefillBase + PrefillPerToken*P + DecodeBase + DecodePerSeq and an
// inter-token latency of DecodeBase + DecodePerSeq. Requests beyond
// MaxNumSeqs wait; beyond MaxQueue waiting requests they are refused with
// 503 (or 429, see Config.QueueFullStatus). vLLM's waiting queue is
// unbounded by default; recent releases can bound in-flight requests
// (waiting plus running) with --max-num-queued-reqs and answer 503 beyond
// it, which corresponds to MaxNumSeqs + MaxQueue here.
//
// Steps are timed against the previous step's scheduled end, so timer
// wake-up latency does not accumulate into inter-token latency. Client
// disconnects abort their sequence at the next step, as in vLLM.
//
// # KV cache and prefix caching
//
// Each engine keeps a KV cache of ModelConfig.KVCacheTokens tokens in
// blocks of BlockSize, as vLLM's automatic prefix caching does: full prompt
// blocks are hashed in a chain and reused by later prompts with the same
// leading tokens, so their prefill is skipped; idle cached blocks are
// evicted least recently freed first. As in vLLM V1, a request is admitted
// when the blocks of the prompt tokens it prefills fit, and takes output
// blocks as it decodes; when a running request needs a block and none is
// free, the most recently admitted one is preempted: freed, put back at the
// front of the queue, and later recomputed (prompt and generated tokens
// prefilled again) before it goes on generating. The llama.cpp face instead
// reserves prompt and output at admission and never preempts. Answers
// report usage.prompt_tokens_details.cached_tokens and /metrics the
// vllm:kv_cache_usage_perc, vllm:prefix_cache_* and
// vllm:num_preemptions_total families (llama.cpp's names for the llama.cpp
// face). See kvcache.go and scheduler.go.
//
// # Default figures
//
// The presets model bf16 weights on one 80 GB data-centre GPU. Decode at
// small batch is memory-bandwidth bound: every step reads all weights once.
//
//   - qwen2.5-7b-instruct (A100 80GB): 15.2 GB of weights over ~2 TB/s is
//     7.6 ms ideal; measured vLLM figures for 7-8B models on A100 are ~75
//     tokens/s at concurrency 1 (about 13 ms/token; Llama-3.1-8B on an A100
//     40GB, johnmusgrave.com "vLLM throughput-latency sweep on NVIDIA A100",
//     vLLM 0.23) and nearly flat per-token latency up to concurrency 8.
//     Hence DecodeBase 12 ms + DecodePerSeq 0.15 ms. Prefill is compute
//     bound: 2 x 7.6e9 FLOP per token at ~60% of 312 TFLOP/s is ~0.08 ms
//     per token, plus 8 ms fixed, so a 100-token chat prompt sees ~28 ms TTFT
//     and a 1,000-token prompt ~100 ms. MaxNumSeqs 256, MaxModelLen 32768
//     (the model's max_position_embeddings), MaxNumBatchedTokens 8192 (vLLM
//     V1's default for the API server on large GPUs).
//   - qwen2.5-32b-instruct (H100 80GB): 65 GB of weights over 3.35 TB/s is
//     19.5 ms ideal, so DecodeBase 24 ms + 0.4 ms per sequence; prefill
//     0.12 ms per token + 15 ms. MaxNumSeqs 64: only ~12 GB remain for KV
//     cache at 256 KB per token (64 layers x 8 KV heads x 128 x 2 x 2 bytes),
//     about 48k tokens.
//   - qwen3-32b (H100 80GB): same shape as Qwen2.5-32B with a slightly
//     larger parameter count (32.8B): DecodeBase 25 ms + 0.45 ms per sequence,
//     prefill 0.125 ms per token + 16 ms, MaxModelLen 40960 (its
//     max_position_embeddings), longer natural answers (mean 384 tokens),
//     and reasoning before them (mean 192 tokens; see Reasoning).
//
// Throughput figures published for vLLM (e.g. ~3,400 output tokens/s for a
// 7B distill on one A100 80GB at saturation, morphllm.com "vLLM
// Benchmarks", 2026) are in line with what the 7B preset yields at 256
// concurrent sequences (256 / (12 ms + 256 x 0.15 ms) ≈ 5,000 tokens/s
// before prefill interference).
//
// # Text, tokens and sampling
//
// There is no tokenizer. Prompt tokens are counted as ceil(bytes/4) per
// text, plus 5 tokens per chat message and 3 for the generation prompt
// (ChatML framing); token-id prompts count their ids. Output tokens are
// words drawn from a fixed vocabulary by a PRNG seeded from the prompt and
// the request's seed: temperature 0 is greedy (the prompt alone decides the
// text), a seed makes sampling reproducible, and no seed gives fresh text
// each time. Without ignore_eos the text ends naturally after an
// exponentially distributed number of tokens (mean MeanOutputTokens), with
// finish_reason "stop"; max_tokens / max_completion_tokens cut it with
// "length"; a stop string ends it before the string with finish_reason
// "stop" and stop_reason set to the string. Embeddings are deterministic
// unit-norm vectors seeded by the input text.
package sim

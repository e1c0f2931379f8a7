// Package sim is an in-process simulator of a vLLM server: the same HTTP
// API, field for field, in front of a continuous-batching timing model, so
// the gateway, the benchmark and demos can run against something that
// behaves like an inference engine under load without a GPU.
//
// # API
//
// /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models,
// /health, /ping, /version and /metrics answer as vLLM 0.11 does: ids
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
//     max_position_embeddings), longer natural answers (mean 384 tokens).
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

// Package engines is the engine conformance suite: the same checks of what
// the gateway learns from and passes on for an engine (token counts,
// context fitting, the engine's own errors, usage in the ledger, an engine
// started on demand, killed mid-stream and restarted, the prefix cache's
// cached_tokens on a repeated prompt), run against the
// simulator answering as vLLM and as llama.cpp, and against llama.cpp's
// real llama-server when test/real-engine/setup.sh has prepared it. It has
// no non-test code.
package engines

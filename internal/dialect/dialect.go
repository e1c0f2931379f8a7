// Package dialect names the API dialects a backend speaks, once, below every
// package that decides on them (config, preset, provider, codec, relay,
// engineinfo), and holds the options a model's requests are converted into
// the chat dialect with (ChatOptions), which config builds, the router
// carries and translate applies.
package dialect

// Dialect is the API a backend speaks.
type Dialect string

// The backend dialects.
const (
	// OpenAI is the OpenAI API (chat completions, completions, responses,
	// embeddings), spoken by the OpenAI-compatible engines and clouds. It is
	// the default.
	OpenAI Dialect = "openai"
	// Anthropic is Anthropic's Messages API.
	Anthropic Dialect = "anthropic"
)

// Valid reports whether d is a known dialect.
func (d Dialect) Valid() bool { return d == OpenAI || d == Anthropic }

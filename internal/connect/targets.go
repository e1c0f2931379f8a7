package connect

import (
	"encoding/json"
	"strconv"
	"time"
)

const noKeyNote = "no key given: pass --api-key or set " + KeyEnv + " (llmgate keys create issues one)"

// claudeCode sets the env block of Claude Code's settings.json. Claude Code
// appends /v1/messages to ANTHROPIC_BASE_URL, so the root is written, and
// ANTHROPIC_AUTH_TOKEN is used because it is sent as "Authorization: Bearer",
// which gateways accept, rather than ANTHROPIC_API_KEY's x-api-key.
//
// When the model's context length is known it also sets
// CLAUDE_CODE_MAX_OUTPUT_TOKENS (see OutputLimit; Claude Code otherwise asks
// for 32000, more than a 32k model can give) and
// CLAUDE_CODE_AUTO_COMPACT_WINDOW (the context, so Claude Code compacts in
// time instead of assuming a 200k window).
func claudeCode(before []byte, ep endpoint, z *sizes) ([]byte, []string, error) {
	doc, err := parseObject(before)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	err = doc.child("env", func(env *object) error {
		if err := env.set("ANTHROPIC_BASE_URL", ep.root); err != nil {
			return err
		}
		if ep.key != "" {
			if err := env.set("ANTHROPIC_AUTH_TOKEN", ep.key); err != nil {
				return err
			}
		} else if _, ok := env.get("ANTHROPIC_AUTH_TOKEN"); !ok {
			notes = append(notes, noKeyNote)
		}
		if _, ok := env.get("ANTHROPIC_API_KEY"); ok {
			notes = append(notes, "env.ANTHROPIC_API_KEY is also set and is sent as x-api-key; remove it unless the gateway should see that key")
		}
		if ep.model == "" && !z.lists("claude-") {
			notes = append(notes, "no --model given: Claude Code asks for Anthropic model names (claude-…), which the gateway answers with 404 model_not_found unless it serves them; rerun with --model"+z.listed())
		}
		if ep.model != "" {
			if err := env.set("ANTHROPIC_MODEL", ep.model); err != nil {
				return err
			}
			// Claude Code sends background work (titles, summaries) to the
			// Haiku-class model; point that at the gateway's model too.
			if err := env.set("ANTHROPIC_DEFAULT_HAIKU_MODEL", ep.model); err != nil {
				return err
			}
			return claudeLimits(env, z)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	out, err := doc.render()
	notes = append(notes, "restart Claude Code; /status shows the base URL in use")
	return out, notes, err
}

// codex sets model_provider (and model) and a [model_providers.llmgate]
// table with wire_api = "responses", the only wire API current Codex
// releases accept. The key stays in the environment: Codex reads env_key.
// A known context length becomes model_context_window, so Codex compacts
// before the model's context is full (it assumes 272k for unknown models).
func codex(before []byte, ep endpoint, z *sizes) ([]byte, []string, error) {
	top := []tomlKV{{"model_provider", ProviderID}}
	if ep.model != "" {
		top = append(top, tomlKV{"model", ep.model})
		z.note("%s", z.contextOf(z.chosen))
		if n := z.chosen.ContextLength; n > 0 {
			top = append(top, tomlKV{"model_context_window", int64(n)})
			z.note("model_context_window = %d", n)
		}
	}
	table := []tomlKV{
		{"name", ProviderID},
		{"base_url", ep.openai},
		{"env_key", KeyEnv},
		{"wire_api", "responses"},
	}
	out, err := editTOML(before, top, "model_providers."+ProviderID, table)
	if err != nil {
		return nil, nil, err
	}
	notes := []string{"Codex reads the key from $" + KeyEnv + ": export " + KeyEnv + "=<key> in the shell that starts codex"}
	if ep.model == "" {
		notes = append(notes, "no --model given: set model in config.toml or start codex with --model"+z.listed())
	}
	return out, notes, nil
}

// ClineTimeout is the MCP request timeout written for Cline, in seconds.
// Cline's default of 60 is shorter than a local model can take to answer
// through an llmgate tool (a queue, a model load, a long answer).
const ClineTimeout = 300

// ClineProvider is the Cline CLI's provider for OpenAI-compatible APIs.
const ClineProvider = "openai-compatible"

// clineCLI configures the Cline CLI's OpenAI-compatible provider in its
// providers.json (the file `cline auth -p openai-compatible` writes:
// version 1, lastUsedProvider, and providers.<id>.settings with provider,
// apiKey, model and baseUrl, updatedAt, tokenSource) and makes it the
// provider cline uses. Other providers and settings are kept; updatedAt
// changes only when the settings do. With a known context length it sets
// contextWindow (Cline assumes 128k for this provider) and maxTokens.
func clineCLI(before []byte, ep endpoint, z *sizes, now time.Time) ([]byte, []string, error) {
	doc, err := parseObject(before)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	if err := doc.setDefault("version", 1); err != nil {
		return nil, nil, err
	}
	err = doc.child("providers", func(ps *object) error {
		return ps.child(ClineProvider, func(p *object) error {
			old, _ := p.get("settings")
			err := p.child("settings", func(st *object) error {
				if err := st.set("provider", ClineProvider); err != nil {
					return err
				}
				if err := st.set("baseUrl", ep.openai); err != nil {
					return err
				}
				if ep.key != "" {
					if err := st.set("apiKey", ep.key); err != nil {
						return err
					}
				} else if _, ok := st.get("apiKey"); !ok {
					notes = append(notes, noKeyNote)
				}
				if ep.model == "" {
					notes = append(notes, "no --model given: rerun with --model, or start cline with -m MODEL"+z.listed())
					return nil
				}
				if err := st.set("model", ep.model); err != nil {
					return err
				}
				m := z.chosen
				if m.ContextLength <= 0 {
					z.note("%s; Cline will assume a 128k context", z.contextOf(m))
					return nil
				}
				z.note("%s", z.contextOf(m))
				if err := st.set("contextWindow", m.ContextLength); err != nil {
					return err
				}
				if kept, ok := keptLimit(st, "maxTokens", m.ContextLength); ok {
					z.note("maxTokens %d (kept from the file)", kept)
					return nil
				}
				out := OutputLimit(m)
				z.note("maxTokens %s", outputRule(m, out))
				return st.set("maxTokens", out)
			})
			if err != nil {
				return err
			}
			if cur, _ := p.get("settings"); !sameJSON(old, cur) {
				if err := p.set("updatedAt", now.UTC().Format("2006-01-02T15:04:05.000Z")); err != nil {
					return err
				}
				return p.set("tokenSource", "manual")
			}
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	if err := doc.set("lastUsedProvider", ClineProvider); err != nil {
		return nil, nil, err
	}
	out, err := doc.render()
	notes = append(notes, "cline now uses the gateway: run cline \"...\" (cline auth shows the provider)")
	return out, notes, err
}

// clineMCP adds an mcpServers entry that starts `llmgate mcp`, which exposes
// the gateway's models as MCP tools. Settings of the entry the user chose
// (disabled, autoApprove, timeout) are kept; the command is always
// rewritten, to an absolute path when one is known.
func clineMCP(before []byte, ep endpoint, command string, z *sizes) ([]byte, []string, error) {
	doc, err := parseObject(before)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	err = doc.child("mcpServers", func(servers *object) error {
		return servers.child(ProviderID, func(s *object) error {
			if err := s.set("command", command); err != nil {
				return err
			}
			if err := s.set("args", []string{"mcp"}); err != nil {
				return err
			}
			if err := s.child("env", func(env *object) error {
				if err := env.set("LLMGATE_BASE_URL", ep.openai); err != nil {
					return err
				}
				if ep.key != "" {
					if err := env.set("LLMGATE_API_KEY", ep.key); err != nil {
						return err
					}
				} else if _, ok := env.get("LLMGATE_API_KEY"); !ok {
					notes = append(notes, noKeyNote)
				}
				if ep.model != "" {
					return env.set("LLMGATE_MODEL", ep.model)
				}
				return nil
			}); err != nil {
				return err
			}
			if err := s.setDefault("disabled", false); err != nil {
				return err
			}
			if raw, ok := s.get("timeout"); ok {
				z.note("timeout %s s (kept from the file)", raw)
			} else {
				z.note("timeout %d s (Cline's default of 60 s is short for a local model answering through a tool)", ClineTimeout)
				if err := s.set("timeout", ClineTimeout); err != nil {
					return err
				}
			}
			return s.setDefault("autoApprove", []string{})
		})
	})
	if err != nil {
		return nil, nil, err
	}
	out, err := doc.render()
	notes = append(notes, "Cline reloads MCP settings on save; check the MCP Servers panel for llmgate")
	return out, notes, err
}

// opencode adds a provider using @ai-sdk/openai-compatible whose apiKey is
// read from the environment with opencode's {env:VAR} substitution. Each
// model (the chosen one and every model the gateway lists) gets an entry;
// one whose context length is known gets limit.context and limit.output
// (see OutputLimit): without them opencode asks for 32000 output tokens,
// which a 32k model refuses, and never compacts. A limit.output the file
// already has is kept when it leaves at least half the context for input.
func opencode(before []byte, ep endpoint, z *sizes) ([]byte, []string, error) {
	doc, err := parseObject(before)
	if err != nil {
		return nil, nil, err
	}
	if err := doc.setDefault("$schema", "https://opencode.ai/config.json"); err != nil {
		return nil, nil, err
	}
	err = doc.child("provider", func(providers *object) error {
		return providers.child(ProviderID, func(p *object) error {
			if err := p.set("npm", "@ai-sdk/openai-compatible"); err != nil {
				return err
			}
			if err := p.setDefault("name", "llmgate"); err != nil {
				return err
			}
			if err := p.child("options", func(o *object) error {
				if err := o.set("baseURL", ep.openai); err != nil {
					return err
				}
				return o.set("apiKey", "{env:"+KeyEnv+"}")
			}); err != nil {
				return err
			}
			return p.child("models", func(models *object) error {
				for _, info := range z.forModels() {
					if err := models.child(info.ID, func(e *object) error { return opencodeModel(e, info, z) }); err != nil {
						return err
					}
				}
				return nil
			})
		})
	})
	if err != nil {
		return nil, nil, err
	}
	notes := []string{"opencode reads the key from $" + KeyEnv + ": export " + KeyEnv + "=<key> before starting it"}
	if ep.model != "" {
		if err := doc.set("model", ProviderID+"/"+ep.model); err != nil {
			return nil, nil, err
		}
	} else {
		notes = append(notes, "no --model given: add models under provider.llmgate.models or rerun with --model")
	}
	out, err := doc.render()
	return out, notes, err
}

// claudeLimits sets Claude Code's output and compaction limits from the
// chosen model's context length.
func claudeLimits(env *object, z *sizes) error {
	m := z.chosen
	if m.ContextLength <= 0 {
		z.note("%s; Claude Code will ask for 32000 output tokens and assume a 200k context", z.contextOf(m))
		return nil
	}
	z.note("%s", z.contextOf(m))
	out := OutputLimit(m)
	if kept, ok := keptLimit(env, "CLAUDE_CODE_MAX_OUTPUT_TOKENS", m.ContextLength); ok {
		z.note("CLAUDE_CODE_MAX_OUTPUT_TOKENS %d (kept from the file)", kept)
	} else {
		z.note("CLAUDE_CODE_MAX_OUTPUT_TOKENS %s", outputRule(m, out))
		if err := env.set("CLAUDE_CODE_MAX_OUTPUT_TOKENS", strconv.Itoa(out)); err != nil {
			return err
		}
	}
	z.note("CLAUDE_CODE_AUTO_COMPACT_WINDOW %d (the context length)", m.ContextLength)
	return env.set("CLAUDE_CODE_AUTO_COMPACT_WINDOW", strconv.Itoa(m.ContextLength))
}

// opencodeModel fills one entry of provider.llmgate.models.
func opencodeModel(e *object, m ModelInfo, z *sizes) error {
	if err := e.setDefault("name", m.ID); err != nil {
		return err
	}
	if m.ContextLength <= 0 {
		z.note("%s; no limit written for it, so opencode will ask for 32000 output tokens", z.contextOf(m))
		return nil
	}
	z.note("%s", z.contextOf(m))
	return e.child("limit", func(l *object) error {
		if err := l.set("context", m.ContextLength); err != nil {
			return err
		}
		if kept, ok := keptLimit(l, "output", m.ContextLength); ok {
			z.note("limit.output of %s: %d (kept from the file)", m.ID, kept)
			return nil
		}
		out := OutputLimit(m)
		z.note("limit.output of %s: %s", m.ID, outputRule(m, out))
		return l.set("output", out)
	})
}

// keptLimit returns an output limit already in the file when it leaves at
// least half the context for input; a larger one is replaced.
func keptLimit(o *object, key string, context int) (int, bool) {
	raw, ok := o.get(key)
	if !ok {
		return 0, false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(s)
	}
	n := positiveInt(raw)
	return n, n > 0 && n <= context/2
}

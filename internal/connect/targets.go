package connect

const noKeyNote = "no key given: pass --api-key or set " + KeyEnv + " (llmgate keys create issues one)"

// claudeCode sets the env block of Claude Code's settings.json. Claude Code
// appends /v1/messages to ANTHROPIC_BASE_URL, so the root is written, and
// ANTHROPIC_AUTH_TOKEN is used because it is sent as "Authorization: Bearer",
// which gateways accept, rather than ANTHROPIC_API_KEY's x-api-key.
func claudeCode(before []byte, ep endpoint) ([]byte, []string, error) {
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
		if ep.model != "" {
			if err := env.set("ANTHROPIC_MODEL", ep.model); err != nil {
				return err
			}
			// Claude Code sends background work (titles, summaries) to the
			// Haiku-class model; point that at the gateway's model too.
			if err := env.set("ANTHROPIC_DEFAULT_HAIKU_MODEL", ep.model); err != nil {
				return err
			}
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
func codex(before []byte, ep endpoint) ([]byte, []string, error) {
	top := []tomlKV{{"model_provider", ProviderID}}
	if ep.model != "" {
		top = append(top, tomlKV{"model", ep.model})
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
		notes = append(notes, "no --model given: set model in config.toml or start codex with --model")
	}
	return out, notes, nil
}

// cline adds an mcpServers entry that starts `llmgate mcp`, which exposes
// the gateway's models as MCP tools. Settings of the entry the user chose
// (disabled, autoApprove, timeout) are kept.
func cline(before []byte, ep endpoint, command string) ([]byte, []string, error) {
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
// read from the environment with opencode's {env:VAR} substitution.
func opencode(before []byte, ep endpoint) ([]byte, []string, error) {
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
			return p.child("models", func(m *object) error {
				if ep.model == "" {
					return nil
				}
				if _, ok := m.get(ep.model); ok {
					return nil
				}
				return m.set(ep.model, map[string]string{"name": ep.model})
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

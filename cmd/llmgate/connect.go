package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"llmgate/internal/connect"
)

// newConnectCmd writes a client tool's configuration pointing at the gateway.
func newConnectCmd() *cobra.Command {
	var (
		o     connect.Options
		print bool
	)
	var names []string
	for _, t := range connect.Targets {
		names = append(names, string(t))
	}
	cmd := &cobra.Command{
		Use:   "connect " + strings.Join(names, "|"),
		Short: "Write a client's configuration (Claude Code, Codex, Cline, opencode) pointing at the gateway",
		Long: `Write a coding tool's configuration so it uses the gateway, in the tool's current format:

  claude-code  ~/.claude/settings.json env: ANTHROPIC_BASE_URL (no /v1), ANTHROPIC_AUTH_TOKEN, ANTHROPIC_MODEL
  codex        ~/.codex/config.toml ($CODEX_HOME): model_provider = "llmgate" and [model_providers.llmgate]
               with base_url, env_key = "LLMGATE_API_KEY", wire_api = "responses"
  cline        cline_mcp_settings.json: an mcpServers entry that runs "llmgate mcp"
  opencode     ~/.config/opencode/opencode.json: provider "llmgate" (@ai-sdk/openai-compatible)
  env          prints shell exports: eval "$(llmgate connect env)"

Existing settings are kept; the old file is copied to FILE.bak-<UTC time> before
it changes; a file that already says the same is left alone, so running connect
twice changes nothing. Files that are not valid JSON or TOML are never touched.
Defaults: --base-url from LLMGATE_BASE_URL or http://127.0.0.1:4000, --api-key
from LLMGATE_API_KEY, --model from LLMGATE_MODEL.`,
		Example: `  llmgate connect claude-code --api-key sk-lg-... --model qwen2.5-7b-instruct
  llmgate connect codex --print
  eval "$(llmgate connect env)"`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("connect needs one target: %s", strings.Join(names, ", "))
			}
			return nil
		},
		ValidArgs: names,
		RunE: func(cmd *cobra.Command, args []string) error {
			t := connect.Target(args[0])
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if t == connect.Env {
				s, err := connect.Exports(o)
				if err != nil {
					return err
				}
				_, err = fmt.Fprint(out, s)
				return err
			}
			if o.Command == "" {
				o.Command = selfCommand()
			}
			if print {
				c, err := connect.Plan(t, o)
				if err != nil {
					return err
				}
				state := "would change"
				if !c.Changed {
					state = "is already up to date"
				}
				fmt.Fprintf(errOut, "# %s %s\n", c.Path, state)
				for _, n := range c.Notes {
					fmt.Fprintf(errOut, "# note: %s\n", n)
				}
				_, err = out.Write(c.After)
				return err
			}
			c, err := connect.Apply(t, o)
			if err != nil {
				return err
			}
			switch {
			case !c.Changed:
				fmt.Fprintf(out, "%s is already up to date; nothing written\n", c.Path)
			case c.Backup != "":
				fmt.Fprintf(out, "wrote %s (previous version saved as %s)\n", c.Path, c.Backup)
			default:
				fmt.Fprintf(out, "wrote %s\n", c.Path)
			}
			for _, n := range c.Notes {
				fmt.Fprintf(out, "note: %s\n", n)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.BaseURL, "base-url", "", "Base URL of the OpenAI-compatible API the tool calls (normally the gateway), with or without /v1; when not given, $LLMGATE_BASE_URL, else "+connect.DefaultBaseURL)
	f.StringVar(&o.APIKey, "api-key", "", "API key the tool sends (a virtual key of the gateway); when not given, $LLMGATE_API_KEY")
	f.StringVar(&o.Model, "model", "", "Model the tool should use; when not given, $LLMGATE_MODEL")
	f.BoolVar(&print, "print", false, "Print the resulting file instead of writing it")
	f.StringVar(&o.Path, "file", "", "Write this file instead of the tool's default (e.g. .claude/settings.json in a project)")
	return cmd
}

// selfCommand is the executable Cline should start: this binary's absolute
// path, since editors do not inherit the shell's PATH, unless it is a
// temporary "go run" build.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "llmgate"
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	if strings.Contains(exe, "go-build") || strings.HasPrefix(exe, os.TempDir()) {
		return "llmgate"
	}
	return exe
}

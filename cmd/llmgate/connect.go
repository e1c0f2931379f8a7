package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/connect"
)

// keyGiven reports whether connect has a key to check: --api-key or
// $LLMGATE_API_KEY.
func keyGiven(o connect.Options) bool {
	return strings.TrimSpace(o.APIKey) != "" || strings.TrimSpace(os.Getenv(connect.KeyEnv)) != ""
}

// newConnectCmd writes a client tool's configuration pointing at the gateway.
func newConnectCmd() *cobra.Command {
	var (
		o       connect.Options
		print   bool
		offline bool
	)
	var names []string
	for _, t := range connect.Targets {
		names = append(names, string(t))
	}
	cmd := &cobra.Command{
		Use:   "connect " + strings.Join(names, "|"),
		Short: "Write a client's configuration (Claude Code, Codex, Cline CLI, opencode) pointing at the gateway",
		Long: `Write a coding tool's configuration so it uses the gateway, in the tool's current format:

  claude-code  ~/.claude/settings.json env: ANTHROPIC_BASE_URL (no /v1), ANTHROPIC_AUTH_TOKEN, ANTHROPIC_MODEL
  codex        ~/.codex/config.toml ($CODEX_HOME): model_provider = "llmgate" and [model_providers.llmgate]
               with base_url, env_key = "LLMGATE_API_KEY", wire_api = "responses"
  cline        the Cline CLI's ~/.cline/data/settings/providers.json: its openai-compatible
               provider (baseUrl, apiKey, model) made the one cline uses
  cline-mcp    the Cline extension's cline_mcp_settings.json: an mcpServers entry that runs "llmgate mcp"
  opencode     ~/.config/opencode/opencode.json: provider "llmgate" (@ai-sdk/openai-compatible)
  env          prints shell exports: eval "$(llmgate connect env)"

Existing settings are kept; the old file is copied to FILE.bak-<UTC time> before
it changes; a file that already says the same is left alone, so running connect
twice changes nothing. Files that are not valid JSON or TOML are never touched.
A key the gateway refuses (401 or 403 on GET /v1/models) is an error and
nothing is written.
Defaults: --base-url from LLMGATE_BASE_URL or http://127.0.0.1:4000, --api-key
from LLMGATE_API_KEY, --model from LLMGATE_MODEL, else the gateway's only model
when its /v1/models lists one (with several, connect names them).

Context length: connect reads the gateway's GET /v1/models (with the key) and
takes each model's context length from max_model_len (vLLM), else
context_window, else context_length; --context-length N sets it for --model;
--offline skips the request. With a known context length it writes
  opencode     limit.context and limit.output for every model the gateway lists
  claude-code  CLAUDE_CODE_MAX_OUTPUT_TOKENS and CLAUDE_CODE_AUTO_COMPACT_WINDOW
  codex        model_context_window
  cline        contextWindow and maxTokens
The output limit is min(context/4, 32000, the model's max_output_tokens if
listed): 8192 on a 32k model, leaving 24k tokens for the prompt. An output
limit already in the file is kept if it is at most half the context. Without a
context length no limit is written and connect says so.

cline-mcp gets the absolute path of this llmgate (or llmgate on PATH when
running under "go run") and a 300 s timeout unless the entry has one. connect
prints what it assumed.`,
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
			if !offline && t != connect.ClineMCP {
				ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
				o.Models, o.ModelsErr = connect.FetchModels(ctx, o)
				cancel()
				// A key the gateway refuses would be written into a config
				// that fails on its first request: stop here instead.
				var se *connect.StatusError
				if errors.As(o.ModelsErr, &se) && se.Refused() && keyGiven(o) {
					return fmt.Errorf("the gateway refused the API key (%d %s from %s); nothing was written: "+
						"pass a key it accepts with --api-key or $LLMGATE_API_KEY ('llmgate keys create' issues one), or --offline to write it anyway",
						se.Status, http.StatusText(se.Status), se.URL)
				}
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
				for _, a := range c.Assumed {
					fmt.Fprintf(errOut, "# assumed: %s\n", a)
				}
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
			for _, a := range c.Assumed {
				fmt.Fprintf(out, "assumed: %s\n", a)
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
	f.IntVar(&o.ContextLength, "context-length", 0, "Context length of --model in tokens; when not given, read from the gateway's /v1/models")
	f.BoolVar(&offline, "offline", false, "Do not read the gateway's /v1/models (no context lengths unless --context-length)")
	f.StringVar(&o.Command, "command", "", "Cline-mcp: the llmgate executable to start; when not given, this one's absolute path")
	return cmd
}

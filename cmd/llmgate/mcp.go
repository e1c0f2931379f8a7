package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	mcpserver "llmgate/internal/mcp"
)

// newMCPCmd returns "llmgate mcp": the models behind an OpenAI-compatible
// endpoint as MCP tools, spoken over stdin/stdout for clients such as Cline.
func newMCPCmd() *cobra.Command {
	var (
		cfg      mcpserver.Config
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the models behind an endpoint as MCP tools over stdio (list_models, chat, compare)",
		Long: `Serve the models behind an OpenAI-compatible endpoint (llmgate serve, vLLM, SGLang,
llama.cpp, Ollama, a cloud API) as Model Context Protocol tools over stdin/stdout:

  list_models  the models the endpoint serves
  chat         ask one model; returns the answer with tokens, TTFT and tokens/s
  compare      ask 2-4 models the same prompt at once; answers and figures side by side

MCP clients start this command themselves. Configure it with the environment
(flags win): LLMGATE_BASE_URL (default http://127.0.0.1:4000, with or without /v1),
LLMGATE_API_KEY, LLMGATE_MODEL (default model for chat), LLMGATE_TIMEOUT.
Logs go to stderr; stdout carries the protocol only.`,
		Example: `  # Cline's cline_mcp_settings.json ("llmgate connect cline-mcp" writes it); timeout is
  # Cline's per-call limit in seconds (default 60), kept above --timeout
  {"mcpServers":{"llmgate":{"command":"llmgate","args":["mcp"],
    "env":{"LLMGATE_BASE_URL":"http://127.0.0.1:4000/v1","LLMGATE_API_KEY":"sk-lg-...","LLMGATE_MODEL":"qwen3-8b"},
    "timeout":180}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: use debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if !cmd.Flags().Changed("timeout") {
				cfg.Timeout = 0 // let LLMGATE_TIMEOUT decide, then the default
			} else if cfg.Timeout <= 0 {
				return errors.New("--timeout must be positive, e.g. 120s")
			}
			if err := cfg.FromEnv(os.Getenv); err != nil {
				return err
			}
			// The SDK narrates every session at info; keep that for debugging.
			sdkLevel := max(level, slog.LevelWarn)
			if level <= slog.LevelDebug {
				sdkLevel = level
			}
			sdkLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: sdkLevel}))
			srv, err := mcpserver.New(cfg, currentBuild().String(), log, sdkLog)
			if err != nil {
				return err
			}
			if fi, err := os.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				fmt.Fprintln(os.Stderr, "llmgate mcp speaks the Model Context Protocol on stdin/stdout; add it to an MCP client (see llmgate mcp --help) rather than typing here.")
			}
			base, _ := mcpserver.NormalizeBaseURL(cfg.BaseURL)
			log.Info("llmgate mcp: serving tools over stdio", "base_url", base, "default_model", cfg.Model,
				"api_key_set", cfg.APIKey != "", "timeout", cfg.Timeout)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Not the SDK's own stdio transport: a line over its limit ends
			// its session, and with it this process.
			err = srv.Run(ctx, mcpserver.StdioTransport(os.Stdin, os.Stdout, 0, log))
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("mcp session: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.BaseURL, "base-url", "", "Base URL of the OpenAI-compatible API whose models become tools; when not given, $"+mcpserver.EnvBaseURL+", else "+mcpserver.DefaultBaseURL)
	f.StringVar(&cfg.APIKey, "api-key", "", "API key sent as a bearer token; when not given, $"+mcpserver.EnvAPIKey+" (prefer the environment: flags show in ps)")
	f.StringVar(&cfg.Model, "model", "", "Default model for chat; when not given, $"+mcpserver.EnvModel)
	f.DurationVar(&cfg.Timeout, "timeout", mcpserver.DefaultTimeout, "Time-out of one upstream request; $"+mcpserver.EnvTimeout+" overrides the default")
	f.StringVar(&logLevel, "log-level", "info", "Stderr log level: debug, info, warn or error")
	return cmd
}

package main

import (
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/doctor"
)

// newDoctorCmd diagnoses an OpenAI- or Anthropic-compatible endpoint.
func newDoctorCmd() *cobra.Command {
	var (
		o      doctor.Options
		format formatFlag
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Diagnose an OpenAI- or Anthropic-compatible endpoint and the clients pointing at it",
		Long: `Diagnose an OpenAI- or Anthropic-compatible endpoint (llmgate, vLLM, SGLang,
llama.cpp, Ollama or a hosted gateway) the way a client reaches it, and print a
checklist: ✓ passed, ! warning, ✗ failed, each problem with a one-sentence fix.

Checks: key and URL variables (empty, blank-padded, quoted, "Bearer"-prefixed);
base URL shape (/v1/v1, missing /v1, endpoint paths, query strings, trailing
slash, http to remote hosts); proxy variables and whether this URL goes through
the proxy (retrying directly when the proxy fails); DNS, TCP and TLS with
timings; authentication (missing key, wrong scheme, 401 versus 403, x-api-key);
the model list and nearest names for an unknown model; a chat completion; a 200
whose body has no choices; streaming, [DONE] and usage; the Anthropic Messages
API and its stream; one request's TTFT and decode rate; and the Claude Code,
Codex, Cline and opencode configuration files, compared with this endpoint.

Defaults come from LLMGATE_BASE_URL / OPENAI_BASE_URL / OPENAI_API_BASE /
ANTHROPIC_BASE_URL, the key variable of the same family (LLMGATE_API_KEY,
OPENAI_API_KEY, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_API_KEY) and LLMGATE_MODEL /
OPENAI_MODEL / ANTHROPIC_MODEL; without a model the first listed one is tested.

Exit status: 0 when no check failed (warnings do not fail), 1 otherwise.`,
		Example: `  llmgate doctor
  llmgate doctor --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
  llmgate doctor --format json | jq '.checks[] | select(.status=="fail")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := format.check(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			r := doctor.Run(ctx, o)
			out := cmd.OutOrStdout()
			var err error
			if format.json() {
				err = r.WriteJSON(out)
			} else {
				err = r.WriteText(out)
			}
			if err != nil {
				return err
			}
			if !r.OK {
				return fmt.Errorf("doctor: %d of %d checks failed (%s)", r.Failed, len(r.Checks), r.Summary())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.BaseURL, "base-url", "", "Base URL of the OpenAI-compatible API to diagnose, e.g. http://127.0.0.1:4000/v1; when not given, $LLMGATE_BASE_URL, $OPENAI_BASE_URL, $OPENAI_API_BASE or $ANTHROPIC_BASE_URL")
	f.StringVar(&o.APIKey, "api-key", "", "API key; when not given, the key variable of the base URL's family: $LLMGATE_API_KEY, $OPENAI_API_KEY, $ANTHROPIC_AUTH_TOKEN or $ANTHROPIC_API_KEY (prefer the environment: flags show in ps)")
	f.StringVar(&o.Model, "model", "", "Model to test; when not given, $LLMGATE_MODEL, $OPENAI_MODEL or $ANTHROPIC_MODEL, else the first listed")
	format.register(f, "json")
	f.BoolVar(&o.RequireAnthropic, "anthropic", false, "Fail, not warn, when the Anthropic Messages endpoint is missing")
	f.BoolVar(&o.SkipClients, "no-clients", false, "Do not read client configuration files")
	f.DurationVar(&o.Timeout, "timeout", 20*time.Second, "Time-out for each generation request (connection steps use at most 5s)")
	return cmd
}

package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/usage"
)

func newUsageCmd() *cobra.Command {
	var d dbFlags
	var since, by, key, model, format string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show usage per key and model: requests, errors, tokens, latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			age, err := parseAge(since)
			if err != nil {
				return fmt.Errorf("--since: %w", err)
			}
			st, err := d.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			rows, err := st.Summary(ctx, usage.Filter{Since: time.Now().Add(-age), KeyID: key, Model: model, GroupBy: splitList(by)})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch format {
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if rows == nil {
					rows = []usage.SummaryRow{}
				}
				return enc.Encode(rows)
			case "csv":
				w := csv.NewWriter(out)
				_ = w.Write([]string{"key_id", "key_name", "model", "backend", "day", "requests", "errors", "prompt_tokens", "completion_tokens", "cost_usd", "estimated_records", "p50_latency_ms", "p95_latency_ms"})
				for _, r := range rows {
					_ = w.Write([]string{r.KeyID, r.KeyName, r.Model, r.Backend, r.Day, i64(r.Requests), i64(r.Errors), i64(r.PromptTokens),
						i64(r.CompletionTokens), f64(r.CostUSD), i64(r.Estimated), f64(r.P50LatencyMS), f64(r.P95LatencyMS)})
				}
				w.Flush()
				return w.Error()
			case "table", "":
			default:
				return fmt.Errorf("--format must be table, json or csv")
			}
			if len(rows) == 0 {
				fmt.Fprintf(out, "No requests in the last %s.\n", since)
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "KEY\tMODEL\tBACKEND\tDAY\tREQUESTS\tERRORS\tPROMPT TOK\tCOMPL TOK\tP50 MS\tP95 MS\t")
			for _, r := range rows {
				k := r.KeyName
				if k == "" {
					k = r.KeyID
				}
				est := ""
				if r.Estimated > 0 {
					est = "~"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s%d\t%s%d\t%.1f\t%.1f\t\n", orDash(k), orDash(r.Model), orDash(r.Backend), orDash(r.Day),
					r.Requests, r.Errors, est, r.PromptTokens, est, r.CompletionTokens, r.P50LatencyMS, r.P95LatencyMS)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(out, "(~ = includes token counts estimated locally because the backend reported none)")
			return nil
		},
	}
	d.register(cmd)
	cmd.Flags().StringVar(&since, "since", "24h", "how far back: 24h, 7d, 90m")
	cmd.Flags().StringVar(&by, "by", "key,model", "group by: key, model, backend, day (comma-separated)")
	cmd.Flags().StringVar(&key, "key", "", "only this key id")
	cmd.Flags().StringVar(&model, "model", "", "only this model")
	cmd.Flags().StringVar(&format, "format", "table", "table, json or csv")
	return cmd
}

func i64(v int64) string   { return strconv.FormatInt(v, 10) }
func f64(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

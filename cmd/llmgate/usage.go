package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"llmgate/internal/admin"
	"llmgate/internal/usage"
)

func newUsageCmd() *cobra.Command {
	var d dbFlags
	var since, until, by, key, model, format string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show usage by key, model, backend or day: requests, errors, tokens, cost, p50/p95 latency",
		Long: "Summarize the usage ledger from the local database, or from a running gateway with --url.\n" +
			"Whole hours come from hourly rollups, so summaries stay fast on large ledgers; latency\n" +
			"percentiles come from a histogram and are within about 5% of the exact value.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" && format != "csv" {
				return fmt.Errorf("--format must be table, json or csv")
			}
			c, closeFn, err := d.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			q := admin.UsageQuery{Since: since, Until: until, By: splitList(by), Key: key, Model: model}
			return printUsage(cmd.Context(), c, q, format, cmd.OutOrStdout())
		},
	}
	d.register(cmd)
	cmd.Flags().StringVar(&since, "since", "24h", "how far back: 24h, 7d, 90m, or an RFC 3339 time")
	cmd.Flags().StringVar(&until, "until", "", "end of the range (default now): a duration back from now or an RFC 3339 time")
	cmd.Flags().StringVar(&by, "by", "key,model", "group by: key, model, backend, day (comma-separated)")
	cmd.Flags().StringVar(&key, "key", "", "only this key id")
	cmd.Flags().StringVar(&model, "model", "", "only this model")
	cmd.Flags().StringVar(&format, "format", "table", "table, json or csv")
	return cmd
}

func printUsage(ctx context.Context, c *admin.Client, q admin.UsageQuery, format string, out io.Writer) error {
	if format == "csv" {
		return c.UsageCSV(ctx, q, out)
	}
	rows, err := c.Usage(ctx, q)
	if err != nil {
		return err
	}
	if format == "json" {
		if rows == nil {
			rows = []usage.SummaryRow{}
		}
		return writeJSONOut(out, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "No requests since %s.\n", q.Since)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "KEY\tMODEL\tBACKEND\tDAY\tREQUESTS\tERRORS\tPROMPT TOK\tCOMPL TOK\tCOST USD\tP50 MS\tP95 MS\t")
	est := false
	for _, r := range rows {
		k := r.KeyName
		if k == "" {
			k = r.KeyID
		}
		mark := ""
		if r.Estimated > 0 {
			mark, est = "~", true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s%d\t%s%d\t%.4f\t%.1f\t%.1f\t\n", orDash(k), orDash(r.Model), orDash(r.Backend), orDash(r.Day),
			r.Requests, r.Errors, mark, r.PromptTokens, mark, r.CompletionTokens, r.CostUSD, r.P50LatencyMS, r.P95LatencyMS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if est {
		fmt.Fprintln(out, "(~ = includes token counts estimated locally because the backend reported none)")
	}
	return nil
}

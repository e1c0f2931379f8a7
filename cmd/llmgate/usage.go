package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"llmgate/internal/admin"
	"llmgate/internal/usage"
)

func newUsageCmd() *cobra.Command {
	var d dbFlags
	var since, until, by, keyID, model, format string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show usage by key, model, backend or day: requests, errors, tokens, cost, p50/p95 latency",
		Long: `Summarize the usage ledger. Like 'llmgate keys', it asks the running gateway (--url,
else $LLMGATE_URL, else the config's listen address, else ` + defaultGatewayURL + `) with the
master key from --master-key or $LLMGATE_MASTER_KEY, and reads the database file when
no gateway answers (saying which file), or the one --database names.
Whole hours come from hourly rollups, so summaries stay fast on large ledgers; latency
percentiles come from a histogram and are within about 5% of the exact value.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" && format != "csv" {
				return fmt.Errorf("--format must be table, json or csv")
			}
			c, closeFn, err := d.client(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer closeFn()
			q := admin.UsageQuery{Since: since, Until: until, By: splitList(by), Key: keyID, Model: model}
			return printUsage(cmd.Context(), c, q, format, cmd.OutOrStdout())
		},
	}
	d.register(cmd.Flags())
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "24h", "How far back: 24h, 7d, 90m, or an RFC 3339 time")
	fl.StringVar(&until, "until", "", "End of the range, a duration back from now or an RFC 3339 time; when not given, now")
	fl.StringVar(&by, "by", "key,model", "Group by: key, model, backend, day (comma-separated)")
	fl.StringVar(&keyID, "key-id", "", "Only this key id (as 'llmgate keys list' shows it)")
	deprecatedAlias(fl, &keyID, "key", "key-id")
	fl.StringVar(&model, "model", "", "Only this model")
	fl.StringVar(&format, "format", "table", "Output format: table, json or csv")
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
	// Only the dimensions the rows are grouped by get a column.
	group := q.By
	if len(group) == 0 {
		group = []string{"key", "model"}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, g := range group {
		fmt.Fprint(tw, strings.ToUpper(g)+"\t")
	}
	fmt.Fprintln(tw, "REQUESTS\tERRORS\tPROMPT TOK\tCACHED TOK\tCOMPL TOK\tCOST USD\tP50 MS\tP95 MS\t")
	est := false
	for _, r := range rows {
		for _, g := range group {
			v := ""
			switch g {
			case "key":
				v = r.KeyName
				if v == "" {
					v = r.KeyID
				}
			case "model":
				v = r.Model
			case "backend":
				v = r.Backend
			case "day":
				v = r.Day
			}
			fmt.Fprint(tw, orDash(v)+"\t")
		}
		mark := ""
		if r.Estimated > 0 {
			mark, est = "~", true
		}
		fmt.Fprintf(tw, "%d\t%d\t%s%d\t%d\t%s%d\t%s\t%.1f\t%.1f\t\n",
			r.Requests, r.Errors, mark, r.PromptTokens, r.CachedTokens, mark, r.CompletionTokens, strings.TrimPrefix(usage.FormatUSD(r.CostUSD), "$"), r.P50LatencyMS, r.P95LatencyMS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if est {
		fmt.Fprintln(out, "(~ = includes token counts estimated locally because the backend reported none)")
	}
	return nil
}

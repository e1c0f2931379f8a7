package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/engine"
)

// enginesClient talks to a running gateway's engines admin API.
type enginesClient struct{ gatewayFlags }

func (c *enginesClient) register(cmd *cobra.Command) {
	c.gatewayFlags.register(cmd.PersistentFlags(), "$LLMGATE_URL, else "+defaultGatewayURL)
	deprecatedAlias(cmd.PersistentFlags(), &c.masterKey, "key", "master-key")
}

// do sends a request and decodes a JSON answer into out; errors carry the
// gateway's own message.
func (c *enginesClient) do(ctx context.Context, method, path string, out any) error {
	key := c.key()
	if key == "" {
		return fmt.Errorf("no master key: set LLMGATE_MASTER_KEY or pass --master-key")
	}
	url, explicit := c.resolveURL(nil)
	base := strings.TrimSuffix(strings.TrimSuffix(url, "/"), "/v1")
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return unreachable(base, explicit, err, "set --url")
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var env struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &env) == nil && env.Error.Message != "" {
			return fmt.Errorf("%s (HTTP %d)", env.Error.Message, resp.StatusCode)
		}
		return fmt.Errorf("gateway answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, out)
}

func newEnginesCmd() *cobra.Command {
	var c enginesClient
	var format formatFlag
	cmd := &cobra.Command{
		Use:   "engines",
		Short: "List, load, unload and read the logs of a running gateway's local engines",
		Long: `Manage the local engines (engines: in the config) of a running gateway through
its admin API. Needs the master key. Without a subcommand, lists the engines.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return listEngines(cmd, &c, format.json()) },
	}
	c.register(cmd)
	format.register(cmd.PersistentFlags(), "json")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error { return format.check() }

	list := &cobra.Command{
		Use:   "list",
		Short: "Show every engine: state, pid, port, uptime, models, last error",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return listEngines(cmd, &c, format.json()) },
	}
	var timeout time.Duration
	load := &cobra.Command{
		Use:   "load NAME",
		Short: "Start an engine (swapping out its group) and wait until it is ready",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return engineAction(cmd, &c, "load", args[0], timeout, format.json())
		},
	}
	load.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "Give up waiting after this long")
	unload := &cobra.Command{
		Use:   "unload NAME",
		Short: "Stop an engine once its requests in flight finish",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return engineAction(cmd, &c, "unload", args[0], 2*time.Minute, format.json())
		},
	}
	var lines int
	logs := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print an engine's recent output (stdout and stderr)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res struct {
				Lines []engine.Line `json:"lines"`
			}
			path := fmt.Sprintf("%s/%s/logs?lines=%d", engine.AdminPrefix, url.PathEscape(args[0]), lines)
			if err := c.do(cmd.Context(), http.MethodGet, path, &res); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if format.json() {
				return json.NewEncoder(out).Encode(res.Lines)
			}
			for _, l := range res.Lines {
				fmt.Fprintf(out, "%s %s\n", l.Time.Local().Format("15:04:05.000"), l.Text)
			}
			return nil
		},
	}
	logs.Flags().IntVarP(&lines, "lines", "n", 100, "Number of lines (0 = all kept)")
	cmd.AddCommand(list, load, unload, logs)
	return cmd
}

func listEngines(cmd *cobra.Command, c *enginesClient, asJSON bool) error {
	var res struct {
		Engines []engine.Status `json:"engines"`
	}
	if err := c.do(cmd.Context(), http.MethodGet, engine.AdminPrefix, &res); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res.Engines)
	}
	if len(res.Engines) == 0 {
		fmt.Fprintln(out, "No engines configured (add an engines: section to the gateway's config).")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tPID\tPORT\tUPTIME\tGROUP\tIN FLIGHT\tQUEUED\tMODELS\tLAST ERROR")
	for _, e := range res.Engines {
		pid, up := "-", "-"
		if e.PID != 0 {
			pid = fmt.Sprint(e.PID)
			up = (time.Duration(e.UptimeSeconds * float64(time.Second))).Round(time.Second).String()
		}
		last := e.LastError
		if len(last) > 80 {
			last = last[:80] + "…"
		}
		state := string(e.State)
		if e.Retired {
			state += " (removed by a reload)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Name, state, pid, e.Port, up, dashIfEmpty(e.Group),
			e.InFlight, e.Queued, strings.Join(e.Models, ","), dashIfEmpty(last))
	}
	return tw.Flush()
}

func engineAction(cmd *cobra.Command, c *enginesClient, action, name string, timeout time.Duration, asJSON bool) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	start := time.Now()
	var st engine.Status
	if err := c.do(ctx, http.MethodPost, fmt.Sprintf("%s/%s/%s", engine.AdminPrefix, url.PathEscape(name), action), &st); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(out).Encode(st)
	}
	switch action {
	case "load":
		fmt.Fprintf(out, "%s is %s (pid %d, port %d) after %s\n", st.Name, st.State, st.PID, st.Port, time.Since(start).Round(time.Millisecond))
	default:
		fmt.Fprintf(out, "%s is %s\n", st.Name, st.State)
	}
	return nil
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

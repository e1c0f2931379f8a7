package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/admin"
	"llmgate/internal/gateway"
	"llmgate/internal/usage"
)

// keySpecFlags are the settable fields of a key.
type keySpecFlags struct {
	name, owner, models, expires, period string
	objective                            string
	rpm, tpm, conc, priority             int
	budget                               float64
	metadata                             []string
}

func (f *keySpecFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "A name for the key (app or person)")
	fl.StringVar(&f.owner, "owner", "", "Owner or team")
	fl.StringVar(&f.models, "models", "", "Comma-separated allowed models; glob patterns allowed (empty: all)")
	fl.StringVar(&f.expires, "expires", "", "Lifetime such as 30d or 12h from now ('never' clears it)")
	fl.IntVar(&f.rpm, "rpm", 0, "Requests per minute (0 = unlimited)")
	fl.IntVar(&f.tpm, "tpm", 0, "Tokens per minute (0 = unlimited)")
	fl.IntVar(&f.conc, "max-concurrency", 0, "Concurrent requests (0 = unlimited)")
	fl.IntVar(&f.priority, "priority", 1, "Weight in a busy deployment's fair queue: priority 3 gets three turns to one of priority 1")
	fl.Float64Var(&f.budget, "budget", 0, "Budget in USD (0 = none)")
	fl.StringVar(&f.period, "budget-period", "", "Budget reset period: none, daily or monthly")
	fl.StringArrayVar(&f.metadata, "metadata", nil, "Metadata as key=value (repeatable)")
	fl.StringVar(&f.objective, "objective", "", "InferenceObjective sent as x-gateway-inference-objective to backends with inference_extension ('' clears it)")
}

// spec returns the fields whose flags were set.
func (f *keySpecFlags) spec(cmd *cobra.Command) (admin.KeySpec, error) {
	var s admin.KeySpec
	ch := cmd.Flags().Changed
	if ch("name") {
		s.Name = &f.name
	}
	if ch("owner") {
		s.Owner = &f.owner
	}
	if ch("models") {
		m := splitList(f.models)
		if m == nil {
			m = []string{}
		}
		s.Models = &m
	}
	if ch("rpm") {
		s.RPM = &f.rpm
	}
	if ch("tpm") {
		s.TPM = &f.tpm
	}
	if ch("max-concurrency") {
		s.MaxConcurrency = &f.conc
	}
	if ch("priority") {
		s.Priority = &f.priority
	}
	if ch("budget") {
		s.BudgetUSD = &f.budget
	}
	if ch("budget-period") {
		s.BudgetPeriod = &f.period
	}
	if ch("objective") {
		s.Objective = &f.objective
	}
	if ch("metadata") {
		m := map[string]string{}
		for _, kv := range f.metadata {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return s, fmt.Errorf("--metadata %q: use key=value", kv)
			}
			m[k] = v
		}
		s.Metadata = &m
	}
	if ch("expires") {
		var t time.Time
		if f.expires != "never" && f.expires != "" {
			dur, err := parseAge(f.expires)
			if err != nil {
				return s, fmt.Errorf("--expires: %w", err)
			}
			t = time.Now().Add(dur)
		}
		s.ExpiresAt = &t
	}
	return s, nil
}

func newKeysCmd() *cobra.Command {
	var d dbFlags
	cmd := &cobra.Command{Use: "keys", Short: "Manage virtual API keys (create, list, show, update, revoke, rotate)",
		Long: `Manage virtual API keys. The commands talk to the running gateway: --url, else
$LLMGATE_URL, else the listen address of the config (-c or $LLMGATE_CONFIG), else
` + defaultGatewayURL + `, with the master key from --master-key or $LLMGATE_MASTER_KEY.
A key created there works on its first request. When no gateway answers they work on
its database file instead (the config's database, else llmgate.db) and say which file;
--database FILE picks the database directly. Changes reach every running replica
within a second.`}
	d.register(cmd.PersistentFlags())
	var format formatFlag
	run := func(fn func(ctx context.Context, c *admin.Client, out io.Writer, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if err := format.check(); err != nil {
				return err
			}
			c, closeFn, err := d.client(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer closeFn()
			return fn(cmd.Context(), c, cmd.OutOrStdout(), args)
		}
	}

	var cf keySpecFlags
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a key; its secret is printed once",
		Args:  cobra.NoArgs,
	}
	create.RunE = run(func(ctx context.Context, c *admin.Client, out io.Writer, _ []string) error {
		spec, err := cf.spec(create)
		if err != nil {
			return err
		}
		is, err := c.CreateKey(ctx, spec)
		if err != nil {
			return err
		}
		return printIssued(out, is, "Created", format.json())
	})
	cf.register(create)

	list := &cobra.Command{Use: "list", Short: "List keys (never their secrets)", Args: cobra.NoArgs}
	list.RunE = run(func(ctx context.Context, c *admin.Client, out io.Writer, _ []string) error {
		ks, err := c.ListKeys(ctx)
		if err != nil {
			return err
		}
		if format.json() {
			return writeJSONOut(out, ks)
		}
		return printKeys(out, ks)
	})

	show := &cobra.Command{Use: "show ID", Short: "Show a key with its limits and spend in the current budget period", Args: cobra.ExactArgs(1)}
	show.RunE = run(func(ctx context.Context, c *admin.Client, out io.Writer, args []string) error {
		k, err := c.GetKey(ctx, args[0])
		if err != nil {
			return err
		}
		if format.json() {
			return writeJSONOut(out, k)
		}
		printKey(out, k)
		return nil
	})

	var uf keySpecFlags
	update := &cobra.Command{Use: "update ID", Short: "Change a key's name, models, limits, budget, metadata or expiry", Args: cobra.ExactArgs(1)}
	update.RunE = run(func(ctx context.Context, c *admin.Client, out io.Writer, args []string) error {
		spec, err := uf.spec(update)
		if err != nil {
			return err
		}
		k, err := c.UpdateKey(ctx, args[0], spec)
		if err != nil {
			return err
		}
		if format.json() {
			return writeJSONOut(out, k)
		}
		fmt.Fprintf(out, "Updated %s; running gateways apply it within a second.\n", k.ID)
		printKey(out, k)
		return nil
	})
	uf.register(update)

	revoke := &cobra.Command{Use: "revoke ID", Short: "Revoke a key; running gateways refuse it within a second", Args: cobra.ExactArgs(1)}
	revoke.RunE = run(func(ctx context.Context, c *admin.Client, out io.Writer, args []string) error {
		if _, err := c.RevokeKey(ctx, args[0]); err != nil {
			return err
		}
		fmt.Fprintf(out, "Revoked %s\n", args[0])
		return nil
	})

	rotate := &cobra.Command{Use: "rotate ID", Short: "Give a key a new secret (printed once); the old one stops working within a second", Args: cobra.ExactArgs(1)}
	rotate.RunE = run(func(ctx context.Context, c *admin.Client, out io.Writer, args []string) error {
		is, err := c.RotateKey(ctx, args[0])
		if err != nil {
			return err
		}
		return printIssued(out, is, "Rotated", format.json())
	})

	reset := &cobra.Command{
		Use:   "reset-master",
		Short: "Replace the stored master key with a new one (printed once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if d.url != "" {
				return errors.New("reset-master works on the database only (drop --url)")
			}
			ctx := cmd.Context()
			db, err := d.databaseName()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "llmgate: using the database %s\n", describeDatabase(db))
			st, err := gateway.OpenStore(ctx, db)
			if err != nil {
				return err
			}
			defer st.Close()
			secret, err := gateway.ResetMaster(ctx, st)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "New master key (shown once; restart running gateways):\n\n    %s\n\nLLMGATE_MASTER_KEY, when set, still takes precedence.\n", secret)
			return nil
		},
	}
	for _, c := range []*cobra.Command{create, list, show, update, rotate} {
		format.register(c.Flags(), "json")
	}
	cmd.AddCommand(create, list, show, update, revoke, rotate, reset)
	return cmd
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printIssued(out io.Writer, is *admin.Issued, verb string, asJSON bool) error {
	if asJSON {
		return writeJSONOut(out, map[string]any{"id": is.Key.ID, "name": is.Key.Name, "key": is.Secret, "models": is.Key.Models})
	}
	fmt.Fprintf(out, "%s key %s (%s). The secret is shown once; store it now:\n\n    %s\n\n", verb, is.Key.ID, orDash(is.Key.Name), is.Secret)
	if len(is.Key.Models) > 0 {
		fmt.Fprintf(out, "Allowed models: %s\n", strings.Join(is.Key.Models, ", "))
	}
	return nil
}

func printKey(out io.Writer, k *admin.Key) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	lim := func(n int) string {
		if n == 0 {
			return "unlimited"
		}
		return fmt.Sprint(n)
	}
	models := "all"
	if len(k.Models) > 0 {
		models = strings.Join(k.Models, ", ")
	}
	fmt.Fprintf(tw, "ID\t%s\nName\t%s\nOwner\t%s\nKey\t%s\nStatus\t%s\nModels\t%s\n", k.ID, orDash(k.Name), orDash(k.Owner), k.Hint, k.Status, models)
	fmt.Fprintf(tw, "RPM\t%s\nTPM\t%s\nMax concurrency\t%s\nPriority\t%d\n", lim(k.RPM), lim(k.TPM), lim(k.MaxConcurrency), k.Priority)
	if k.BudgetUSD > 0 {
		fmt.Fprintf(tw, "Budget\t$%.2f (%s)\n", k.BudgetUSD, k.BudgetPeriod)
	} else {
		fmt.Fprintf(tw, "Budget\tnone\n")
	}
	if k.SpentUSD != nil {
		src := ""
		if k.ReservedUSD == nil && k.BudgetUSD > 0 {
			// Read from the database file: a running gateway also counts
			// records not written yet and requests in flight.
			src = " (ledger)"
		}
		fmt.Fprintf(tw, "Spent this period\t%s%s\n", usage.FormatUSD(*k.SpentUSD), src)
	}
	if k.ReservedUSD != nil {
		fmt.Fprintf(tw, "Reserved in flight\t%s\n", usage.FormatUSD(*k.ReservedUSD))
		if k.SpentUSD != nil && k.BudgetUSD > 0 {
			fmt.Fprintf(tw, "Budget left\t%s\n", usage.FormatUSD(max(0, k.BudgetUSD-*k.SpentUSD-*k.ReservedUSD)))
		}
	}
	if k.Objective != "" {
		fmt.Fprintf(tw, "Objective\t%s\n", k.Objective)
	}
	fmt.Fprintf(tw, "Created\t%s\n", k.CreatedAt.Format(time.RFC3339))
	if k.ExpiresAt != nil {
		fmt.Fprintf(tw, "Expires\t%s\n", k.ExpiresAt.Format(time.RFC3339))
	}
	if k.RevokedAt != nil {
		fmt.Fprintf(tw, "Revoked\t%s\n", k.RevokedAt.Format(time.RFC3339))
	}
	if len(k.Metadata) > 0 {
		ks := make([]string, 0, len(k.Metadata))
		for m := range k.Metadata {
			ks = append(ks, m)
		}
		sort.Strings(ks)
		for _, m := range ks {
			fmt.Fprintf(tw, "Metadata %s\t%s\n", m, k.Metadata[m])
		}
	}
	_ = tw.Flush()
}

func printKeys(w io.Writer, ks []admin.Key) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKEY\tMODELS\tRPM\tTPM\tCONC\tBUDGET\tOBJECTIVE\tCREATED\tSTATUS")
	for _, k := range ks {
		status := k.Status
		if status == "active" && k.ExpiresAt != nil {
			status = "expires " + k.ExpiresAt.Format("2006-01-02")
		}
		models := "all"
		if len(k.Models) > 0 {
			models = strings.Join(k.Models, ",")
		}
		budget := "-"
		if k.BudgetUSD > 0 {
			budget = fmt.Sprintf("$%g/%s", k.BudgetUSD, k.BudgetPeriod)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, orDash(k.Name), k.Hint, models, zeroDash(k.RPM), zeroDash(k.TPM),
			zeroDash(k.MaxConcurrency), budget, orDash(k.Objective), k.CreatedAt.Local().Format("2006-01-02 15:04"), status)
	}
	return tw.Flush()
}

func zeroDash(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseAge accepts Go durations plus a "d" suffix for days.
func parseAge(s string) (time.Duration, error) { return admin.ParseAge(s) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/keys"
	"llmgate/internal/store"
)

// dbFlags locate the database for commands that work on it directly.
type dbFlags struct {
	config   string
	database string
}

func (d *dbFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVarP(&d.config, "config", "c", "", "config file (default $LLMGATE_CONFIG)")
	cmd.PersistentFlags().StringVar(&d.database, "database", "", "database (default: the config's, else llmgate.db)")
}

func (d *dbFlags) open(ctx context.Context) (store.Store, error) {
	db := d.database
	if db == "" {
		cfg, err := loadConfig(d.config)
		if err != nil {
			return nil, err
		}
		if cfg != nil {
			db = cfg.Database
		}
	}
	if db == "" {
		db = config.DefaultDatabase
	}
	return gateway.OpenStore(ctx, db)
}

func newKeysCmd() *cobra.Command {
	var d dbFlags
	cmd := &cobra.Command{Use: "keys", Short: "Manage virtual API keys (create, list, revoke)"}
	d.register(cmd)

	var name, owner, models, expires string
	var asJSON bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a key; its secret is printed once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, err := d.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			k := keys.Key{Name: name, Owner: owner, Models: splitList(models)}
			if expires != "" {
				dur, err := parseAge(expires)
				if err != nil {
					return fmt.Errorf("--expires: %w", err)
				}
				t := time.Now().Add(dur)
				k.ExpiresAt = &t
			}
			rec, secret, err := gateway.CreateKey(ctx, st, k)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]any{"id": rec.ID, "name": rec.Name, "key": secret, "models": rec.Models})
			}
			fmt.Fprintf(out, "Created key %s (%s). The secret is shown once; store it now:\n\n    %s\n\n", rec.ID, orDash(rec.Name), secret)
			if len(rec.Models) > 0 {
				fmt.Fprintf(out, "Allowed models: %s\n", strings.Join(rec.Models, ", "))
			}
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name for the key (app or person)")
	create.Flags().StringVar(&owner, "owner", "", "owner or team")
	create.Flags().StringVar(&models, "models", "", "comma-separated allowed models; glob patterns allowed (default: all)")
	create.Flags().StringVar(&expires, "expires", "", "lifetime such as 30d or 12h (default: never)")
	create.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	list := &cobra.Command{
		Use:   "list",
		Short: "List keys (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, err := d.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			ks, err := st.ListKeys(ctx)
			if err != nil {
				return err
			}
			return printKeys(cmd.OutOrStdout(), ks)
		},
	}

	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a key; running gateways refuse it within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, err := d.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.RevokeKey(ctx, args[0], time.Now()); err != nil {
				if err == keys.ErrNotFound {
					return fmt.Errorf("no key with id %q ('llmgate keys list' shows the ids)", args[0])
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Revoked %s\n", args[0])
			return nil
		},
	}

	reset := &cobra.Command{
		Use:   "reset-master",
		Short: "Replace the stored master key with a new one (printed once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, err := d.open(ctx)
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
	cmd.AddCommand(create, list, revoke, reset)
	return cmd
}

func printKeys(w io.Writer, ks []*keys.Key) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKEY\tMODELS\tCREATED\tSTATUS")
	now := time.Now()
	for _, k := range ks {
		status := "active"
		if err := k.Usable(now); err != nil {
			status = strings.TrimPrefix(err.Error(), "key ")
		} else if k.ExpiresAt != nil {
			status = "expires " + k.ExpiresAt.Format("2006-01-02")
		}
		models := "all"
		if len(k.Models) > 0 {
			models = strings.Join(k.Models, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, orDash(k.Name), k.Hint, models, k.CreatedAt.Format("2006-01-02 15:04"), status)
	}
	return tw.Flush()
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
func parseAge(s string) (time.Duration, error) {
	if strings.HasSuffix(s, "d") {
		var days float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(s, "d"), "%g", &days); err != nil {
			return 0, fmt.Errorf("invalid duration %q: use 30d, 12h or 90m", s)
		}
		return time.Duration(days * 24 * float64(time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: use 30d, 12h or 90m", s)
	}
	return d, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

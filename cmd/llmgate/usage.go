package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newUsageCmd is a placeholder until the subcommand lands.
func newUsageCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "usage",
		Short: "show usage from the ledger (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("usage is not built yet")
		},
	}
}

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newKeysCmd is a placeholder until the subcommand lands.
func newKeysCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keys",
		Short: "manage virtual API keys (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("keys is not built yet")
		},
	}
}

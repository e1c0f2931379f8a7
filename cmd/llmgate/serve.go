package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newServeCmd is a placeholder until the subcommand lands.
func newServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "run the gateway (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("serve is not built yet")
		},
	}
}

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newSimCmd is a placeholder until the subcommand lands.
func newSimCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sim",
		Short: "run the built-in engine simulator (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("sim is not built yet")
		},
	}
}

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchCmd is a placeholder until the subcommand lands.
func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "benchmark OpenAI-compatible endpoints (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("bench is not built yet")
		},
	}
}

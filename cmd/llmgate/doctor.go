package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDoctorCmd is a placeholder until the subcommand lands.
func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "diagnose an OpenAI- or Anthropic-compatible endpoint (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("doctor is not built yet")
		},
	}
}

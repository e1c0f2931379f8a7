package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newConnectCmd is a placeholder until the subcommand lands.
func newConnectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "connect",
		Short: "write client configuration pointing at the gateway (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("connect is not built yet")
		},
	}
}

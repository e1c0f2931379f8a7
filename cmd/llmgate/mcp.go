package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newMCPCmd is a placeholder until the subcommand lands.
func newMCPCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "serve every model as MCP tools over stdio (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("mcp is not built yet")
		},
	}
}

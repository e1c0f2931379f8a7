// Command llmgate is one binary for running and comparing large language models:
// an OpenAI- and Anthropic-compatible gateway, a benchmark, an engine simulator,
// endpoint diagnostics and client configuration.
package main

//go:generate go run . gen-docs -o ../../docs/cli.md

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := newRootCmd()
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "llmgate:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "llmgate",
		Short:         "One endpoint for every model: gateway, benchmark, simulator and diagnostics",
		Version:       currentBuild().describe(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}")
	root.AddCommand(
		newServeCmd(),
		newKeysCmd(),
		newUsageCmd(),
		newSimCmd(),
		newBenchCmd(),
		newDoctorCmd(),
		newConnectCmd(),
		newMCPCmd(),
		newModelsCmd(),
		newEnginesCmd(),
		newVersionCmd(),
		newGenDocsCmd(),
	)
	finishTree(root)
	return root
}

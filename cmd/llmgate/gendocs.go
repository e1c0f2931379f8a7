package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// replacementAnnotation marks a deprecated alias flag with the flag that
// replaces it (see deprecatedAlias).
const replacementAnnotation = "llmgate/replacement"

// finishTree gives every command a help flag described like the others
// (cobra's own says "help for x") and the root a --version description.
func finishTree(root *cobra.Command) {
	root.InitDefaultVersionFlag()
	if f := root.Flags().Lookup("version"); f != nil {
		f.Usage = "Print the version, as 'llmgate version' does"
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		if f := c.Flags().Lookup("help"); f != nil {
			f.Usage = "Show help for " + c.CommandPath()
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func newGenDocsCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:    "gen-docs",
		Short:  "Write the command and flag reference (docs/cli.md) from the command tree",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var buf bytes.Buffer
			if err := writeCLIDocs(&buf, cmd.Root()); err != nil {
				return err
			}
			if out == "" {
				_, err := cmd.OutOrStdout().Write(buf.Bytes())
				return err
			}
			return os.WriteFile(out, buf.Bytes(), 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "Write to this file instead of standard output")
	return cmd
}

// vocabularyDoc heads docs/cli.md: the names every command shares.
const vocabularyDoc = `## Vocabulary

Every command names the same thing the same way:

| Flag | Means | Environment |
|---|---|---|
| ` + "`--url`" + ` | the address of a running **llmgate gateway** (its root, e.g. ` + "`http://127.0.0.1:4000`" + `), for its admin API: ` + "`keys`, `usage`, `models`, `engines`" + ` | ` + "`LLMGATE_URL`" + ` |
| ` + "`--master-key`" + ` | the gateway's master key, for every command that needs it | ` + "`LLMGATE_MASTER_KEY`" + ` |
| ` + "`--base-url`" + ` | the base URL (with ` + "`/v1`" + `) of **any OpenAI-compatible API**: the gateway, vLLM, SGLang, Ollama, a cloud API: ` + "`bench`, `doctor`, `connect`, `mcp`" + ` | ` + "`LLMGATE_BASE_URL`" + ` |
| ` + "`--api-key`" + ` | a key sent to that API as a bearer token (for the gateway, a virtual ` + "`sk-lg-`" + ` key) | ` + "`LLMGATE_API_KEY`" + ` |
| ` + "`--key-id`" + ` | a virtual key's id, as a filter (` + "`usage --key-id`" + `) | |
| ` + "`-c`, `--config`" + ` | the gateway's YAML config file (` + "`bench --config`" + ` is a targets file) | ` + "`LLMGATE_CONFIG`" + ` |
| ` + "`--database`" + ` | a SQLite file or a ` + "`postgres://`" + ` URL | |
| ` + "`--format`" + ` | what a command prints on standard output: ` + "`table`" + ` (the default), ` + "`json`" + `, and ` + "`csv`" + ` where it prints rows (` + "`usage`, `bench`" + `); ` + "`--json`" + ` is its deprecated old spelling | |
| ` + "`--…-file`" + ` | a file a command writes besides its output (` + "`bench --json-file`, `--csv-file`, `--html-file`" + `) | |

A flag given on the command line wins over its environment variable. A default
that depends on the environment or on another flag is described in words ("when
not given, …"); a fixed default is shown in the Default column.

` + "`keys`" + ` and ` + "`usage`" + ` talk to the running gateway (` + "`--url`" + `, else ` + "`$LLMGATE_URL`" + `, else the
config's ` + "`listen`" + ` address, else ` + "`http://127.0.0.1:4000`" + `) and fall back to its database
file when no gateway answers, saying on standard error which file they used.
`

// writeCLIDocs writes the Markdown reference of every visible command and
// flag, and a table of the deprecated flag names.
func writeCLIDocs(w io.Writer, root *cobra.Command) error {
	var b strings.Builder
	b.WriteString("# llmgate command-line reference\n\n")
	b.WriteString("<!-- Generated from the command tree by `go generate ./cmd/llmgate` (llmgate gen-docs); do not edit. -->\n\n")
	b.WriteString(vocabularyDoc)
	var cmds []*cobra.Command
	var deprecated [][3]string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || isBuiltin(c) {
			return
		}
		cmds = append(cmds, c)
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Deprecated != "" {
				deprecated = append(deprecated, [3]string{c.CommandPath(), "--" + f.Name, "--" + replacementOf(f)})
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)

	b.WriteString("\n## Commands\n\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "- [`%s`](#%s): %s\n", c.CommandPath(), anchor(c.CommandPath()), c.Short)
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n## %s\n\n%s.\n\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."))
		fmt.Fprintf(&b, "    %s\n", c.UseLine())
		local := visibleFlags(c.LocalFlags())
		if len(local) > 0 {
			b.WriteString("\n| Flag | Default | Description |\n|---|---|---|\n")
			for _, f := range local {
				name, usage := pflag.UnquoteUsage(f)
				flag := "--" + f.Name
				if f.Shorthand != "" {
					flag = "-" + f.Shorthand + ", " + flag
				}
				if name != "" {
					flag += " " + name
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s |\n", flag, cell(defaultOf(f)), cell(usage))
			}
		}
		if inherited := visibleFlags(c.InheritedFlags()); len(inherited) > 0 {
			var names []string
			for _, f := range inherited {
				names = append(names, "`--"+f.Name+"`")
			}
			fmt.Fprintf(&b, "\nAlso takes the flags of `%s`: %s.\n", c.Parent().CommandPath(), strings.Join(names, ", "))
		}
	}

	b.WriteString("\n## Deprecated flag names\n\n")
	b.WriteString("These still work for one release and print a warning; use the new name.\n\n")
	b.WriteString("| Command | Old | New |\n|---|---|---|\n")
	sort.Slice(deprecated, func(i, j int) bool { return deprecated[i][0]+deprecated[i][1] < deprecated[j][0]+deprecated[j][1] })
	for _, d := range deprecated {
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` |\n", d[0], d[1], d[2])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// isBuiltin reports whether cobra added c (help, completion).
func isBuiltin(c *cobra.Command) bool {
	return c.Name() == "help" || c.Name() == "completion" || (c.HasParent() && c.Parent().Name() == "completion")
}

// visibleFlags lists the flags help shows, without --help itself.
func visibleFlags(fs *pflag.FlagSet) []*pflag.Flag {
	var out []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Deprecated == "" && f.Name != "help" {
			out = append(out, f)
		}
	})
	return out
}

func replacementOf(f *pflag.Flag) string {
	if r := f.Annotations[replacementAnnotation]; len(r) > 0 {
		return r[0]
	}
	return ""
}

// defaultOf is the default help shows, "" for a zero value.
func defaultOf(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "false", "0", "0s", "[]", "<nil>":
		return ""
	}
	return "`" + f.DefValue + "`"
}

func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// anchor is the GitHub heading anchor of a command's section.
func anchor(title string) string {
	return strings.ReplaceAll(strings.ToLower(title), " ", "-")
}

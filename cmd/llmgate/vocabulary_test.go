package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestCLIDocs_UpToDate fails when docs/cli.md no longer matches the
// command tree.
func TestCLIDocs_UpToDate(t *testing.T) {
	var want bytes.Buffer
	if err := writeCLIDocs(&want, newRootCmd()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatalf("%v: run go generate ./cmd/llmgate", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/cli.md is stale (first difference at line %d):\n have %q\n want %q\nrun: go generate ./cmd/llmgate", i+1, g, w)
			}
		}
	}
}

var flagName = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// TestCLI_EveryCommandSpeaksTheVocabulary walks the command tree and fails
// on a flag or description that drifts from docs/cli.md's vocabulary.
func TestCLI_EveryCommandSpeaksTheVocabulary(t *testing.T) {
	root := newRootCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if isBuiltin(c) {
			return
		}
		for _, p := range vocabularyProblems(c) {
			t.Errorf("%s: %s", c.CommandPath(), p)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// vocabularyProblems lists how c drifts from the vocabulary.
func vocabularyProblems(c *cobra.Command) []string {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if !startsUpper(c.Short) {
		add("short description %q must start with a capital letter", c.Short)
	}
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		name, usage, low := f.Name, f.Usage, strings.ToLower(f.Usage)
		if !flagName.MatchString(name) {
			add("--%s: flag names are lowercase words joined by hyphens", name)
		}
		if f.Deprecated != "" {
			repl := replacementOf(f)
			if !f.Hidden || repl == "" || c.Flags().Lookup(repl) == nil {
				add("deprecated --%s must be a hidden alias naming an existing replacement (deprecatedAlias)", name)
			}
			return // the old name is the point of an alias
		}
		if !startsUpper(usage) {
			add("--%s: description %q must start with a capital letter", name, usage)
		}
		if strings.Contains(low, "(default") {
			add("--%s: description %q repeats its default; help shows it, or say \"when not given, …\"", name, usage)
		}
		switch name {
		case "json", "csv", "html":
			add("--%s: output goes through --format (table, json, csv) on stdout and --%s-file for a file", name, name)
		case "key":
			add("--key is ambiguous: name it --master-key, --api-key or --key-id")
		case "url":
			if !strings.Contains(low, "llmgate gateway") || strings.Contains(low, "openai-compatible") {
				add("--url is the llmgate gateway's address; an arbitrary OpenAI-compatible endpoint is --base-url (%q)", usage)
			}
		case "base-url":
			if !strings.Contains(low, "openai-compatible") {
				add("--base-url is the base URL of an OpenAI-compatible API and must say so (%q)", usage)
			}
		case "master-key":
			if !strings.Contains(usage, "LLMGATE_MASTER_KEY") {
				add("--master-key must fall back to $LLMGATE_MASTER_KEY and say so (%q)", usage)
			}
		case "database":
			if !strings.Contains(low, "sqlite file") || !strings.Contains(low, "postgres://") {
				add("--database takes a SQLite file or a postgres:// URL and must say so (%q)", usage)
			}
		}
		if name != "master-key" && strings.Contains(low, "master key") && !strings.Contains(usage, "--master-key") {
			add("--%s takes a master key: name it --master-key (%q)", name, usage)
		}
		if name != "key-id" && strings.Contains(low, "key id") {
			add("--%s filters by key id: name it --key-id (%q)", name, usage)
		}
		if name != "url" && strings.Contains(low, "llmgate gateway's address") {
			add("--%s takes the gateway's address: name it --url (%q)", name, usage)
		}
	})
	if c.Flags().Lookup("url") != nil && c.Flags().Lookup("master-key") == nil {
		add("takes --url (a gateway's admin API) but not --master-key")
	}
	if c.Flags().Lookup("url") != nil && c.Flags().Lookup("base-url") != nil {
		add("takes both --url and --base-url; a command talks to the gateway or to an endpoint")
	}
	return probs
}

func startsUpper(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.IsUpper(r)
}

// TestVocabularyCheck_CatchesDrift proves the walker's rules bite, on a
// command built to break each of them.
func TestVocabularyCheck_CatchesDrift(t *testing.T) {
	c := &cobra.Command{Use: "bad", Short: "lowercase short"}
	fl := c.Flags()
	fl.String("key", "", "Master key for the admin API")
	fl.String("url", "", "Any OpenAI-compatible endpoint")
	fl.String("base-url", "", "Where to send requests")
	fl.String("filter", "", "Only this key id")
	fl.String("name", "x", "a lowercase description (default x)")
	fl.String("database", "", "SQLite file")
	fl.String("admin", "", "The gateway's master key")
	fl.String("Bad_Name", "", "Fine")
	fl.Bool("json", false, "Print JSON")
	var old string
	fl.StringVar(&old, "old", "", "Old")
	_ = fl.MarkDeprecated("old", "use --new")
	got := strings.Join(vocabularyProblems(c), "\n")
	for _, want := range []string{
		"short description", "--key is ambiguous", "--key takes a master key", "--url is the llmgate gateway's address",
		"--base-url is the base URL", "--filter filters by key id", "--name: description \"a lowercase", "repeats its default",
		"--database takes a SQLite file", "--admin takes a master key", "--Bad_Name: flag names", "deprecated --old",
		"takes --url (a gateway's admin API) but not --master-key", "takes both --url and --base-url", "--json: output goes through --format",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check misses %q; it found:\n%s", want, got)
		}
	}
}

// TestOutputFormat_OneConventionOldSpellingsStillWork: --format json is
// how every command is asked for JSON on stdout; the old --json switch
// and bench's --json FILE still work and say what replaces them.
func TestOutputFormat_OneConventionOldSpellingsStillWork(t *testing.T) {
	cleanCLIEnv(t)
	cfg := filepath.Join(t.TempDir(), "llmgate.yaml")
	if err := os.WriteFile(cfg, []byte("backends:\n  b: {url: http://127.0.0.1:1/v1}\nmodels:\n  m: {backend: b}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now, _, err := runCLI(t, "models", "-c", cfg, "--format", "json")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(now), "[") {
		t.Fatalf("models --format json: %v\n%s", err, now)
	}
	// Cobra writes the note where help goes: stderr for the binary, the
	// test's stdout buffer here.
	old, stderr, err := runCLI(t, "models", "-c", cfg, "--json")
	note, rest, _ := strings.Cut(old, "\n")
	if err != nil || rest != now || !strings.Contains(note+stderr, "Flag --json has been deprecated, use --format json instead") {
		t.Errorf("models --json: %v, same output %v, note %q", err, rest == now, note+stderr)
	}
	if _, _, err := runCLI(t, "models", "-c", cfg, "--format", "yaml"); err == nil || !strings.Contains(err.Error(), "--format must be table or json") {
		t.Errorf("an unknown format: %v", err)
	}
}

// TestDeprecatedFlags_StillWorkAndWarn runs the old names once.
func TestDeprecatedFlags_StillWorkAndWarn(t *testing.T) {
	t.Setenv("LLMGATE_MASTER_KEY", "")
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	// engines --key still sets the master key: the request then fails to
	// connect (nothing listens on port 1) rather than asking for a key.
	root.SetArgs([]string{"engines", "--url", "http://127.0.0.1:1", "--key", "sk-lg-old-flag"})
	err := root.Execute()
	if err == nil || strings.Contains(err.Error(), "no master key") {
		t.Fatalf("engines --key: err = %v, want a connection error", err)
	}
	if !strings.Contains(out.String(), "Flag --key has been deprecated, use --master-key instead") {
		t.Errorf("no deprecation warning:\n%s", out.String())
	}
}

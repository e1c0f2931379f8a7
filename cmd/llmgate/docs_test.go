package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"llmgate/internal/config"
	"llmgate/internal/preset"
	"llmgate/internal/testenv"
)

// The tests in this file keep README.md and docs/*.md true to the code:
// every llmgate command they print parses in the command tree, every
// relative link resolves, every config example loads, and every config key
// is documented.

// repoRoot is the repository root, seen from this package's directory.
const repoRoot = "../.."

// docFile is one Markdown file of the documentation.
type docFile struct {
	path string // relative to the repository root, e.g. "docs/api.md"
	text string
}

// readDocs returns README.md and docs/*.md.
func readDocs(t *testing.T) []docFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append([]string{filepath.Join(repoRoot, "README.md")}, paths...)
	var out []docFile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, p)
		out = append(out, docFile{path: filepath.ToSlash(rel), text: string(b)})
	}
	if len(out) < 2 {
		t.Fatalf("found %d documentation files; want README.md and docs/*.md", len(out))
	}
	return out
}

// codeBlock is a fenced code block: its info string (language) and body.
type codeBlock struct {
	lang string
	body string
	line int // of the opening fence, 1-based
}

var fenceRE = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^`\\s]*)")

// codeBlocks returns the fenced code blocks of a Markdown text. A fence may
// be indented (inside a list item); the block's lines lose that indent.
func codeBlocks(md string) []codeBlock {
	var out []codeBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence := len(m[1]), m[2]
		b := codeBlock{lang: strings.ToLower(m[3]), line: i + 1}
		var body []string
		for i++; i < len(lines); i++ {
			l := lines[i]
			if strings.HasPrefix(strings.TrimLeft(l, " "), fence) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), fence[:1])) == "" {
				break
			}
			for n := 0; n < indent && strings.HasPrefix(l, " "); n++ {
				l = l[1:]
			}
			body = append(body, l)
		}
		b.body = strings.Join(body, "\n")
		out = append(out, b)
	}
	return out
}

// proseOnly blanks out fenced code blocks and inline code spans, so that
// link syntax inside code is not taken for a link.
func proseOnly(md string) string {
	lines := strings.Split(md, "\n")
	in := ""
	for i, l := range lines {
		if m := fenceRE.FindStringSubmatch(l); m != nil && (in == "" || strings.HasPrefix(m[2], in)) {
			if in == "" {
				in = m[2]
			} else {
				in = ""
			}
			lines[i] = ""
			continue
		}
		if in != "" {
			lines[i] = ""
			continue
		}
		lines[i] = inlineCodeRE.ReplaceAllString(l, "``")
	}
	return strings.Join(lines, "\n")
}

var inlineCodeRE = regexp.MustCompile("`[^`]*`")

// docCommand is one llmgate command line printed in the docs.
type docCommand struct {
	where string   // file:line
	text  string   // as printed
	args  []string // after "llmgate" or "go run ./cmd/llmgate"
}

var substitutionRE = regexp.MustCompile(`\$\(\s*((?:llmgate|go run \./cmd/llmgate)\b[^)]*)\)`)

// shellLangs are the info strings of blocks holding shell commands.
var shellLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// docCommands extracts the llmgate commands from the shell code blocks of a
// file: lines (joined at trailing backslashes) and pipeline or list
// segments that start with llmgate or go run ./cmd/llmgate, after any
// VAR=value assignments, and $(...) substitutions that do.
func docCommands(f docFile) ([]docCommand, error) {
	var out []docCommand
	for _, b := range codeBlocks(f.text) {
		if !shellLangs[b.lang] {
			continue
		}
		phys := strings.Split(b.body, "\n")
		for i := 0; i < len(phys); i++ {
			start := i
			line := phys[i]
			for strings.HasSuffix(line, "\\") && i+1 < len(phys) {
				i++
				line = strings.TrimSuffix(line, "\\") + " " + phys[i]
			}
			line = strings.TrimPrefix(strings.TrimSpace(line), "$ ")
			where := fmt.Sprintf("%s:%d", f.path, b.line+1+start)
			var texts []string
			for _, m := range substitutionRE.FindAllStringSubmatch(line, -1) {
				texts = append(texts, m[1])
			}
			segs, err := shellSegments(line)
			if err != nil {
				return nil, fmt.Errorf("%s: %v in %q", where, err, line)
			}
			for _, seg := range segs {
				if args, ok := llmgateArgs(seg); ok {
					out = append(out, docCommand{where: where, text: line, args: args})
				}
			}
			for _, s := range texts {
				segs, err := shellSegments(s)
				if err != nil {
					return nil, fmt.Errorf("%s: %v in %q", where, err, s)
				}
				for _, seg := range segs {
					if args, ok := llmgateArgs(seg); ok {
						out = append(out, docCommand{where: where, text: s, args: args})
					}
				}
			}
		}
	}
	return out, nil
}

// llmgateArgs returns the arguments of a command segment that runs llmgate.
func llmgateArgs(words []string) ([]string, bool) {
	for len(words) > 0 && isAssignment(words[0]) {
		words = words[1:]
	}
	switch {
	case len(words) >= 1 && (words[0] == "llmgate" || strings.HasSuffix(words[0], "/llmgate")):
		return words[1:], true
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && strings.TrimSuffix(words[2], "/") == "./cmd/llmgate":
		return words[3:], true
	}
	return nil, false
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if r != '_' && !unicode.IsLetter(r) && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// shellSegments splits a command line into the words of each simple
// command, as a POSIX shell would quote them, without expanding anything:
// segments end at unquoted |, &, ; and a comment (#) ends the line; a
// redirection (<, >) ends its segment's words.
func shellSegments(line string) ([][]string, error) {
	var segs [][]string
	var words []string
	var cur strings.Builder
	inWord, redirected := false, false
	flushWord := func() {
		if inWord && !redirected {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	endSeg := func() {
		flushWord()
		if len(words) > 0 {
			segs = append(segs, words)
		}
		words, redirected = nil, false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated single quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, fmt.Errorf("unterminated double quote")
			}
			inWord = true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == '#' && !inWord:
			endSeg()
			return segs, nil
		case c == '|' || c == '&' || c == ';':
			endSeg()
		case c == '<' || c == '>':
			flushWord()
			redirected = true
		case c == ' ' || c == '\t':
			flushWord()
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	endSeg()
	return segs, nil
}

// checkCommand parses args in a fresh command tree the way Execute would,
// without running anything: the subcommand must exist, every flag must
// exist and take its value, a deprecated flag name is refused, and the
// positional arguments must satisfy the command's Args.
func checkCommand(args []string) error {
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd.Hidden {
		return fmt.Errorf("%q is a hidden command", cmd.CommandPath())
	}
	cmd.Flags().SetOutput(io.Discard) // pflag's deprecation notice; checked below
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	var deprecated []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Deprecated != "" {
			deprecated = append(deprecated, "--"+f.Name+" ("+f.Deprecated+")")
		}
	})
	if len(deprecated) > 0 {
		return fmt.Errorf("%s: deprecated flag %s", cmd.CommandPath(), strings.Join(deprecated, ", "))
	}
	help, _ := cmd.Flags().GetBool("help")
	if help {
		return nil
	}
	pos := cmd.Flags().Args()
	if cmd.HasAvailableSubCommands() && cmd.Args == nil && len(pos) > 0 {
		return fmt.Errorf("unknown command %q for %q", pos[0], cmd.CommandPath())
	}
	if err := cmd.ValidateArgs(pos); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%q does nothing by itself: name a subcommand", cmd.CommandPath())
	}
	return nil
}

// TestDocs_CommandsParse checks every llmgate command in the docs' shell
// blocks against the command tree.
func TestDocs_CommandsParse(t *testing.T) {
	var n int
	seen := map[string]bool{}
	for _, f := range readDocs(t) {
		cmds, err := docCommands(f)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, c := range cmds {
			n++
			if len(c.args) > 0 {
				seen[c.args[0]] = true
			}
			if err := checkCommand(c.args); err != nil {
				t.Errorf("%s: %q does not parse: %v", c.where, c.text, err)
			}
		}
	}
	// The check must have something to check: the README's demo command and
	// the commands the docs are about.
	for _, sub := range []string{"serve", "keys", "usage", "bench", "connect", "doctor", "sim", "models", "engines"} {
		if !seen[sub] {
			t.Errorf("no 'llmgate %s' command found in the docs' code blocks; is the extraction broken?", sub)
		}
	}
	t.Logf("%d commands checked", n)
}

// TestCLIExamples_Parse checks the Example lines of every command's help
// the same way, since users copy them too.
func TestCLIExamples_Parse(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Example != "" {
			cmds, err := docCommands(docFile{path: c.CommandPath() + " --help", text: "```sh\n" + c.Example + "\n```\n"})
			if err != nil {
				t.Error(err)
			}
			for _, dc := range cmds {
				n++
				if err := checkCommand(dc.args); err != nil {
					t.Errorf("%s example %q does not parse: %v", c.CommandPath(), dc.text, err)
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if n == 0 {
		t.Fatal("no example commands found")
	}
}

// TestDocsCheck_CatchesBadCommands proves the command check fails on what
// it is meant to catch, and extracts what it is meant to extract.
func TestDocsCheck_CatchesBadCommands(t *testing.T) {
	md := "```sh\n" +
		"go run ./cmd/llmgate serve --demo          # fine\n" +
		"LLMGATE_URL=http://x llmgate keys list | jq .\n" +
		"llmgate bench --base-url http://h/v1 \\\n  --concurrency 1,4 --goodput ttft:500 tpot:50\n" +
		"eval \"$(llmgate connect env --no-such-flag)\"\n" +
		"llmgate serve --lisen 127.0.0.1:4000\n" +
		"llmgate engine list\n" +
		"llmgate keys revoke\n" +
		"llmgate bench --concurrency four\n" +
		"llmgate usage --key sk-lg-old\n" +
		"llmgate keys\n" +
		"vllm serve x --port 8000   # not llmgate\n" +
		"```\n"
	cmds, err := docCommands(docFile{path: "t.md", text: md})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cmds {
		verdict := "ok"
		if err := checkCommand(c.args); err != nil {
			verdict = "bad"
		}
		got = append(got, strings.Join(c.args, " ")+" => "+verdict)
	}
	want := []string{
		"serve --demo => ok",
		"keys list => ok",
		"bench --base-url http://h/v1 --concurrency 1,4 --goodput ttft:500 tpot:50 => bad", // a stray positional argument
		"connect env --no-such-flag => bad",
		"serve --lisen 127.0.0.1:4000 => bad",
		"engine list => bad",
		"keys revoke => bad",              // needs an ID
		"bench --concurrency four => bad", // not an int list
		"usage --key sk-lg-old => bad",    // deprecated name
		"keys => bad",                     // needs a subcommand
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// linkRE finds inline Markdown links and images: [text](target "title").
var linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// refLinkRE finds reference link definitions: [label]: target.
var refLinkRE = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)

// htmlAnchorRE finds explicit anchors: <a id="x"> or name="x".
var htmlAnchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)

var headingRE = regexp.MustCompile(`(?m)^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$`)

// anchorCache holds anchors' answer for each document text: a document is
// the target of many links, and its regular expressions are slow under the
// race detector.
var anchorCache struct {
	sync.Mutex
	m map[string]map[string]bool
}

// cachedAnchors is anchors, computed once per document text.
func cachedAnchors(md string) map[string]bool {
	anchorCache.Lock()
	defer anchorCache.Unlock()
	if a, ok := anchorCache.m[md]; ok {
		return a
	}
	if anchorCache.m == nil {
		anchorCache.m = map[string]map[string]bool{}
	}
	a := anchors(md)
	anchorCache.m[md] = a
	return a
}

// anchors returns the link targets a Markdown file defines: GitHub's slugs
// of its headings (numbered -1, -2 … when repeated) and explicit anchors.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(proseOnlyKeepHeadings(md), -1) {
		s := slug(m[1])
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	for _, m := range htmlAnchorRE.FindAllStringSubmatch(md, -1) {
		out[m[1]] = true
	}
	return out
}

// proseOnlyKeepHeadings blanks fenced blocks (a "# comment" in a shell
// block is not a heading) but keeps inline code, which headings may hold.
func proseOnlyKeepHeadings(md string) string {
	lines := strings.Split(md, "\n")
	in := ""
	for i, l := range lines {
		if m := fenceRE.FindStringSubmatch(l); m != nil && (in == "" || strings.HasPrefix(m[2], in)) {
			if in == "" {
				in = m[2]
			} else {
				in = ""
			}
			lines[i] = ""
			continue
		}
		if in != "" {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

var mdLinkInHeading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading: lower case, link targets and
// punctuation removed (letters, digits, spaces, hyphens and underscores
// stay), spaces made hyphens.
func slug(heading string) string {
	h := mdLinkInHeading.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// brokenLinks lists the relative links of file (path relative to root)
// that do not resolve: a missing file, or a missing heading in a Markdown
// file. read returns a file's text, or an error when it does not exist.
func brokenLinks(path, text string, exists func(string) bool, read func(string) (string, error)) []string {
	var bad []string
	prose := proseOnly(text)
	var targets []string
	for _, m := range linkRE.FindAllStringSubmatch(prose, -1) {
		targets = append(targets, m[1])
	}
	for _, m := range refLinkRE.FindAllStringSubmatch(prose, -1) {
		targets = append(targets, m[1])
	}
	for _, target := range targets {
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		dest := path
		if file != "" {
			dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(path), file)))
			if strings.HasPrefix(dest, "../") || filepath.IsAbs(file) {
				bad = append(bad, fmt.Sprintf("%s: link %q leaves the repository", path, target))
				continue
			}
			if !exists(dest) {
				bad = append(bad, fmt.Sprintf("%s: link %q: no file %s", path, target, dest))
				continue
			}
		}
		if frag == "" || !strings.HasSuffix(dest, ".md") {
			continue
		}
		md, err := read(dest)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: link %q: %v", path, target, err))
			continue
		}
		if !cachedAnchors(md)[frag] {
			bad = append(bad, fmt.Sprintf("%s: link %q: %s has no heading #%s", path, target, dest, frag))
		}
	}
	return bad
}

// TestDocs_LinksResolve checks every relative link of README.md and
// docs/*.md: the file exists, and a #fragment names a heading of it.
func TestDocs_LinksResolve(t *testing.T) {
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel)))
		return err == nil
	}
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
		return string(b), err
	}
	links := 0
	for _, f := range readDocs(t) {
		links += len(linkRE.FindAllString(proseOnly(f.text), -1))
		for _, b := range brokenLinks(f.path, f.text, exists, read) {
			t.Error(b)
		}
	}
	if links == 0 {
		t.Fatal("no links found; is the extraction broken?")
	}
}

// TestDocsCheck_CatchesBrokenLinks proves the link check fails on a missing
// file, a missing heading and a repeated heading's second anchor it lacks.
func TestDocsCheck_CatchesBrokenLinks(t *testing.T) {
	files := map[string]string{
		"README.md": "# Top\n\n## Two words, `code`!\n\n## Same\n\n## Same\n",
		"docs/a.md": "see [x](../README.md#two-words-code), [y](../README.md#same-1), [z](#local), [gone](b.md), " +
			"[no heading](../README.md#nope), [web](https://example.com/x.md), `[code](nowhere.md)`\n\n" +
			"```sh\n[in code](nowhere.md)\n```\n\n### Local\n\n[ref]: ../README.md#same-2\n",
	}
	exists := func(p string) bool { _, ok := files[p]; return ok }
	read := func(p string) (string, error) {
		if s, ok := files[p]; ok {
			return s, nil
		}
		return "", os.ErrNotExist
	}
	got := brokenLinks("docs/a.md", files["docs/a.md"], exists, read)
	want := []string{
		`docs/a.md: link "b.md": no file docs/b.md`,
		`docs/a.md: link "../README.md#nope": README.md has no heading #nope`,
		`docs/a.md: link "../README.md#same-2": README.md has no heading #same-2`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// topLevelKeys returns the top-level keys of a YAML document, or nil when
// it is not a mapping.
func topLevelKeys(src string) []string {
	var root yaml.Node
	if yaml.Unmarshal([]byte(src), &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	var keys []string
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		keys = append(keys, m.Content[i].Value)
	}
	return keys
}

// configKeys lists every key the config file knows, as dotted paths from
// the top ("backends.*.health_check.path", "models.*.deployments[].weight"),
// from the yaml tags of config.Config: "*" stands for a name the user
// chooses, "[]" for a list's elements.
func configKeys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for {
			switch t.Kind() {
			case reflect.Pointer:
				t = t.Elem()
				continue
			case reflect.Slice:
				t, prefix = t.Elem(), strings.TrimSuffix(prefix, ".")+"[]."
				continue
			case reflect.Map:
				t, prefix = t.Elem(), prefix+"*."
				continue
			}
			break
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			if strings.Contains(opts, "inline") {
				walk(f.Type, prefix)
				continue
			}
			if name == "" {
				continue
			}
			out = append(out, prefix+name)
			walk(f.Type, prefix+name+".")
		}
	}
	walk(reflect.TypeOf(config.Config{}), "")
	sort.Strings(out)
	return out
}

// documentedAs is how docs/configuration.md names a key: relative to the
// table of the named thing it belongs to ("health_check.path" in the
// backends table), or the whole path for keys outside such a table
// ("routing.circuit_breaker.enabled").
func documentedAs(key string) string {
	if i := strings.LastIndex(key, "*."); i >= 0 {
		return key[i+2:]
	}
	return key
}

// tableKeys returns the names in code spans in the first cell of each
// table row of a Markdown text ("| `a`, `b` | …" gives a and b).
func tableKeys(md string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(md, "\n") {
		cells := strings.Split(l, "|")
		if !strings.HasPrefix(strings.TrimSpace(l), "|") || len(cells) < 3 {
			continue
		}
		for _, m := range inlineCodeRE.FindAllString(cells[1], -1) {
			out[strings.Trim(m, "`")] = true
		}
	}
	return out
}

// TestDocs_ConfigKeysDocumented fails when a config key is not named in
// docs/configuration.md (as `key` in its tables).
func TestDocs_ConfigKeysDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	keys := configKeys()
	if len(keys) < 50 {
		t.Fatalf("found only %d config keys by reflection: %v", len(keys), keys)
	}
	rows := tableKeys(doc)
	for _, k := range keys {
		if name := documentedAs(k); !rows[name] {
			t.Errorf("config key %s is not documented in docs/configuration.md: add a table row for `%s`", k, name)
		}
	}
}

var (
	certPathRE = regexp.MustCompile(`(?m)((?:tls_cert_file|client_cert_file|ca_file):[ \t]*)[^\s,}#]+`)
	keyPathRE  = regexp.MustCompile(`(?m)((?:tls_key_file|client_key_file):[ \t]*)[^\s,}#]+`)
)

// TestDocs_ConfigExamplesLoad loads every YAML example that is a gateway
// config (one of its top-level keys is a config key), with every ${VAR}
// set, so that an example with a misspelt key or a bad value fails.
func TestDocs_ConfigExamplesLoad(t *testing.T) {
	top := map[string]bool{}
	for _, k := range configKeys() {
		if !strings.Contains(k, ".") {
			top[k] = true
		}
	}
	// Every variable an example refers to is set (API keys of presets
	// too), except the gateway's own switches, which take on/off.
	env := func(name string) (string, bool) {
		if strings.HasPrefix(name, "LLMGATE_") {
			return "", false
		}
		return "test-value-of-" + name, true
	}
	// Certificate paths in examples name files of the reader's machine;
	// real PEM files stand in for them, so the rest is still checked.
	cert, key, _ := testenv.TLSCert(t, t.TempDir(), 1)
	n := 0
	for _, f := range readDocs(t) {
		for _, b := range codeBlocks(f.text) {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			isConfig := false
			for _, k := range topLevelKeys(b.body) {
				isConfig = isConfig || top[k]
			}
			if !isConfig {
				continue
			}
			n++
			name := fmt.Sprintf("%s:%d", f.path, b.line)
			body := certPathRE.ReplaceAllString(b.body, "${1}"+cert)
			body = keyPathRE.ReplaceAllString(body, "${1}"+key)
			if _, err := config.LoadWithEnv(strings.NewReader(body), name, env); err != nil {
				t.Errorf("config example does not load: %v", err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no config examples found")
	}
}

// TestDocs_PresetTablesMatch fails when docs/routing.md's preset tables
// drift from the presets in the code (name, base URL, dialect, key
// variable; engine URL and health path).
func TestDocs_PresetTablesMatch(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "routing.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		for _, c := range cells[2:] {
			rows[name] = append(rows[name], strings.TrimSpace(c))
		}
	}
	cellHas := func(name string, i int, want string) {
		t.Helper()
		if r := rows[name]; len(r) <= i || !strings.Contains(r[i], want) {
			t.Errorf("docs/routing.md: preset %s: column %d should say %q; row: %q", name, i+2, want, r)
		}
	}
	for _, p := range preset.Providers() {
		cellHas(p.Name, 0, p.BaseURL)
		cellHas(p.Name, 1, string(p.Dialect))
		cellHas(p.Name, 2, "`"+p.APIKeyEnv+"`")
	}
	for _, e := range preset.Engines() {
		cellHas(e.Name, 0, e.LocalURL())
		cellHas(e.Name, 1, "`"+e.HealthPath+"`")
	}
}

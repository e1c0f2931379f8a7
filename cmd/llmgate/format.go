package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// formatFlag is --format, the one way every command is asked for its
// output in another form: table (the default), json, and csv where a
// command prints rows (usage, bench). The --json switch some commands had
// is a deprecated alias of --format json; bench's --json FILE is
// --json-file.
type formatFlag struct {
	value   string
	allowed []string
}

// register adds --format (table and the given formats) and the deprecated
// --json switch.
func (f *formatFlag) register(fs *pflag.FlagSet, formats ...string) {
	f.allowed = append([]string{"table"}, formats...)
	fs.StringVar(&f.value, "format", "table", "Output format: "+orList(f.allowed))
	fs.VarPF(jsonSwitch{&f.value}, "json", "", "Deprecated: use --format json").NoOptDefVal = "true"
	_ = fs.MarkDeprecated("json", "use --format json instead (--json will be removed in the next release)")
	_ = fs.SetAnnotation("json", replacementAnnotation, []string{"format"})
}

// check says which formats there are when --format names another.
func (f *formatFlag) check() error {
	for _, a := range f.allowed {
		if f.value == a {
			return nil
		}
	}
	return fmt.Errorf("--format must be %s, not %q", orList(f.allowed), f.value)
}

// json reports whether JSON was asked for.
func (f *formatFlag) json() bool { return f.value == "json" }

// jsonSwitch is the old --json switch: set, it means --format json.
type jsonSwitch struct{ format *string }

func (j jsonSwitch) String() string { return "false" }

func (j jsonSwitch) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	if on {
		*j.format = "json"
	}
	return nil
}

func (j jsonSwitch) Type() string { return "bool" }

// orList writes "a, b or c".
func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

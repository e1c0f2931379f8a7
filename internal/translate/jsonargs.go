package translate

import (
	"encoding/json"
	"strings"
)

// argsBuf holds a tool call's streamed arguments and tells, in time linear
// in them however they arrive, whether they are a complete JSON value yet
// (what json.Valid of the whole says). Asking json.Valid of the whole
// after every fragment, as the streams did while a parallel call waited,
// was quadratic in the arguments' length.
//
// It follows the text as it is written: the nesting outside strings, and
// where the first top-level value ends. The arguments are valid once that
// value has ended, if it is valid itself (checked once, then kept: what
// comes before the end never changes) and only white space follows it.
type argsBuf struct {
	b        strings.Builder
	depth    int  // open objects and arrays, outside strings
	inStr    bool // inside a string
	esc      bool // after a backslash in a string
	started  bool // a value has begun
	scalar   bool // the value is a bare number or literal: json.Valid decides
	end      int  // length at which the first value ended (0: not yet)
	trailing bool // something other than white space after it, or a stray close
	checked  bool // valid holds json.Valid of the first value
	valid    bool
}

func (a *argsBuf) WriteString(s string) {
	for i := 0; i < len(s); i++ {
		a.scan(s[i], a.b.Len()+i+1)
	}
	a.b.WriteString(s)
}

func (a *argsBuf) String() string { return a.b.String() }

func (a *argsBuf) Len() int { return a.b.Len() }

func (a *argsBuf) Reset() { *a = argsBuf{} }

// scan follows byte c, the one that makes the text n bytes long.
func (a *argsBuf) scan(c byte, n int) {
	space := c == ' ' || c == '\t' || c == '\n' || c == '\r'
	switch {
	case a.end > 0 || a.trailing:
		if !space {
			a.trailing = true
		}
	case a.inStr:
		switch {
		case a.esc:
			a.esc = false
		case c == '\\':
			a.esc = true
		case c == '"':
			a.inStr = false
			if a.depth == 0 {
				a.end = n
			}
		}
	case space:
	case c == '"':
		a.inStr, a.started = true, true
	case c == '{' || c == '[':
		a.depth++
		a.started = true
	case c == '}' || c == ']':
		a.depth--
		switch {
		case a.depth == 0 && !a.scalar:
			a.end = n
		case a.depth < 0:
			a.trailing = true
		}
	case a.depth == 0:
		a.started, a.scalar = true, true
	}
}

// Complete reports whether the arguments so far are one complete JSON
// value (json.Valid of the whole).
func (a *argsBuf) Complete() bool {
	switch {
	case a.scalar:
		return json.Valid([]byte(a.b.String())) // a bare number or literal: rare
	case a.trailing || a.end == 0:
		return false
	}
	if !a.checked {
		a.valid, a.checked = json.Valid([]byte(a.b.String()[:a.end])), true
	}
	return a.valid
}

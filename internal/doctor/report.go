package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteJSON writes the report as indented JSON for scripts.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteText writes the checklist: one line per check with ✓, ! or ✗, the
// fix indented under every line that did not pass, and a summary.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "llmgate doctor  %s (%s)\n", r.BaseURL, r.BaseURLSource)
	if r.EffectiveBaseURL != "" {
		fmt.Fprintf(&b, "  tested as      %s\n", r.EffectiveBaseURL)
	}
	if r.KeyFingerprint != "" {
		fmt.Fprintf(&b, "  key            %s (%s)\n", r.KeyFingerprint, r.KeySource)
	} else {
		fmt.Fprintf(&b, "  key            none\n")
	}
	if r.Model != "" {
		fmt.Fprintf(&b, "  model          %s (%s)\n", r.Model, r.ModelSource)
	}
	b.WriteString("\n")
	width := 0
	for _, c := range r.Checks {
		width = max(width, len([]rune(c.Title)))
	}
	for _, c := range r.Checks {
		pad := strings.Repeat(" ", width-len([]rune(c.Title)))
		fmt.Fprintf(&b, "%s %s%s  %s", c.Status.Symbol(), c.Title, pad, c.Detail)
		if c.DurationMS > 0 {
			fmt.Fprintf(&b, " [%s]", fmtMS(c.DurationMS))
		}
		b.WriteString("\n")
		if c.Fix != "" && (c.Status == StatusFail || c.Status == StatusWarn) {
			fmt.Fprintf(&b, "  %s  → %s\n", strings.Repeat(" ", width), c.Fix)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", r.Summary())
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtMS(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

package bench

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"
	"text/template"
)

//go:embed report_template.html
var reportTemplate string

var reportTmpl = template.Must(template.New("report").Parse(reportTemplate))

// WriteHTML writes one self-contained HTML page: the data inline as JSON and
// a small inline script that draws SVG charts (latency percentiles and
// throughput versus load per target, TTFT and ITL distributions) and
// tables. It loads nothing from the network. When the script finishes it
// sets data-charts-rendered on <body> and data-status="ok" on #status; an
// uncaught error is written into #js-errors instead.
func WriteHTML(w io.Writer, r *Report) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode report data: %w", err)
	}
	// json.Marshal escapes <, > and & as \u003c..., so the data cannot end
	// the <script> element early.
	title := "llmgate bench"
	var names []string
	for _, t := range r.Settings.Targets {
		names = append(names, t.Name)
	}
	if len(names) > 0 {
		title += ": " + strings.Join(names, " vs ")
	}
	return reportTmpl.Execute(w, struct {
		Title string
		Data  string
	}{Title: html.EscapeString(title), Data: string(data)})
}

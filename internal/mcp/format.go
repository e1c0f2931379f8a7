package mcpserver

import (
	"fmt"
	"strconv"
	"strings"
)

// The text content of each result is what most MCP clients (Cline among
// them) show the agent, so it is written to be read: the answer first,
// then one line of figures; compare puts the figures in a Markdown table
// and each answer in its own section. The same data is in the structured
// content for clients that read that instead.

func formatModels(out ListModelsOutput) string {
	var b strings.Builder
	if len(out.Models) == 0 {
		fmt.Fprintf(&b, "%s serves no models.", out.BaseURL)
		return b.String()
	}
	fmt.Fprintf(&b, "%d model(s) at %s:\n", len(out.Models), out.BaseURL)
	for _, m := range out.Models {
		b.WriteString("- " + m.ID)
		var extra []string
		if m.OwnedBy != "" {
			extra = append(extra, "owned by "+m.OwnedBy)
		}
		if m.MaxModelLen > 0 {
			extra = append(extra, "context "+strconv.Itoa(m.MaxModelLen)+" tokens")
		}
		if m.ID == out.DefaultModel {
			extra = append(extra, "default")
		}
		if len(extra) > 0 {
			b.WriteString(" (" + strings.Join(extra, ", ") + ")")
		}
		b.WriteByte('\n')
	}
	if out.DefaultModel != "" && !containsModel(out.Models, out.DefaultModel) {
		fmt.Fprintf(&b, "Note: the default model %q is not in this list; chat without a model will fail until %s names one of these.\n",
			out.DefaultModel, EnvModel)
	}
	return strings.TrimRight(b.String(), "\n")
}

func containsModel(ms []ModelInfo, id string) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

func formatAnswer(a Answer) string {
	var b strings.Builder
	b.WriteString(a.Answer)
	if a.Answer == "" {
		b.WriteString("(empty answer)")
	}
	b.WriteString("\n\n---\n")
	b.WriteString(figuresLine(a))
	if a.Reasoning != "" {
		fmt.Fprintf(&b, "\n(the model also returned %d characters of reasoning, in the structured result)", len(a.Reasoning))
	}
	if a.FinishReason == "length" {
		b.WriteString("\n(the answer was cut at max_tokens; raise max_tokens for the rest)")
	}
	return b.String()
}

// figuresLine is the one-line summary under a chat answer.
func figuresLine(a Answer) string {
	parts := []string{"model " + a.Model}
	est := ""
	if a.TokensEstimated {
		est = " (estimated)"
	}
	parts = append(parts, fmt.Sprintf("tokens: %d prompt + %d completion%s", a.PromptTokens, a.CompletionTokens, est))
	if a.TTFTms != nil {
		parts = append(parts, "TTFT "+num(*a.TTFTms)+" ms")
	} else {
		parts = append(parts, "TTFT n/a (not streamed)")
	}
	parts = append(parts, num(a.TokensPerSecond)+" tokens/s", "latency "+num(a.LatencyMs)+" ms")
	if a.FinishReason != "" {
		parts = append(parts, "finish "+a.FinishReason)
	}
	return strings.Join(parts, " · ")
}

func formatCompare(out CompareOutput) string {
	var b strings.Builder
	b.WriteString("| model | prompt tokens | completion tokens | TTFT ms | latency ms | tokens/s | finish |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, a := range out.Results {
		name := cell(a.Model)
		if a.Error != "" {
			fmt.Fprintf(&b, "| %s | – | – | – | – | – | failed |\n", name)
			continue
		}
		ttft := "n/a"
		if a.TTFTms != nil {
			ttft = num(*a.TTFTms)
		}
		comp := strconv.Itoa(a.CompletionTokens)
		if a.TokensEstimated {
			comp += " (est.)"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n",
			name, a.PromptTokens, comp, ttft, num(a.LatencyMs), num(a.TokensPerSecond), cell(a.FinishReason))
	}
	for _, a := range out.Results {
		fmt.Fprintf(&b, "\n## %s\n\n", a.Model)
		switch {
		case a.Error != "":
			b.WriteString("Failed: " + a.Error + "\n")
		case a.Answer == "":
			b.WriteString("(empty answer)\n")
		default:
			b.WriteString(strings.TrimRight(a.Answer, "\n") + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// cell makes a value safe inside a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return "–"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// num prints a figure with at most one decimal and no trailing ".0".
func num(f float64) string {
	return strconv.FormatFloat(round1(f), 'f', -1, 64)
}

package usage

// Aggregator folds records, arriving sorted by group and then by latency,
// into summary rows with exact percentiles. Stores share it so that every
// backend computes the same figures.
type Aggregator struct {
	group []string
	rows  []SummaryRow
	lats  []int64
	cur   []string
	open  bool
}

// NewAggregator returns an Aggregator for the given group dimensions.
func NewAggregator(group []string) *Aggregator {
	return &Aggregator{group: group}
}

// Add folds one record. dims holds the group values in GroupBy order.
func (a *Aggregator) Add(dims []string, latencyUS, status, prompt, completion int64, cost float64, estimated bool) {
	if !a.open || !equal(dims, a.cur) {
		a.finish()
		a.cur = append(a.cur[:0], dims...)
		row := SummaryRow{}
		for i, g := range a.group {
			switch g {
			case "key":
				row.KeyID = dims[i]
			case "model":
				row.Model = dims[i]
			case "backend":
				row.Backend = dims[i]
			case "day":
				row.Day = dims[i]
			}
		}
		a.rows = append(a.rows, row)
		a.open = true
	}
	r := &a.rows[len(a.rows)-1]
	r.Requests++
	if status >= 400 {
		r.Errors++
	}
	r.PromptTokens += prompt
	r.CompletionTokens += completion
	r.CostUSD += cost
	if estimated {
		r.Estimated++
	}
	a.lats = append(a.lats, latencyUS)
}

func (a *Aggregator) finish() {
	if !a.open {
		return
	}
	r := &a.rows[len(a.rows)-1]
	r.P50LatencyMS = float64(rank(a.lats, 0.50)) / 1000
	r.P95LatencyMS = float64(rank(a.lats, 0.95)) / 1000
	a.lats = a.lats[:0]
	a.open = false
}

// Rows returns the finished rows.
func (a *Aggregator) Rows() []SummaryRow {
	a.finish()
	return a.rows
}

// rank returns the nearest-rank percentile of sorted values.
func rank(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package doctor

import (
	"sort"
	"strings"

	"llmgate/internal/config"
)

// Nearest returns up to n names from list closest to name by edit distance,
// ignoring case, best first. Names further than half of name's length (or
// that share no substring relation with it) are not offered, so a typo gets
// suggestions and an unrelated name gets none.
func Nearest(name string, list []string, n int) []string {
	type cand struct {
		s    string
		dist int
	}
	lname := strings.ToLower(name)
	var cs []cand
	for _, s := range list {
		ls := strings.ToLower(s)
		dist := config.Levenshtein(lname, ls)
		limit := max(2, len([]rune(lname))/2)
		// "llama3" for "meta-llama/Llama-3.1-8B": a substring is a good hint
		// even when the edit distance is large.
		if strings.Contains(ls, lname) || strings.Contains(lname, ls) {
			dist = min(dist, limit)
		}
		if dist <= limit {
			cs = append(cs, cand{s, dist})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].dist < cs[j].dist })
	out := make([]string, 0, n)
	for _, c := range cs {
		if len(out) == n {
			break
		}
		out = append(out, c.s)
	}
	return out
}

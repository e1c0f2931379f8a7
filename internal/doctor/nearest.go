package doctor

import (
	"sort"
	"strings"
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
		dist := levenshtein(lname, ls)
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

// levenshtein is the classic edit distance over runes with two rows.
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

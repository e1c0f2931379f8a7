package config

import "strings"

// Nearest returns the candidate closest to s by edit distance, or "" when
// none is close enough to be a plausible typo.
func Nearest(s string, candidates []string) string {
	best, bestD := "", -1
	ls := strings.ToLower(s)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := Levenshtein(ls, lc)
		if min(len(lc), len(ls)) >= 3 && (strings.Contains(lc, ls) || strings.Contains(ls, lc)) {
			// One name inside the other ("qwen2.5-7b" in
			// "qwen2.5-7b-instruct") is the most likely intent.
			d = 1
		}
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	limit := max(2, len(s)/3)
	if bestD > limit {
		return ""
	}
	return best
}

// Levenshtein returns the edit distance between a and b.
func Levenshtein(a, b string) int {
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

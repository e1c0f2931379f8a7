package usage

import (
	"math"
	"strconv"
	"strings"
)

// FormatUSD prints an amount of dollars for people: two decimals from a dollar
// up ($12.50), three significant digits below ($0.0105, $0.0000432) with
// at least the cents shown, so that a budget of $0.0001 and a spend of
// $0.00004 do not both read "$0.0000".
func FormatUSD(v float64) string {
	if v == 0 {
		return "$0"
	}
	if math.Abs(v) >= 1 {
		return "$" + strconv.FormatFloat(v, 'f', 2, 64)
	}
	digits := min(15, 2-int(math.Floor(math.Log10(math.Abs(v)))))
	s := strings.TrimRight(strconv.FormatFloat(v, 'f', digits, 64), "0")
	if i := strings.IndexByte(s, '.'); i >= 0 && len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	return "$" + s
}

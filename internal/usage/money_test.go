package usage

import "testing"

func TestUSD_ShowsCentsAndThreeSignificantDigitsBelowADollar(t *testing.T) {
	for v, want := range map[float64]string{
		0: "$0", 12.5: "$12.50", 1234.567: "$1234.57", 0.5: "$0.50", 0.01: "$0.01", 0.0105: "$0.0105",
		0.0001: "$0.0001", 0.0000432: "$0.0000432", 0.00123456: "$0.00123", 0.9999: "$1.00",
	} {
		if got := FormatUSD(v); got != want {
			t.Errorf("FormatUSD(%v) = %s, want %s", v, got, want)
		}
	}
}

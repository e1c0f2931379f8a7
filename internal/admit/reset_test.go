package admit

import (
	"math/rand/v2"
	"testing"
	"time"
)

// OpenAI sends reset times as Go durations ("1s", "6m0s", "17ms" in its
// rate-limit guide); sub-second values in whole milliseconds.
func TestAppendReset_FormatsAsOpenAIDoes(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "0s",
		-time.Second:            "0s",
		300 * time.Microsecond:  "1ms",
		17 * time.Millisecond:   "17ms",
		999 * time.Millisecond:  "999ms",
		time.Second:             "1s",
		1500 * time.Millisecond: "1.5s",
		12*time.Second + 340*time.Millisecond + 400*time.Microsecond: "12.34s",
		6 * time.Minute: "6m0s",
		time.Hour:       "1h0m0s",
		time.Hour + 2*time.Minute + 3*time.Second + 40*time.Millisecond: "1h2m3.04s",
	} {
		if got := string(appendReset(nil, d)); got != want {
			t.Errorf("appendReset(%v) = %q, want %q", d, got, want)
		}
	}
	// From a second up it is time.Duration's own format to the millisecond.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10_000; i++ {
		d := time.Second + time.Duration(r.Int64N(int64(48*time.Hour)))
		if got, want := string(appendReset(nil, d)), d.Round(time.Millisecond).String(); got != want {
			t.Fatalf("appendReset(%v) = %q, want %q", d, got, want)
		}
	}
}

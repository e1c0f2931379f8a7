package servertiming

import (
	"net/http"
	"testing"
	"time"
)

func TestGet_ReadsTheNamedMetricsDuration(t *testing.T) {
	for _, c := range []struct {
		headers []string
		want    time.Duration
		ok      bool
	}{
		{[]string{"gateway;dur=0.044, backend;dur=21.92"}, 44 * time.Microsecond, true},
		{[]string{`backend;dur=1, Gateway ; desc="own time" ; dur = 2.5`}, 2500 * time.Microsecond, true},
		{[]string{"backend;dur=1", "gateway;dur=3"}, 3 * time.Millisecond, true}, // a second header line
		{[]string{`gateway;dur="0.5"`}, 500 * time.Microsecond, true},
		{[]string{"gateway"}, 0, false},           // no duration
		{[]string{"gateway;dur=NaN"}, 0, false},   // not a figure
		{[]string{"gateway;dur=-1"}, 0, false},    // negative
		{[]string{"gateway;dur=1e300"}, 0, false}, // absurd
		{[]string{"gateways;dur=1"}, 0, false},    // another metric
		{[]string{"backend;dur=1, wait;dur=2"}, 0, false},
		{nil, 0, false},
	} {
		h := http.Header{}
		for _, v := range c.headers {
			h.Add(Header, v)
		}
		got, ok := Get(h, "gateway")
		if got != c.want || ok != c.ok {
			t.Errorf("%q: %v %v, want %v %v", c.headers, got, ok, c.want, c.ok)
		}
	}
}

// What Append writes, Get reads back, to the microsecond.
func TestAppend_ReadsBackToTheMicrosecond(t *testing.T) {
	durs := map[string]time.Duration{"gateway": 44*time.Microsecond + 900*time.Nanosecond, "backend": 21920 * time.Microsecond, "wait": 3 * time.Second}
	var b []byte
	for _, name := range []string{"gateway", "backend", "wait"} {
		b = Append(b, name, durs[name])
	}
	if string(b) != "gateway;dur=0.044, backend;dur=21.92, wait;dur=3000" {
		t.Fatalf("Append wrote %q", b)
	}
	h := http.Header{Header: {string(b)}}
	for name, d := range durs {
		if got, ok := Get(h, name); !ok || got != d.Truncate(time.Microsecond) {
			t.Errorf("%s: read %v %v, want %v", name, got, ok, d.Truncate(time.Microsecond))
		}
	}
}

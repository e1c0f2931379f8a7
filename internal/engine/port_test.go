package engine

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"llmgate/internal/config"
)

func TestParsePortRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi int
		ok     bool
	}{
		{"32768\t60999\n", 32768, 60999, true},
		{"1024 65535", 1024, 65535, true},
		{"60999 32768", 0, 0, false},
		{"32768", 0, 0, false},
		{"a b", 0, 0, false},
		{"0 100", 0, 0, false},
		{"1 70000", 0, 0, false},
	} {
		lo, hi, ok := parsePortRange(c.in)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("parsePortRange(%q) = %d, %d, %v; want %d, %d, %v", c.in, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

func TestAutoPortSpans(t *testing.T) {
	for _, c := range []struct {
		lo, hi int
		want   [][2]int
	}{
		{32768, 60999, [][2]int{{20000, 32767}, {61000, 65535}}},
		{49152, 65535, [][2]int{{20000, 49151}}},
		{1024, 65535, nil},
		{20000, 65000, [][2]int{{65001, 65535}}},
		{10000, 15000, [][2]int{{20000, 65535}}},
	} {
		got := autoPortSpans(c.lo, c.hi)
		if len(got) != len(c.want) {
			t.Errorf("autoPortSpans(%d, %d) = %v; want %v", c.lo, c.hi, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("autoPortSpans(%d, %d) = %v; want %v", c.lo, c.hi, got, c.want)
			}
		}
	}
}

// An engine's auto port is never one an outgoing connection could take
// before the engine starts: it lies outside the ephemeral range.
func TestPickPort_StaysOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	if len(autoPortSpans(lo, hi)) == 0 {
		t.Skipf("the ephemeral range %d-%d leaves no port outside it", lo, hi)
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	seen := map[int]bool{}
	for range 20 {
		l, err := pickPort(lo, hi, func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) })
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p >= lo && p <= hi || p < autoPortFloor {
			t.Fatalf("auto port %d: inside the ephemeral range %d-%d or below %d", p, lo, hi, autoPortFloor)
		}
		if seen[p] {
			t.Fatalf("auto port %d handed out twice while held", p)
		}
		seen[p] = true
	}
}

// When every port outside the range is busy, the kernel's choice is used
// rather than no engine at all.
func TestPickPort_FallsBackToTheKernelsChoice(t *testing.T) {
	var asked []string
	l, err := pickPort(32768, 60999, func(addr string) (net.Listener, error) {
		asked = append(asked, addr)
		if addr != "127.0.0.1:0" {
			return nil, errors.New("address already in use")
		}
		return net.Listen("tcp", addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(asked) != 65 || asked[64] != "127.0.0.1:0" {
		t.Fatalf("asked %d addresses, last %q; want 64 tries outside the range, then :0", len(asked), asked[len(asked)-1])
	}
	for _, a := range asked[:64] {
		_, ps, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(ps)
		if p >= 32768 && p <= 60999 || p < autoPortFloor {
			t.Fatalf("tried %s: inside the ephemeral range or below %d", a, autoPortFloor)
		}
	}
	if _, err := pickPort(1024, 65535, func(string) (net.Listener, error) { return nil, errors.New("no ports") }); err == nil {
		t.Fatal("pickPort with no port anywhere: no error")
	}
}

// The manager gives every engine without a port one of its own, outside
// the ephemeral range.
func TestNew_AutoPortsAreDistinctAndOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	if len(autoPortSpans(lo, hi)) == 0 {
		t.Skipf("the ephemeral range %d-%d leaves no port outside it", lo, hi)
	}
	src := "engines:\n"
	for i := range 4 {
		src += fmt.Sprintf("  e%d:\n    cmd: server --port ${PORT}\n    models: [m%d]\n", i, i)
	}
	cfg, err := config.Load(strings.NewReader(src), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{StateFile: filepath.Join(t.TempDir(), StateFileName)}); err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for name, e := range cfg.Engines {
		if e.Port >= lo && e.Port <= hi || e.Port < autoPortFloor {
			t.Errorf("engine %s: port %d inside the ephemeral range %d-%d or below %d", name, e.Port, lo, hi, autoPortFloor)
		}
		if other, dup := seen[e.Port]; dup {
			t.Errorf("engines %s and %s share port %d", name, other, e.Port)
		}
		seen[e.Port] = name
		if want := fmt.Sprintf("http://127.0.0.1:%d/v1", e.Port); cfg.Backends[name].BaseURL != want {
			t.Errorf("engine %s: backend URL %s, want %s", name, cfg.Backends[name].BaseURL, want)
		}
	}
}

package engine

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// An engine without a fixed port gets one when the gateway starts, but its
// process may start much later (on the first request for its model). A
// port from the kernel's ephemeral range (what listening on :0 hands out)
// can meanwhile be taken by any outgoing connection of the machine as its
// local port, and the engine then fails to bind it. Ports below that
// range are never handed out to connections, only to a program that asks
// for one by number, so the auto ports come from there.

// autoPortFloor is the lowest auto port: above the well-known and most
// registered service ports (5432, 6379, 8000, 8080, 11434, …).
const autoPortFloor = 20000

// ephemeralRange returns the machine's range of ports for outgoing
// connections: Linux's ip_local_port_range, else the IANA range that
// macOS, the BSDs and Windows use.
func ephemeralRange() (lo, hi int) {
	if runtime.GOOS == "linux" {
		if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
			if lo, hi, ok := parsePortRange(string(b)); ok {
				return lo, hi
			}
		}
		return 32768, 60999 // Linux's default
	}
	return 49152, 65535
}

func parsePortRange(s string) (lo, hi int, ok bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, false
	}
	return lo, hi, true
}

// autoPortSpans returns the spans auto ports are drawn from: between
// autoPortFloor and the ephemeral range, and above it. Empty when the
// ephemeral range covers them all.
func autoPortSpans(lo, hi int) [][2]int {
	var spans [][2]int
	if lo-1 >= autoPortFloor {
		spans = append(spans, [2]int{autoPortFloor, lo - 1})
	}
	if from := max(hi+1, autoPortFloor); from <= 65535 {
		spans = append(spans, [2]int{from, 65535})
	}
	return spans
}

// pickPort reserves a free loopback port for an engine, outside the
// ephemeral range where it can; the listener is closed by the caller once
// every engine has its port (so that two engines never get the same one).
func pickPort(lo, hi int, listen func(addr string) (net.Listener, error)) (net.Listener, error) {
	spans := autoPortSpans(lo, hi)
	size := 0
	for _, s := range spans {
		size += s[1] - s[0] + 1
	}
	var lastErr error
	for try := 0; try < 64 && size > 0; try++ {
		n := rand.IntN(size)
		port := 0
		for _, s := range spans {
			if w := s[1] - s[0] + 1; n < w {
				port = s[0] + n
				break
			} else {
				n -= w
			}
		}
		l, err := listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return l, nil
		}
		lastErr = err
	}
	// Every port outside the range is taken (or there is none): one from
	// the kernel, which works unless something takes it before the engine
	// starts.
	l, err := listen("127.0.0.1:0")
	if err != nil {
		if lastErr != nil {
			err = fmt.Errorf("%w (and outside the ephemeral range: %v)", err, lastErr)
		}
		return nil, err
	}
	return l, nil
}

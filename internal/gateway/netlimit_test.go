package gateway

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"llmgate/internal/config"
)

// max_connections caps the client connections the listener keeps open:
// with two idle keep-alive connections open, a third client's request
// waits, unanswered but not refused, until one of them closes.
func TestMaxConnections_HoldsClientsBeyondTheCap(t *testing.T) {
	two := 2
	e := startEnv(t, func(c *config.Config) { c.MaxConnections = &two })
	get := func(c net.Conn, br *bufio.Reader) error {
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	var open []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", e.g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := get(c, bufio.NewReader(c)); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		open = append(open, c)
	}
	third, err := net.Dial("tcp", e.g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	done := make(chan error, 1)
	go func() {
		third.SetDeadline(time.Now().Add(10 * time.Second))
		done <- get(third, bufio.NewReader(third))
	}()
	select {
	case err := <-done:
		t.Fatalf("a third connection was served (%v) with max_connections: 2", err)
	case <-time.After(300 * time.Millisecond):
	}
	open[0].Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the held connection, once a slot was free: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held connection was not served after another closed")
	}
}

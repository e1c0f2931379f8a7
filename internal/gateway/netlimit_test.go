package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"llmgate/internal/config"
)

// get sends a GET /healthz on c and reads the answer.
func get(c net.Conn, br *bufio.Reader) error {
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

// max_connections counts only connections that hold work: with two
// keep-alive connections idle between requests, a third client is served
// at once (the longest idle connection is closed for it), and the client
// of that one reads EOF, as from net/http's idle time-out.
func TestMaxConnections_IdleConnectionsMakeRoom(t *testing.T) {
	two := 2
	e := startEnv(t, func(c *config.Config) { c.MaxConnections = &two })
	var idle []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", e.g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if err := get(c, br); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		idle = append(idle, c)
	}
	third, err := net.Dial("tcp", e.g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	third.SetDeadline(time.Now().Add(10 * time.Second))
	if err := get(third, bufio.NewReader(third)); err != nil {
		t.Fatalf("a third client with two idle connections open at max_connections 2: %v", err)
	}
	if n, err := idle[0].Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the longest idle connection read %d, %v; want EOF (closed to make room)", n, err)
	}
}

// Connections holding work keep their slots: with two connections in the
// middle of a request (headers sent, body still coming), a third client
// waits, unanswered but not refused, until one of them closes.
func TestMaxConnections_HoldsClientsBeyondTheCap(t *testing.T) {
	two := 2
	e := startEnv(t, func(c *config.Config) { c.MaxConnections = &two })
	var busy []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", e.g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testMaster+"\r\nContent-Length: 100\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
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
		t.Fatalf("a third connection was served (%v) with two busy at max_connections: 2", err)
	case <-time.After(300 * time.Millisecond):
	}
	busy[0].Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the held connection, once a slot was free: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held connection was not served after another closed")
	}
}

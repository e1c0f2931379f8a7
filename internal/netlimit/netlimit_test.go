package netlimit

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

func listen(t *testing.T, max int) (*Listener, *testenv.SyncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	l, ok := Limit(ln, max, slog.New(slog.NewTextHandler(&logs, nil))).(*Listener)
	if !ok {
		t.Fatalf("Limit(ln, %d) did not wrap the listener", max)
	}
	t.Cleanup(func() { l.Close() })
	return l, &logs
}

// accepted runs Accept in the background and delivers its connections.
func accepted(l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c
		}
	}()
	return ch
}

func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func next(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted within 5s")
		return nil
	}
}

// At the cap, with no connection idle, a further connection is held, not
// handed out and not closed, until an open one closes; a client held at
// the cap logs one warning that names the setting to raise.
func TestLimit_HoldsConnectionsBeyondTheCapUntilOneCloses(t *testing.T) {
	l, logs := listen(t, 2)
	ch := accepted(l)
	dial(t, l)
	dial(t, l)
	first, _ := next(t, ch), next(t, ch)
	third := dial(t, l) // the kernel completes the handshake; the server holds it
	select {
	case <-ch:
		t.Fatal("a third connection was accepted with max_connections 2")
	case <-time.After(200 * time.Millisecond):
	}
	third.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := third.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("held connection: read gave %v, want it still open (a time-out)", err)
	}
	if n := strings.Count(logs.String(), "connection limit reached"); n != 1 || !strings.Contains(logs.String(), "max_connections=2") || !strings.Contains(logs.String(), "raise max_connections") {
		t.Fatalf("want one warning naming max_connections, got %d:\n%s", n, logs)
	}
	first.Close()
	next(t, ch) // the third is accepted once a slot is free
	if l.Open() != 2 {
		t.Fatalf("open = %d, want 2", l.Open())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The warning is not repeated for every held connection.
func TestLimit_WarnsAtMostOnceAMinute(t *testing.T) {
	l, logs := listen(t, 1)
	ch := accepted(l)
	dial(t, l)
	c := next(t, ch)
	for i := 0; i < 5; i++ {
		dial(t, l)  // beyond the cap: held
		if i == 0 { // the accept loop holds it and warns
			testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "connection limit reached") },
				"a warning once a client was held at the cap")
		}
		c.Close()
		c = next(t, ch)
	}
	if n := strings.Count(logs.String(), "connection limit reached"); n != 1 {
		t.Fatalf("%d warnings for 5 times at the cap within a minute, want 1:\n%s", n, logs)
	}
}

// At the cap, a connection idle between requests is closed so that a new
// client is accepted at once; the client of the idle one reads EOF. No
// warning: nobody waited.
func TestLimit_AtTheCapAnIdleConnectionMakesRoom(t *testing.T) {
	l, logs := listen(t, 1)
	ch := accepted(l)
	idleClient := dial(t, l)
	idle := next(t, ch)
	l.ConnState(idle, http.StateNew)
	l.ConnState(idle, http.StateActive)
	l.ConnState(idle, http.StateIdle) // its request is answered; keep-alive
	dial(t, l)
	next(t, ch)
	idleClient.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idleClient.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("the idle connection's client read %d, %v; want EOF (closed to make room)", n, err)
	}
	if l.Open() != 1 || l.ClosedIdle() != 1 {
		t.Fatalf("open %d, closed idle %d; want 1 and 1", l.Open(), l.ClosedIdle())
	}
	idle.Close() // the server's own Close, once its read fails: no slot given back twice
	if l.Open() != 1 {
		t.Fatalf("open %d after the server closed the idle connection too, want 1", l.Open())
	}
	if strings.Contains(logs.String(), "connection limit reached") {
		t.Fatalf("warned though no client waited:\n%s", logs)
	}
}

// A connection holding work (a request being read or served, or a new
// one with no request yet) is never closed to make room: the new client
// waits, and is accepted as soon as that connection goes idle, which then
// is closed for it.
func TestLimit_ActiveConnectionsAreNotClosed(t *testing.T) {
	for _, state := range []http.ConnState{http.StateNew, http.StateActive} {
		t.Run(state.String(), func(t *testing.T) {
			l, _ := listen(t, 1)
			ch := accepted(l)
			busyClient := dial(t, l)
			busy := next(t, ch)
			l.ConnState(busy, http.StateNew)
			if state == http.StateActive {
				l.ConnState(busy, http.StateActive)
			}
			dial(t, l)
			select {
			case <-ch:
				t.Fatalf("a second connection was accepted while the first was %s", state)
			case <-time.After(200 * time.Millisecond):
			}
			// The busy connection is untouched: it still carries bytes.
			if _, err := busy.Write([]byte("x")); err != nil {
				t.Fatalf("write to the busy connection: %v", err)
			}
			busyClient.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := busyClient.Read(make([]byte, 1)); n != 1 || err != nil {
				t.Fatalf("the busy connection's client read %d, %v", n, err)
			}
			l.ConnState(busy, http.StateActive)
			l.ConnState(busy, http.StateIdle)
			next(t, ch)
			if n, err := busyClient.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
				t.Fatalf("after going idle, its client read %d, %v; want EOF", n, err)
			}
		})
	}
}

// A connection that was idle and took a new request is busy again.
func TestLimit_IdleThenActiveIsNotClosed(t *testing.T) {
	l, _ := listen(t, 1)
	ch := accepted(l)
	dial(t, l)
	c := next(t, ch)
	l.ConnState(c, http.StateIdle)
	l.ConnState(c, http.StateActive)
	dial(t, l)
	select {
	case <-ch:
		t.Fatal("a connection serving its second request was closed to make room")
	case <-time.After(200 * time.Millisecond):
	}
	c.Close()
	next(t, ch)
}

// The connection idle the longest is closed first.
func TestLimit_ClosesTheLongestIdleFirst(t *testing.T) {
	l, _ := listen(t, 2)
	ch := accepted(l)
	aClient, bClient := dial(t, l), dial(t, l)
	a, b := next(t, ch), next(t, ch)
	l.ConnState(b, http.StateIdle)
	l.ConnState(a, http.StateIdle)
	dial(t, l)
	next(t, ch)
	bClient.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bClient.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the longest idle connection: read %v, want EOF", err)
	}
	a.Write([]byte("x"))
	aClient.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := aClient.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("the more recently idle connection: read %d, %v; want it open", n, err)
	}
}

// The HTTP server reports a TLS connection, not the listener's: it is
// recognised underneath.
func TestLimit_ConnStateSeesThroughTLS(t *testing.T) {
	l, _ := listen(t, 1)
	ch := accepted(l)
	dial(t, l)
	c := next(t, ch)
	l.ConnState(tls.Server(c, &tls.Config{}), http.StateIdle)
	dial(t, l)
	next(t, ch)
	if l.ClosedIdle() != 1 {
		t.Fatal("the idle TLS connection was not closed to make room")
	}
}

// A slot comes back once however often a connection is closed.
func TestLimit_DoubleCloseFreesOneSlot(t *testing.T) {
	l, _ := listen(t, 2)
	ch := accepted(l)
	dial(t, l)
	c := next(t, ch)
	closed := make(chan struct{})
	go func() {
		c.Close()
		c.Close() // would block on an empty slot set if it gave a slot back again
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the second Close blocked: it tried to give back a slot twice")
	}
	dial(t, l)
	dial(t, l)
	dial(t, l)
	next(t, ch)
	next(t, ch)
	select {
	case <-ch:
		t.Fatal("three connections open with max_connections 2: a double Close gave back two slots")
	case <-time.After(200 * time.Millisecond):
	}
}

// Close ends an Accept that waits for a slot.
func TestLimit_CloseEndsAWaitingAccept(t *testing.T) {
	l, logs := listen(t, 1)
	ch := accepted(l)
	dial(t, l)
	next(t, ch)
	dial(t, l) // beyond the cap: held
	// The warning is logged as Accept begins to wait for a slot.
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "connection limit reached") },
		"Accept waiting for a slot")
	l.Close()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("accepted a connection after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waiting 5s after Close")
	}
}

// max 0 (or less) is no cap: the listener is returned as it is.
func TestLimit_ZeroIsNoCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := Limit(ln, 0, nil); got != ln {
		t.Fatalf("Limit(ln, 0) = %T, want ln itself", got)
	}
}

// The accepted connections can be half-closed.
func TestLimit_ConnsKeepCloseWrite(t *testing.T) {
	l, _ := listen(t, 1)
	ch := accepted(l)
	client := dial(t, l)
	c := next(t, ch)
	defer c.Close()
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		t.Fatal("no CloseWrite on an accepted connection")
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("client read after the server's CloseWrite: %d, %v; want EOF", n, err)
	}
}

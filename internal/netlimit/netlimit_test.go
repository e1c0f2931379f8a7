package netlimit

import (
	"errors"
	"llmgate/internal/testenv"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
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

// At the cap a further connection is held, not accepted and not closed,
// until an open one closes; reaching the cap logs one warning that names
// the setting to raise.
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
	for i := 0; i < 5; i++ {
		dial(t, l)
		c := next(t, ch)
		if i == 0 { // the accept loop reaches the cap and warns
			for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "connection limit reached"); {
				if time.Now().After(deadline) {
					t.Fatal("no warning 5s after reaching the cap")
				}
				time.Sleep(5 * time.Millisecond)
			}
		} else {
			time.Sleep(20 * time.Millisecond) // let Accept reach the cap again
		}
		c.Close()
	}
	if n := strings.Count(logs.String(), "connection limit reached"); n != 1 {
		t.Fatalf("%d warnings for 5 times at the cap within a minute, want 1:\n%s", n, logs)
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
	l, _ := listen(t, 1)
	ch := accepted(l)
	dial(t, l)
	next(t, ch)
	time.Sleep(20 * time.Millisecond) // Accept now waits for a slot
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

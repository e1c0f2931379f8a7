package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pair returns a wrapped client side and the plain server side of a
// loopback TCP connection.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-acc
	if srv == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	w := Wrap(c)
	rc, ok := w.(*Conn)
	if runtime.GOOS != "linux" {
		t.Skip("raw path is Linux-only")
	}
	if !ok {
		t.Fatalf("Wrap(*net.TCPConn) = %T, want *rawio.Conn", w)
	}
	return rc, srv
}

func TestWrap_LeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want the same conn", got)
	}
}

func TestConn_RoundTripAndEOF(t *testing.T) {
	c, srv := pair(t)
	go func() {
		buf := make([]byte, 5)
		io.ReadFull(srv, buf)
		srv.Write(bytes.ToUpper(buf))
		srv.Close()
	}()
	if n, err := c.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "HELLO" {
		t.Fatalf("ReadAll = %q, %v; want HELLO, nil (EOF at close)", got, err)
	}
}

// A write larger than the socket buffers goes out in parts, waiting for
// the peer in the netpoller, and arrives whole and in order.
func TestConn_LargeWriteWithSlowReader(t *testing.T) {
	c, srv := pair(t)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 64<<10)
		for b.Len() < len(payload) {
			n, err := srv.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
			if b.Len() < 1<<20 {
				time.Sleep(time.Millisecond) // slow at first: the writer must wait for room
			}
		}
		got <- b.Bytes()
	}()
	if n, err := c.Write(payload); n != len(payload) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, payload) {
		t.Fatalf("peer received %d bytes, not the payload", len(b))
	}
}

func TestConn_ReadDeadlineIsATimeout(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past deadline: %v, want a net.Error with Timeout()", err)
	}
	// The deadline can be lifted and the connection used again.
	c.SetReadDeadline(time.Time{})
}

func TestConn_CloseUnblocksRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked after Close")
	}
}

// A reset by the peer reads as the same error net.Conn gives: an
// *net.OpError wrapping ECONNRESET, with the operation in its message.
func TestConn_ResetIsAnOpError(t *testing.T) {
	c, srv := pair(t)
	srv.(*net.TCPConn).SetLinger(0)
	srv.Write([]byte("x"))
	srv.Close() // RST, since unread data / linger 0
	time.Sleep(20 * time.Millisecond)
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		if _, err = c.Write([]byte("ping")); err == nil {
			_, err = c.Read(make([]byte, 8))
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("error after peer reset: %v, want ECONNRESET or EPIPE", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || (oe.Op != "read" && oe.Op != "write") {
		t.Fatalf("error %v (%T) is not a *net.OpError naming read or write", err, err)
	}
}

func TestSetEnabled_OffLeavesConnsAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	SetEnabled(false)
	defer SetEnabled(true)
	if got := Wrap(c); got != c {
		t.Fatalf("Wrap with the raw path off = %T, want the conn itself", got)
	}
}

// wrapped is a connection wrapper that exposes the socket, as the
// connection limiter's does.
type wrapped struct{ net.Conn }

func (w wrapped) SyscallConn() (syscall.RawConn, error) {
	return w.Conn.(syscall.Conn).SyscallConn()
}

func (w wrapped) CloseWrite() error { return w.Conn.(*net.TCPConn).CloseWrite() }

// A wrapper of a TCP connection that exposes its syscall.Conn takes the
// raw path too, and CloseWrite reaches the socket through both wrappers.
func TestWrap_TakesTheRawPathThroughAWrapperAndCloseWriteWorks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("raw path is Linux-only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := <-acc
	defer srv.Close()
	w, ok := Wrap(wrapped{c}).(*Conn)
	if !ok {
		t.Fatal("a wrapper exposing SyscallConn did not take the raw path")
	}
	if _, err := w.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := w.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(srv)
	if err != nil || string(got) != "hi" {
		t.Fatalf("server read %q, %v: want the bytes, then EOF from the half-close", got, err)
	}
}

func TestFile_AppendsAllBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	w := NewFile(f)
	var want []byte
	for i := 0; i < 100; i++ {
		line := []byte(strings.Repeat("x", i) + "\n")
		if n, err := w.Write(line); err != nil || n != len(line) {
			t.Fatalf("write %d: %d %v", i, n, err)
		}
		want = append(want, line...)
	}
	f.Close()
	if _, err := w.Write([]byte("after close")); err == nil {
		t.Fatal("a write to a closed file succeeded")
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes, want %d (%v)", len(got), len(want), err)
	}
}

package h1server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// connReader reads from the connection for the conn's bufio.Reader, limits
// header bytes, and runs the background read that notices a client that
// leaves while its request runs.
type connReader struct {
	c      *conn
	remain int64 // header bytes left; only the serving goroutine touches remain and the tap
	// tap keeps the bytes read while tapping is set: readRequest's copy of
	// the request header.
	tap     []byte
	tapping bool

	mu          sync.Mutex
	cond        *sync.Cond
	inRead      bool // a background read is running
	aborting    bool
	handlerDone bool
	bodyDone    bool
	hasByte     bool
	byteBuf     [1]byte
	cancel      context.CancelFunc
}

func (cr *connReader) Read(p []byte) (int, error) {
	if cr.remain <= 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > cr.remain {
		p = p[:cr.remain]
	}
	cr.mu.Lock()
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		cr.mu.Unlock()
		cr.remain--
		if cr.tapping {
			cr.tap = append(cr.tap, p[0])
		}
		return 1, nil
	}
	cr.mu.Unlock()
	n, err := cr.c.rwc.Read(p)
	cr.remain -= int64(n)
	if cr.tapping {
		cr.tap = append(cr.tap, p[:n]...)
	}
	return n, err
}

func (cr *connReader) begin(cancel context.CancelFunc, bodyDone bool) {
	cr.mu.Lock()
	cr.cancel, cr.bodyDone, cr.handlerDone = cancel, bodyDone, false
	cr.mu.Unlock()
}

func (cr *connReader) sawBodyEOF() {
	cr.mu.Lock()
	cr.bodyDone = true
	cr.mu.Unlock()
}

// startWatch starts the background read if the request's body has been read
// and the handler still runs. It reports whether the request needs no
// further look (watch started, or the handler is done).
func (cr *connReader) startWatch() bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.handlerDone || cr.inRead || cr.hasByte {
		return true
	}
	if !cr.bodyDone {
		return false // the handler still reads the body: a read error tells it
	}
	cr.inRead = true
	go cr.backgroundRead()
	return true
}

func (cr *connReader) backgroundRead() {
	n, err := cr.c.rwc.Read(cr.byteBuf[:])
	cr.mu.Lock()
	if n == 1 {
		cr.hasByte = true // a pipelined request: keep its first byte
	}
	var ne net.Error
	if err != nil && !(cr.aborting && errors.As(err, &ne) && ne.Timeout()) {
		if cr.cancel != nil { // the client went away
			cr.cancel()
		}
	}
	cr.aborting = false
	cr.inRead = false
	cr.mu.Unlock()
	cr.cond.Broadcast()
}

// end stops a background read; the serving goroutine owns the connection
// again when it returns.
func (cr *connReader) end() {
	cr.mu.Lock()
	cr.handlerDone = true
	if cr.inRead {
		cr.aborting = true
		cr.c.rwc.SetReadDeadline(aLongTimeAgo)
		for cr.inRead {
			cr.cond.Wait()
		}
		cr.c.rwc.SetReadDeadline(time.Time{})
	}
	cr.mu.Unlock()
}

var aLongTimeAgo = time.Unix(1, 0)

// reqBody is the handler's request body: it sends 100 Continue on the first
// read when the client asked for it, and tells the connection when the body
// has been read to its end.
type reqBody struct {
	rc io.ReadCloser
	c  *conn
	w  *response
	// parsed is the request as http.ReadRequest returned it: its body
	// sets parsed.Trailer, which the handler's copy must then show.
	parsed *http.Request
	// continueWrapped: the client asked for 100 Continue (net/http's
	// expectContinueReader); expectContinue: it has not been sent yet.
	continueWrapped bool
	expectContinue  bool
	closed          bool
	eof             bool
	n               int64 // bytes read so far
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

func (b *reqBody) read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.expectContinue {
		b.expectContinue = false
		if !b.w.committed {
			b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := b.c.bw.Flush(); err != nil {
				return 0, err
			}
		}
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
		b.w.req.Trailer = b.parsed.Trailer // read with the body's end
		b.c.r.sawBodyEOF()
	} else if err != nil {
		b.w.closeAfter = true // the framing is lost
	}
	return n, err
}

func (b *reqBody) Close() error {
	b.closed = true
	return nil
}

// tooBigToDrain reports whether more than maxDrain bytes of a declared
// Content-Length are still unread.
func (b *reqBody) tooBigToDrain() bool {
	cl := b.w.req.ContentLength
	return cl > 0 && cl-b.n > maxDrain
}

// discard reads what the handler left of the body, up to maxDrain, so the
// connection can serve the next request, and reports whether it could
// (net/http's discard before an answer's header).
func (b *reqBody) discard() bool {
	if b.eof {
		return true
	}
	if b.expectContinue || b.tooBigToDrain() {
		return false // not sent yet (the client waits for 100 Continue), or too much of it
	}
	n, err := b.consume(maxDrain + 1)
	return n <= maxDrain && err == io.EOF
}

// drain reads what is left of the body after the handler returned, as
// net/http's Close of a request body does, and reports whether the
// connection can serve another request. early: it gave up on a long body
// (more than maxDrain bytes declared, or maxDrain bytes brought no end),
// whose client may still be sending.
func (b *reqBody) drain() (ok, early bool) {
	if b.eof {
		return true, false
	}
	if b.expectContinue {
		return false, false
	}
	if b.tooBigToDrain() {
		return false, true
	}
	n, err := b.consume(maxDrain)
	if n == maxDrain {
		return false, true
	}
	return err == io.EOF, false
}

// consume reads and drops up to max bytes of the body, under a read
// deadline (net/http has none unless ReadTimeout is set).
func (b *reqBody) consume(max int64) (int64, error) {
	b.c.rwc.SetReadDeadline(time.Now().Add(b.c.s.readHeaderTimeout()))
	defer b.c.rwc.SetReadDeadline(time.Time{})
	return io.CopyN(io.Discard, readerFunc(b.read), max)
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

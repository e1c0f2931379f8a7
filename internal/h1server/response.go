package h1server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the handler's http.ResponseWriter. Body bytes are kept until
// the first flush, a full buffer or the handler's return, so that a short
// answer goes out with a Content-Length; after that they are written
// through, chunked unless the handler set a Content-Length.
type response struct {
	c           *conn
	req         *http.Request
	body        *reqBody
	header      http.Header
	cancel      context.CancelFunc
	status      int
	wroteHeader bool
	committed   bool
	buf         []byte
	cl          int64 // declared Content-Length, -1 if none
	written     int64
	chunked     bool
	discard     bool // HEAD or a status without a body: body bytes are dropped
	closeAfter  bool
	// wantsClose and wants10KeepAlive: what the request asked of the
	// connection, read before the handler ran.
	wantsClose       bool
	wants10KeepAlive bool
	err              error
}

func (w *response) Header() http.Header { return w.header }

// SetReadDeadline sets the connection's read deadline for the handler, as
// net/http's does (http.ResponseController): a handler bounds the time a
// client takes to send its body. The server sets its own read deadline
// again before the next request.
func (w *response) SetReadDeadline(t time.Time) error { return w.c.rwc.SetReadDeadline(t) }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.committed {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.wroteHeader = true
	w.status = code
	if v := w.header.Get("Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n >= 0 {
			w.cl = n
		} else {
			w.c.s.logger().Warn("http: handler set an invalid Content-Length; dropped", "value", v)
			w.header.Del("Content-Length")
		}
	}
	w.discard = w.req.Method == http.MethodHead || !bodyAllowed(code)
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

func (w *response) writeInformational(code int) {
	fmt.Fprintf(w.c.bw, "HTTP/1.1 %d %s\r\n", code, statusText(code))
	w.header.Write(w.c.bw)
	w.c.bw.WriteString("\r\n")
	w.setErr(w.c.bw.Flush())
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if len(w.buf)+len(p) <= bufferBeforeCommit {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.commit(false, p)
		if w.err != nil {
			return 0, w.err
		}
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

func (w *response) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// commit writes the status line and headers, then the buffered body.
// next is the first body bytes after the buffered ones, for sniffing the
// Content-Type when nothing was buffered.
func (w *response) commit(final bool, next []byte) {
	w.committed = true
	h := w.header
	req := w.req
	switch {
	case !bodyAllowed(w.status):
	case w.cl >= 0:
	case final:
		if req.Method != http.MethodHead || len(w.buf) > 0 {
			h["Content-Length"] = []string{strconv.Itoa(len(w.buf))}
		}
	case req.Method == http.MethodHead:
	case req.ProtoAtLeast(1, 1):
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
	default:
		w.closeAfter = true // HTTP/1.0 and no length: the body ends at close
	}
	if _, ok := h["Content-Type"]; !ok && bodyAllowed(w.status) {
		if sniff := w.buf; len(sniff) > 0 || len(next) > 0 {
			if len(sniff) == 0 {
				sniff = next
			}
			h["Content-Type"] = []string{http.DetectContentType(sniff)}
		}
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{httpDate()}
	}
	// Keep-alive as net/http decides it: an HTTP/1.0 client that asked
	// for it keeps the connection when the answer's length is known.
	_, hasCL := h["Content-Length"]
	if w.wants10KeepAlive && (req.Method == http.MethodHead || hasCL || !bodyAllowed(w.status)) {
		// kept
	} else if !req.ProtoAtLeast(1, 1) || w.wantsClose {
		w.closeAfter = true
	}
	if strings.EqualFold(h.Get("Connection"), "close") {
		w.closeAfter = true
	}
	w.settleRequestBody()
	switch {
	case w.closeAfter || w.c.s.shutdown.Load():
		h["Connection"] = []string{"close"}
	case w.wants10KeepAlive:
		if _, set := h["Connection"]; !set {
			h["Connection"] = []string{"keep-alive"}
		}
	}
	bw := w.c.bw
	proto := "HTTP/1.1 "
	if !req.ProtoAtLeast(1, 1) {
		proto = "HTTP/1.0 "
	}
	bw.WriteString(proto)
	bw.WriteString(strconv.Itoa(w.status))
	bw.WriteByte(' ')
	bw.WriteString(statusText(w.status))
	bw.WriteString("\r\n")
	writeHeaderFields(bw, h)
	bw.WriteString("\r\n")
	if len(w.buf) > 0 {
		w.writeBody(w.buf)
		w.buf = nil
	}
}

// settleRequestBody decides, before the answer's header goes out, what
// becomes of a request body the handler has not read to its end, as
// net/http does: a rest of up to maxDrain bytes is read and dropped (and
// the body closed) so the connection can serve another request; a larger
// one, or a body refused with 413, ends the connection after the answer,
// which then says Connection: close. Reading the rest only after the
// answer would take a client's next request, sent on seeing a keep-alive
// answer, for body bytes.
func (w *response) settleRequestBody() {
	b := w.body
	if b.continueWrapped {
		// net/http never discards such a body: a client that was not
		// told to continue has not sent it.
		if !b.eof {
			w.closeAfter = true
		}
		return
	}
	if w.closeAfter || w.req.ContentLength == 0 || w.c.s.shutdown.Load() {
		return
	}
	switch {
	case b.eof:
		b.closed = true // as net/http: the body reads ErrBodyReadAfterClose from now on
	case b.closed:
		// Closed unread by the handler: net/http's Close looks for the
		// end within maxDrain bytes.
		if ok, early := b.drain(); !ok {
			w.closeAfter = true
			w.c.linger = early
		}
	case w.status == http.StatusRequestEntityTooLarge || b.tooBigToDrain():
		// The only departure from net/http: a handler that refuses a body
		// as too large with a small rest of it unread also ends the
		// connection (net/http learns it from MaxBytesReader, which it
		// alone can implement).
		w.closeAfter = true
		w.c.linger = true // the client may still be sending the body
	case b.discard():
		b.closed = true
	default:
		w.closeAfter = true // more than maxDrain bytes, or a broken body
	}
}

// writeHeaderFields writes h as http.Header.Write does (fields with invalid
// names dropped, CR and LF in values turned to spaces) but unsorted: the
// order of header fields carries no meaning, and sorting costs a pool
// round trip per answer.
func writeHeaderFields(bw *bufio.Writer, h http.Header) {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			if strings.ContainsAny(v, "\r\n") {
				v = headerNewlineToSpace.Replace(v)
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
			bw.WriteString("\r\n")
		}
	}
}

var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

type cachedDate struct {
	sec int64
	s   string
}

var dateCache atomic.Pointer[cachedDate]

// httpDate is the Date header value, formatted once a second.
func httpDate() string {
	now := time.Now()
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &cachedDate{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}

func (w *response) writeBody(p []byte) {
	if w.discard || w.err != nil {
		return
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.setErr(err)
		return
	}
	_, err := bw.Write(p)
	w.setErr(err)
}

func (w *response) setErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
		w.closeAfter = true
		w.cancel() // the client is gone: stop the work for it
	}
}

// Flush sends what has been written so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false, nil)
	}
	if w.err == nil {
		w.setErr(w.c.bw.Flush())
	}
	return w.err
}

// finish completes the answer after the handler returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true, nil)
	}
	if w.chunked && w.err == nil {
		_, err := w.c.bw.WriteString("0\r\n\r\n")
		w.setErr(err)
	}
	if w.err == nil {
		w.setErr(w.c.bw.Flush())
	}
	if w.cl >= 0 && w.written != w.cl && !w.discard {
		w.closeAfter = true // the client waits for bytes that will not come
	}
}

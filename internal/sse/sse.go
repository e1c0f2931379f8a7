// Package sse reads and writes Server-Sent Events as LLM APIs use them:
// "event:" and "data:" fields, a flush per event (or, held, when the caller
// is about to wait), "data: [DONE]" to end OpenAI streams, and comment
// lines for keep-alives.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
)

// Event is one SSE event. Data holds the joined data lines without the
// trailing newline. Name is empty for unnamed events.
type Event struct {
	Name string
	Data []byte
	ID   string
}

// Done reports whether the event is OpenAI's "[DONE]" terminator.
func (e *Event) Done() bool { return bytes.Equal(e.Data, doneData) }

var doneData = []byte("[DONE]")

// ErrLineTooLong is returned when one line exceeds the reader's limit.
var ErrLineTooLong = errors.New("sse: line too long")

// Reader reads events from a stream. It reuses its buffers: the Event
// returned by Next is valid only until the next call.
type Reader struct {
	// OnComment, when set, is called for each comment line (": ping").
	OnComment func()

	br      *bufio.Reader
	maxLine int
	ev      Event
	data    []byte
	name    []byte
}

// NewReader returns a Reader over r. Lines longer than maxLine bytes are an
// error; maxLine <= 0 means 8 MiB.
func NewReader(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = 8 << 20
	}
	return &Reader{br: bufio.NewReaderSize(r, 32<<10), maxLine: maxLine}
}

// Next returns the next event that carries data or a name. Comment lines are
// skipped, after a call to OnComment when it is set (keep-alives are a sign
// of life even though they carry no event). At the end of the stream it returns io.EOF, or
// io.ErrUnexpectedEOF if the stream ended in the middle of an event.
func (r *Reader) Next() (*Event, error) {
	r.data = r.data[:0]
	r.name = r.name[:0]
	r.ev.ID = ""
	hasData := false
	partial := false
	for {
		line, err := r.readLine()
		if err != nil {
			if err == io.EOF && (hasData || len(r.name) > 0) {
				// A final event without its blank line still counts.
				return r.emit(hasData), nil
			}
			if err == io.EOF && partial {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) == 0 {
			if hasData || len(r.name) > 0 {
				return r.emit(hasData), nil
			}
			continue
		}
		partial = true
		if line[0] == ':' {
			if r.OnComment != nil {
				r.OnComment()
			}
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if hasData {
				r.data = append(r.data, '\n')
			}
			r.data = append(r.data, value...)
			hasData = true
		case "event":
			r.name = append(r.name[:0], value...)
		case "id":
			r.ev.ID = string(value)
		}
	}
}

func (r *Reader) emit(hasData bool) *Event {
	r.ev.Name = string(r.name)
	if hasData {
		r.ev.Data = r.data
	} else {
		r.ev.Data = nil
	}
	return &r.ev
}

// readLine returns one line without its line ending.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		buf := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if len(buf) > r.maxLine {
				return nil, ErrLineTooLong
			}
			line, err = r.br.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	if err != nil && !(err == io.EOF && len(line) > 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, nil
}

// Writer writes events to an http.ResponseWriter and flushes after each,
// or, once held, when told to.
type Writer struct {
	w       io.Writer
	rc      *http.ResponseController
	buf     []byte
	err     error
	hold    bool // writes wait in the response's buffer for Flush
	pending bool // held bytes not flushed yet
}

// NewWriter returns a Writer. If w is an http.ResponseWriter, every event is
// flushed as soon as it is written, until Hold.
func NewWriter(w io.Writer) *Writer {
	sw := &Writer{w: w}
	if rw, ok := w.(http.ResponseWriter); ok {
		sw.rc = http.NewResponseController(rw)
	}
	return sw
}

// SetHeaders sets the response headers for an SSE stream: content type, no
// caching, and no proxy buffering.
func SetHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
}

// Hold makes later writes wait in the response's buffer until Flush, for a
// relay that passes on together the events that arrived together and
// flushes before it waits for more: fewer writes to the client, none later.
func (w *Writer) Hold() { w.hold = true }

// Flush sends what held writes left in the buffer (nothing if none).
func (w *Writer) Flush() error {
	if w.err != nil || !w.pending {
		return w.err
	}
	w.pending = false
	return w.flush()
}

// WriteEvent writes one event with an optional name and flushes (see
// Hold). Data that contains newlines is split into several data lines.
func (w *Writer) WriteEvent(name string, data []byte) error {
	if w.err != nil {
		return w.err
	}
	b := w.buf[:0]
	if name != "" {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	for {
		i := bytes.IndexByte(data, '\n')
		b = append(b, "data: "...)
		if i < 0 {
			b = append(b, data...)
			b = append(b, '\n')
			break
		}
		b = append(b, data[:i]...)
		b = append(b, '\n')
		data = data[i+1:]
	}
	b = append(b, '\n')
	w.buf = b
	return w.write(b)
}

// WriteData writes an unnamed data event and flushes.
func (w *Writer) WriteData(data []byte) error { return w.WriteEvent("", data) }

// WriteDone writes OpenAI's "data: [DONE]" terminator.
func (w *Writer) WriteDone() error { return w.write([]byte("data: [DONE]\n\n")) }

// WriteComment writes a comment line, used as a keep-alive.
func (w *Writer) WriteComment(text string) error {
	return w.write(append(append([]byte(": "), text...), '\n', '\n'))
}

// WriteRaw writes pre-framed bytes (one or more complete events) and flushes.
func (w *Writer) WriteRaw(b []byte) error { return w.write(b) }

// Err returns the first write error, typically because the client went away.
func (w *Writer) Err() error { return w.err }

func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	if w.hold {
		w.pending = true
		return nil
	}
	return w.flush()
}

func (w *Writer) flush() error {
	if w.rc != nil {
		if err := w.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			w.err = err
			return err
		}
	}
	return nil
}

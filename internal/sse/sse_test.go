package sse

import (
	"bytes"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReader_ParsesNamedMultilineAndDone(t *testing.T) {
	in := ": keep-alive\n\nevent: message_start\ndata: {\"a\":1}\n\ndata: line1\r\ndata: line2\r\n\r\ndata: [DONE]\n\n"
	r := NewReader(strings.NewReader(in), 0)
	ev, err := r.Next()
	if err != nil || ev.Name != "message_start" || string(ev.Data) != `{"a":1}` {
		t.Fatalf("first event = %+v, %v", ev, err)
	}
	ev, err = r.Next()
	if err != nil || ev.Name != "" || string(ev.Data) != "line1\nline2" {
		t.Fatalf("second event = %q %q, %v", ev.Name, ev.Data, err)
	}
	ev, err = r.Next()
	if err != nil || !ev.Done() {
		t.Fatalf("third event = %q, %v", ev.Data, err)
	}
	if _, err = r.Next(); err != io.EOF {
		t.Fatalf("end = %v, want io.EOF", err)
	}
}

func TestReader_FinalEventWithoutBlankLineCounts(t *testing.T) {
	r := NewReader(strings.NewReader("data: x"), 0)
	ev, err := r.Next()
	if err != nil || string(ev.Data) != "x" {
		t.Fatalf("got %q, %v", ev.Data, err)
	}
}

func TestReader_LongLines(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	r := NewReader(strings.NewReader("data: "+long+"\n\n"), 0)
	ev, err := r.Next()
	if err != nil || len(ev.Data) != len(long) {
		t.Fatalf("len %d, %v", len(ev.Data), err)
	}
	r = NewReader(strings.NewReader("data: "+long+"\n\n"), 1024)
	if _, err := r.Next(); err != ErrLineTooLong {
		t.Fatalf("err = %v, want ErrLineTooLong", err)
	}
}

func TestWriter_FramesEvents(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	_ = w.WriteEvent("ping", []byte(`{"type":"ping"}`))
	_ = w.WriteData([]byte("a\nb"))
	_ = w.WriteComment("waiting")
	_ = w.WriteDone()
	want := "event: ping\ndata: {\"type\":\"ping\"}\n\ndata: a\ndata: b\n\n: waiting\n\ndata: [DONE]\n\n"
	if buf.String() != want {
		t.Fatalf("got %q\nwant %q", buf.String(), want)
	}
	// Round trip through the reader.
	r := NewReader(&buf, 0)
	var names []string
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		names = append(names, ev.Name+"="+string(ev.Data))
	}
	if got := strings.Join(names, "|"); got != "ping={\"type\":\"ping\"}|=a\nb|=[DONE]" {
		t.Fatalf("round trip = %q", got)
	}
}

func TestReader_OnCommentSeesEachKeepAlive(t *testing.T) {
	r := NewReader(strings.NewReader(": ping\n\n: ping\ndata: a\n\n:\n\ndata: b\n\n"), 0)
	comments := 0
	r.OnComment = func() { comments++ }
	var got []string
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, string(ev.Data))
	}
	if strings.Join(got, ",") != "a,b" || comments != 3 {
		t.Fatalf("events %q, %d comments; want a,b and 3", got, comments)
	}
}

// flushCount is a ResponseWriter that counts flushes.
type flushCount struct {
	*httptest.ResponseRecorder
	n int
}

func (f *flushCount) Flush() { f.n++; f.ResponseRecorder.Flush() }

func TestWriter_HeldWritesWaitForFlush(t *testing.T) {
	rec := &flushCount{ResponseRecorder: httptest.NewRecorder()}
	w := NewWriter(rec)
	if err := w.WriteData([]byte("a")); err != nil || rec.n != 1 {
		t.Fatalf("unheld write: err %v, %d flushes, want 1", err, rec.n)
	}
	w.Hold()
	for _, d := range []string{"b", "c"} {
		if err := w.WriteData([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	if rec.n != 1 {
		t.Fatalf("held writes flushed: %d flushes, want still 1", rec.n)
	}
	if err := w.Flush(); err != nil || rec.n != 2 {
		t.Fatalf("Flush: err %v, %d flushes, want 2", err, rec.n)
	}
	if err := w.Flush(); err != nil || rec.n != 2 {
		t.Fatalf("Flush with nothing held: err %v, %d flushes, want still 2", err, rec.n)
	}
	if got := rec.Body.String(); got != "data: a\n\ndata: b\n\ndata: c\n\n" {
		t.Fatalf("body %q", got)
	}
}

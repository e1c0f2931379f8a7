package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/jsonscan"
	"llmgate/internal/sse"
)

var (
	emptyChoices = []byte(`[]`)
)

// relayStream relays an SSE stream event by event, flushing each, while a
// tap takes usage and timing. The usage-only chunk the gateway asked for is
// dropped when the client did not ask for it. A stream that breaks after
// headers ends with an error event, never a silent truncation.
func (s *Server) relayStream(w http.ResponseWriter, ctx context.Context, c *call, resp *http.Response) {
	h := w.Header()
	sse.SetHeaders(h)
	w.WriteHeader(http.StatusOK)
	c.status = http.StatusOK
	sw := sse.NewWriter(w)
	rd := sse.NewReader(resp.Body, 0)
	for {
		ev, err := rd.Next()
		if err != nil {
			s.endStream(sw, ctx, c, err)
			return
		}
		if ev.Done() {
			_ = sw.WriteDone()
			return
		}
		data := ev.Data
		forward := c.tapChunk(data)
		if !forward {
			continue
		}
		if err := sw.WriteEvent(ev.Name, data); err != nil {
			// The client went away; the deferred cancel stops the upstream.
			c.status, c.errType = 499, "client_closed"
			return
		}
	}
}

// tapChunk inspects one chunk for timing, usage, errors and generated text,
// and reports whether to forward it to the client.
func (c *call) tapChunk(data []byte) bool {
	hasUsage := bytes.Contains(data, keyUsage)
	hasError := bytes.Contains(data, keyError)
	if c.ttft == 0 || hasUsage || hasError {
		sp, err := jsonscan.Find(data, "choices", "usage", "error")
		if err != nil {
			return true
		}
		choicesEmpty := !sp[0].Valid() || bytes.Equal(bytes.TrimSpace(data[sp[0].Start:sp[0].End]), emptyChoices)
		if c.ttft == 0 && !choicesEmpty {
			c.ttft = time.Since(c.start)
		}
		if hasError && !jsonscan.IsNull(data, sp[2]) {
			c.status, c.errType = http.StatusBadGateway, "upstream_stream_error"
		}
		if hasUsage && !jsonscan.IsNull(data, sp[1]) {
			var u openai.Usage
			if json.Unmarshal(data[sp[1].Start:sp[1].End], &u) == nil {
				c.usage, c.haveUsage = u, true
			}
			if choicesEmpty && sp[0].Valid() && !c.clientWantsUsage {
				return false
			}
		}
	}
	c.outChars += approxGeneratedChars(data)
	return true
}

// endStream handles a stream that ended without [DONE].
func (s *Server) endStream(sw *sse.Writer, ctx context.Context, c *call, err error) {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		c.status, c.errType = 499, "client_closed"
		return
	}
	var e *apierror.Error
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		e = apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "stream_cut",
			"backend %q ended the stream before it was complete (no [DONE]); the answer is truncated", c.dep.Backend.Name)
	} else {
		e = c.dep.Backend.Classify(ctx, err)
		if e.Code == "client_closed" {
			c.status, c.errType = 499, "client_closed"
			return
		}
		e.Message = "stream interrupted: " + e.Message
	}
	c.status, c.errType = e.Status, e.Code
	_ = sw.WriteData(openai.MarshalError(e))
}

var genKeys = [][]byte{[]byte(`"content":"`), []byte(`"reasoning_content":"`), []byte(`"arguments":"`), []byte(`"text":"`)}

// approxGeneratedChars counts characters inside generated-text string
// fields. It is only used when a backend reports no usage, so it favours
// speed over exactness (escapes count as one character).
func approxGeneratedChars(data []byte) int {
	n := 0
	for _, k := range genKeys {
		rest := data
		for {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			j := 0
			for j < len(rest) && rest[j] != '"' {
				if rest[j] == '\\' {
					j++
				}
				// Count runes, not bytes: skip UTF-8 continuation bytes.
				if j < len(rest) && rest[j]&0xC0 != 0x80 {
					n++
				}
				j++
			}
			rest = rest[min(j, len(rest)):]
		}
	}
	return n
}

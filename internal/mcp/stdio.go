package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"llmgate/internal/jsonscan"
)

// MaxMessageBytes bounds one JSON-RPC message read from stdin (the MCP
// SDK's own default). A longer line is never held in memory: it is read
// through to its newline, answered with a JSON-RPC error, and the server
// goes on with the next line.
const MaxMessageBytes = 16 << 20

// CodeMessageTooLarge is the JSON-RPC error code of an oversized message
// (JSON-RPC's "Invalid Request").
const CodeMessageTooLarge = -32600

// StdioTransport returns the transport of "llmgate mcp": newline-delimited
// JSON-RPC on in and out (stdin and stdout), with each inbound line held to
// max bytes (MaxMessageBytes when max <= 0). The SDK's own stdio transport
// ends the session on a longer line, which ends the process; here the
// client gets an error for that one message instead.
func StdioTransport(in io.Reader, out io.Writer, max int, log *slog.Logger) mcp.Transport {
	if max <= 0 {
		max = MaxMessageBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &lockedWriter{w: out}
	g := &lineGuard{in: in, br: bufio.NewReaderSize(in, 64<<10), max: max, out: w, log: log}
	// The SDK's own cap stays as a second guard for a message spread over
	// several lines, which no line check sees.
	return &mcp.IOTransport{Reader: g, Writer: w, MaxLineLength: max + 64<<10}
}

// lockedWriter serializes whole-message writes of the SDK and of the line
// guard's errors, so that lines never interleave on stdout.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

// lineGuard passes whole lines of at most max bytes; a longer one is read
// through and dropped, and answered on out.
type lineGuard struct {
	in      io.Reader
	br      *bufio.Reader
	max     int
	out     io.Writer
	log     *slog.Logger
	line    []byte // the line being handed out
	pending []byte // what of it is left to hand out
	err     error  // the read error after the last line
}

// keepBuf is the largest line buffer kept between lines.
const keepBuf = 1 << 20

func (g *lineGuard) Read(p []byte) (int, error) {
	for len(g.pending) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		if cap(g.line) > keepBuf {
			g.line = nil // a large message's buffer is not held for the session
		}
		g.pending, g.err = g.next()
	}
	n := copy(p, g.pending)
	g.pending = g.pending[n:]
	return n, nil
}

// next returns the next line that fits (with its newline), skipping and
// answering those that do not, and the error that ended the input.
func (g *lineGuard) next() ([]byte, error) {
	line := g.line[:0]
	for {
		chunk, err := g.br.ReadSlice('\n')
		if len(line)+len(chunk) > g.max {
			// Its first bytes (copied: the reader's buffer is reused) may
			// name its id.
			first := line
			if len(first) == 0 {
				first = chunk
			}
			head := append([]byte(nil), first[:min(len(first), 4096)]...)
			n := int64(len(line) + len(chunk))
			for err == bufio.ErrBufferFull {
				chunk, err = g.br.ReadSlice('\n')
				n += int64(len(chunk))
			}
			g.refuse(head, n)
			line = line[:0]
			if err != nil {
				g.line = line
				return nil, err
			}
			continue
		}
		if need := len(line) + len(chunk); need > cap(line) {
			// Grow as append would, but never past the limit.
			grown := make([]byte, len(line), min(max(2*cap(line), need), g.max))
			copy(grown, line)
			line = grown
		}
		line = append(line, chunk...)
		g.line = line
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

// refuse answers an oversized message: the error names the limit, and its
// id is the message's own when its first bytes hold a top-level id
// (clients waiting for that request get their answer), else null.
func (g *lineGuard) refuse(head []byte, size int64) {
	id := json.RawMessage("null")
	_ = jsonscan.Members(bytes.TrimSpace(head), func(key []byte, escaped bool, val jsonscan.Span) bool {
		if string(key) != "id" || escaped {
			return true
		}
		if v := head[val.Start:val.End]; json.Valid(v) && (v[0] == '"' || v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
			id = append(json.RawMessage(nil), v...)
		}
		return false
	})
	msg := fmt.Sprintf("message of %d bytes is longer than the %d bytes llmgate mcp reads; it was discarded: send a shorter one", size, g.max)
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{CodeMessageTooLarge, msg}})
	g.log.Warn("mcp: oversized message discarded", "bytes", size, "max", g.max, "id", string(id))
	if _, err := g.out.Write(append(b, '\n')); err != nil {
		g.log.Warn("mcp: cannot answer an oversized message", "err", err)
	}
}

// Close closes the input when it can be closed (stdin), as the SDK's own
// stdio transport does.
func (g *lineGuard) Close() error {
	if c, ok := g.in.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

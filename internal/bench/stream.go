package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fastjson"

	"llmgate/internal/servertiming"
)

// Result is the measurement of one request. Durations are measured on the
// monotonic clock from Origin: the scheduled send time in open-loop runs
// (so a late client cannot hide its own lateness) and the send time in
// closed-loop runs.
type Result struct {
	Index int `json:"index"`
	// Origin is the instant latencies are measured from.
	Origin time.Time `json:"-"`
	// Sent is when the request was handed to the HTTP client.
	Sent time.Time `json:"-"`
	// QueueWait is the time an open-loop request waited for a free slot
	// under --max-concurrency (vLLM's client_queue_time).
	QueueWait time.Duration `json:"-"`
	// DispatchLag is Sent minus the intended send time: the client's own
	// lateness.
	DispatchLag time.Duration `json:"-"`
	// Status is the HTTP status, 0 when no response arrived.
	Status int `json:"status"`
	// TTFT is the arrival of the first chunk with non-empty choices.
	TTFT time.Duration `json:"-"`
	// E2EL is the arrival of the last chunk with non-empty choices.
	E2EL time.Duration `json:"-"`
	// Chunks holds each content chunk's arrival offset from Origin; the
	// first is the TTFT.
	Chunks []time.Duration `json:"-"`
	// ChunkBytes is the text length of each content chunk, used to share
	// the token count across chunks for the per-token ITL estimate.
	ChunkBytes []int32 `json:"-"`
	// ChunkTokens holds cumulative completion tokens per chunk when the
	// server sends usage in every chunk; nil otherwise.
	ChunkTokens []int32 `json:"-"`
	// InputTokens and OutputTokens come from the server's usage when sent;
	// otherwise they are estimates and the Estimated flags are set.
	InputTokens     int  `json:"input_tokens"`
	OutputTokens    int  `json:"output_tokens"`
	InputEstimated  bool `json:"input_tokens_estimated,omitempty"`
	OutputEstimated bool `json:"output_tokens_estimated,omitempty"`
	// EngineWait is set when the request waited for an engine to start
	// (the gateway's waiting comments came before any data): the time
	// until the first data after them. Such a request measures the start,
	// not the server, and is kept out of the latency figures.
	EngineWait time.Duration `json:"-"`
	// ConnRetries counts resends on a fresh connection: the reused one
	// turned out to be closed by the server before it answered anything.
	ConnRetries int `json:"conn_retries,omitempty"`
	// Err is the error kind ("" on success) and ErrDetail a short message.
	Err       string `json:"error,omitempty"`
	ErrDetail string `json:"error_detail,omitempty"`

	// GatewayOverhead is the gateway's own time before the answer began,
	// as an llmgate gateway says in its Server-Timing header (the
	// "gateway" entry); GatewayTimed says the answer had one.
	GatewayOverhead time.Duration `json:"-"`
	GatewayTimed    bool          `json:"-"`

	// CachedTokens is usage.prompt_tokens_details.cached_tokens, the prompt
	// tokens the server's prefix cache served; CachedReported says the
	// server reported it.
	CachedTokens   int  `json:"cached_tokens,omitempty"`
	CachedReported bool `json:"-"`

	outChars int
	// keepText collects the answer's text into text (the agent workload
	// puts it into the next turn's history).
	keepText bool
	text     []byte
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.Err == "" }

// requester sends prepared requests over one HTTP client.
type requester struct {
	client *http.Client
	// fresh resends a request on a new connection when the pooled one it
	// took was already closed (see staleConnection); nil means no resend.
	fresh   *http.Client
	target  *Target
	url     string
	timeout time.Duration
	idBase  string
	// keepText keeps each answer's text in its Result.
	keepText bool
}

// do sends one request and measures it. origin is the instant latencies are
// measured from, or zero for the send time, which is taken just before the
// request is handed to the transport.
func (q *requester) do(ctx context.Context, body []byte, p *Prompt, index int, origin time.Time, res *Result) {
	res.Index = index
	res.keepText = q.keepText
	res.InputTokens = p.InputTokens
	res.InputEstimated = true
	timeout := q.timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, err := q.newRequest(httptrace.WithClientTrace(ctx, trace), body, index)
	if err != nil {
		res.Err, res.ErrDetail = ErrTransport, err.Error()
		return
	}
	res.Sent = time.Now()
	// A zero origin (closed loop) means latency starts at the send itself.
	res.Origin = origin
	if origin.IsZero() {
		res.Origin = res.Sent
	}
	resp, err := q.client.Do(req)
	if err != nil && reused && q.fresh != nil && staleConnection(ctx, err) {
		// Servers such as llama.cpp's close a connection after each
		// streamed answer while saying keep-alive; the pool may hand it
		// out before the close is seen. Nothing was answered on it, so the
		// request is sent again on a new connection, and counted. Latency
		// still runs from the first send.
		res.ConnRetries++
		if req, err = q.newRequest(ctx, body, index); err == nil {
			resp, err = q.fresh.Do(req)
		}
	}
	if err != nil {
		res.Err, res.ErrDetail = classifyTransportError(ctx, err, false), shortErr(err)
		return
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.GatewayOverhead, res.GatewayTimed = servertiming.Get(resp.Header, "gateway")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		res.Err, res.ErrDetail = httpErrKind(resp.StatusCode), errorMessage(b)
		return
	}
	var stream io.Reader = resp.Body
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		// Some servers stream SSE under another content type; look at the
		// first bytes before calling the response unstreamed.
		head := make([]byte, 5)
		n, _ := io.ReadFull(resp.Body, head)
		head = head[:n]
		if !bytes.HasPrefix(head, []byte("data:")) && !bytes.HasPrefix(head, []byte(":")) && !bytes.HasPrefix(head, []byte("event")) {
			rest, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			b := append(head, rest...)
			if bytes.Contains(b, []byte(`"error"`)) {
				res.Err, res.ErrDetail = ErrErrorEvent, errorMessage(b)
				return
			}
			res.Err, res.ErrDetail = ErrNotStreamed, "response is "+ct+", not an SSE stream; the server ignored stream=true"
			return
		}
		stream = io.MultiReader(bytes.NewReader(head), resp.Body)
	}
	readStream(ctx, stream, res)
}

// newRequest builds one attempt of a request.
func (q *requester) newRequest(ctx context.Context, body []byte, index int) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("X-Request-Id", q.idBase+strconv.Itoa(index))
	if q.target.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+q.target.APIKey)
	}
	for k, v := range q.target.Headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// staleConnection reports whether a request failed because the pooled
// connection it was sent on had been closed by the server, before any
// answer: the read found the end of the connection (EOF, a reset, a broken
// pipe, or net/http's "server closed idle connection"). A time-out or a
// cancelled request is not one.
func staleConnection(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection") ||
		strings.Contains(err.Error(), "transport connection broken")
}

// readStream reads an SSE body. Each event is stamped with the time the
// read that delivered its last data line returned, before any JSON is
// parsed, so parsing cost never shows up as latency.
func readStream(ctx context.Context, body io.Reader, res *Result) {
	lr := newLineReader(body)
	s := &streamState{res: res}
	for {
		line, stamp, err := lr.next()
		if err != nil {
			if len(s.data) > 0 {
				// A last event without its blank line still counts.
				s.event()
			}
			if res.Err == "" && !s.done {
				if !errors.Is(err, io.EOF) {
					res.Err, res.ErrDetail = classifyTransportError(ctx, err, true), shortErr(err)
				} else if !s.finished {
					res.Err, res.ErrDetail = ErrStreamCut, "stream ended without [DONE] or finish_reason"
				}
			}
			break
		}
		if len(line) == 0 {
			if !s.event() {
				// Read the rest (normally just the chunked terminator) so
				// the connection goes back to the pool instead of closing.
				_, _ = io.Copy(io.Discard, io.LimitReader(body, 256<<10))
				break
			}
			continue
		}
		s.line(line, stamp)
	}
	s.end()
}

// streamState is what readStream has read of one stream so far.
type streamState struct {
	res       *Result
	parser    fastjson.Parser
	data      []byte    // the event's data lines so far
	dataStamp time.Time // when its last data line arrived
	evName    string
	done      bool // [DONE] came
	finished  bool // a finish_reason came
	usageSeen bool
	waiting   bool // llmgate said it waits for an engine to start
}

// line takes one line of an event.
func (s *streamState) line(line []byte, stamp time.Time) {
	switch {
	case line[0] == ':':
		// llmgate says ": waiting for engine NAME (Ns)" while a local
		// engine starts for this request.
		if len(s.res.Chunks) == 0 && bytes.Contains(line, engineWaitComment) {
			s.waiting = true
		}
	case bytes.HasPrefix(line, []byte("data:")):
		if s.waiting && s.res.EngineWait == 0 {
			s.res.EngineWait = stamp.Sub(s.res.Origin)
		}
		v := line[5:]
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
		if len(s.data) > 0 {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, v...)
		s.dataStamp = stamp
	case bytes.HasPrefix(line, []byte("event:")):
		s.evName = strings.TrimSpace(string(line[6:]))
	}
}

// event handles the event whose lines were read, and says whether to read
// on.
func (s *streamState) event() bool {
	res, data := s.res, s.data
	defer func() { s.data = s.data[:0]; s.evName = "" }()
	if len(data) == 0 {
		return true
	}
	if bytes.Equal(data, []byte("[DONE]")) {
		s.done = true
		return false
	}
	if s.evName == "error" {
		res.Err, res.ErrDetail = ErrErrorEvent, errorMessage(data)
		return false
	}
	v, err := s.parser.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject {
		res.Err, res.ErrDetail = ErrBadChunk, "chunk is not a JSON object: "+truncate(string(data), 120)
		return false
	}
	if e := v.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
		res.Err, res.ErrDetail = ErrErrorEvent, errorMessage(data)
		return false
	}
	usage := v.Get("usage")
	if usage != nil && usage.Type() != fastjson.TypeObject {
		usage = nil
	}
	if choices := v.GetArray("choices"); len(choices) > 0 {
		s.choice(choices[0], usage)
	}
	if usage != nil {
		s.usage(usage)
	}
	return true
}

// choice counts a chunk with choices: when it came, the characters it
// carries (the output's estimate when usage is missing) and its tokens.
func (s *streamState) choice(c, usage *fastjson.Value) {
	res := s.res
	res.Chunks = append(res.Chunks, s.dataStamp.Sub(res.Origin))
	n := len(c.GetStringBytes("text"))
	if d := c.Get("delta"); d != nil {
		if res.keepText {
			res.text = append(res.text, d.GetStringBytes("content")...)
		}
		n += len(d.GetStringBytes("content")) + len(d.GetStringBytes("reasoning_content")) + len(d.GetStringBytes("reasoning"))
		if tc := d.Get("tool_calls"); tc != nil && tc.Type() == fastjson.TypeArray {
			n += len(tc.MarshalTo(nil))
		}
	}
	res.outChars += n
	res.ChunkBytes = append(res.ChunkBytes, int32(n))
	if usage != nil {
		res.ChunkTokens = append(res.ChunkTokens, int32(usage.GetInt("completion_tokens")))
	}
	if fr := c.Get("finish_reason"); fr != nil && fr.Type() == fastjson.TypeString && len(fr.GetStringBytes()) > 0 {
		s.finished = true
	}
}

// usage takes a chunk's usage object.
func (s *streamState) usage(u *fastjson.Value) {
	res := s.res
	s.usageSeen = true
	res.OutputTokens = u.GetInt("completion_tokens")
	if pt := u.GetInt("prompt_tokens"); pt > 0 {
		res.InputTokens = pt
		res.InputEstimated = false
	}
	if d := u.Get("prompt_tokens_details"); d != nil && d.Type() == fastjson.TypeObject && d.Exists("cached_tokens") {
		res.CachedTokens = d.GetInt("cached_tokens")
		res.CachedReported = true
	}
}

// end fills the result's timings and output count once the stream ended.
func (s *streamState) end() {
	res := s.res
	if res.Err == "" && len(res.Chunks) == 0 {
		res.Err, res.ErrDetail = ErrNoContent, "stream carried no chunk with choices"
	}
	if res.Err != "" {
		return
	}
	res.TTFT = res.Chunks[0]
	res.E2EL = res.Chunks[len(res.Chunks)-1]
	if !s.usageSeen || res.OutputTokens <= 0 {
		// Most engines send one token per chunk; the count is labelled an
		// estimate in every report.
		res.OutputTokens = max(len(res.Chunks), (res.outChars+3)/4)
		if res.outChars == 0 {
			res.OutputTokens = len(res.Chunks)
		}
		res.OutputEstimated = true
	}
	if len(res.ChunkTokens) != len(res.Chunks) {
		res.ChunkTokens = nil
	}
}

// engineWaitComment is what llmgate's SSE keep-alive comments say while a
// request waits for a local engine to start.
var engineWaitComment = []byte("waiting for engine")

// lineReader splits a body into lines with no per-line allocation and
// remembers when the bytes of each line arrived.
type lineReader struct {
	r     io.Reader
	buf   []byte
	start int
	end   int
	stamp time.Time
	err   error
}

const maxLine = 8 << 20

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: r, buf: make([]byte, 16<<10)}
}

// next returns the next line without its line ending and the time the read
// that completed it returned. The line is valid until the next call.
func (l *lineReader) next() ([]byte, time.Time, error) {
	for {
		if i := bytes.IndexByte(l.buf[l.start:l.end], '\n'); i >= 0 {
			line := l.buf[l.start : l.start+i]
			l.start += i + 1
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, l.stamp, nil
		}
		if l.err != nil {
			if l.start < l.end {
				line := l.buf[l.start:l.end]
				l.start = l.end
				if bytes.Equal(bytes.TrimSpace(line), []byte("data: [DONE]")) {
					return line, l.stamp, nil
				}
				// A line cut off by the end of the body is a broken
				// stream, not a line to parse.
				if l.err == io.EOF {
					l.err = io.ErrUnexpectedEOF
				}
			}
			return nil, l.stamp, l.err
		}
		if l.start > 0 {
			l.end = copy(l.buf, l.buf[l.start:l.end])
			l.start = 0
		}
		if l.end == len(l.buf) {
			if len(l.buf) >= maxLine {
				return nil, l.stamp, errors.New("sse line longer than 8 MiB")
			}
			nb := make([]byte, 2*len(l.buf))
			copy(nb, l.buf[:l.end])
			l.buf = nb
		}
		n, err := l.r.Read(l.buf[l.end:])
		if n > 0 {
			// The stamp is taken the moment the bytes are in hand.
			l.stamp = time.Now()
			l.end += n
		}
		if err != nil {
			l.err = err
		}
	}
}

// errorMessage extracts a readable message from an error body.
func errorMessage(b []byte) string {
	var env struct {
		Error json.RawMessage `json:"error"`
		Msg   string          `json:"message"`
	}
	if json.Unmarshal(b, &env) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(env.Error, &inner) == nil && inner.Message != "" {
			return truncate(inner.Message, 200)
		}
		var s string
		if json.Unmarshal(env.Error, &s) == nil && s != "" {
			return truncate(s, 200)
		}
		if env.Msg != "" {
			return truncate(env.Msg, 200)
		}
	}
	return truncate(strings.TrimSpace(string(b)), 200)
}

func shortErr(err error) string { return truncate(err.Error(), 200) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"
)

// sseBody builds an OpenAI chat stream of n content chunks plus usage.
func sseBody(n int) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fin := "null"
		if i == n-1 {
			fin = `"length"`
		}
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-8f2c","object":"chat.completion.chunk","created":1732900000,"model":"qwen2.5-7b-instruct","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":%s}]}`+"\n\n", fin)
	}
	fmt.Fprintf(&b, `data: {"id":"chatcmpl-8f2c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", n, n+12)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// oneChunkPerRead hands out one SSE event per Read, as a socket does when
// the server flushes each chunk and the client keeps up.
type oneChunkPerRead struct{ rest []byte }

func (r *oneChunkPerRead) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	i := bytes.Index(r.rest, []byte("\n\n"))
	if i < 0 {
		i = len(r.rest) - 2
	}
	n := copy(p, r.rest[:i+2])
	r.rest = r.rest[n:]
	return n, nil
}

// BenchmarkReadStream is the client's CPU cost per chunk for the part it
// owns (line splitting, stamping, JSON decoding, bookkeeping), without the
// kernel and HTTP layers that BenchmarkClientCapacity includes.
func BenchmarkReadStream(b *testing.B) {
	body := sseBody(1000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var res Result
		res.Origin = time.Now()
		readStream(context.Background(), &oneChunkPerRead{rest: body}, &res)
		if res.Err != "" || len(res.Chunks) != 1000 || res.OutputTokens != 1000 {
			b.Fatalf("bad read: %+v", res.Err)
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(b.N*1000)/el.Seconds(), "chunks/s")
}

func TestReadStream_StampsEachChunkAndReadsUsage(t *testing.T) {
	var res Result
	res.Origin = time.Now()
	readStream(context.Background(), &oneChunkPerRead{rest: sseBody(5)}, &res)
	if res.Err != "" || len(res.Chunks) != 5 || res.OutputTokens != 5 || res.InputTokens != 12 || res.OutputEstimated {
		t.Fatalf("%+v", res)
	}
	for k := 1; k < 5; k++ {
		if res.Chunks[k] < res.Chunks[k-1] {
			t.Fatalf("chunk stamps go backwards: %v", res.Chunks)
		}
	}
	// A stream cut before [DONE] and before any finish_reason is an error.
	cut := sseBody(5)
	cut = cut[:bytes.Index(cut, []byte(`"finish_reason":"length"`))-40]
	res = Result{Origin: time.Now()}
	readStream(context.Background(), bytes.NewReader(cut), &res)
	if res.Err != ErrStreamCut {
		t.Errorf("cut stream: err %q, want %q", res.Err, ErrStreamCut)
	}
}

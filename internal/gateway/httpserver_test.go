package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/h1server"
	"llmgate/internal/rawio"
)

// Both servers of http_server serve the API, streams included.
func TestHTTPServerSetting_BothServeTheAPI(t *testing.T) {
	for _, kind := range []string{"", config.HTTPServerBuiltin, config.HTTPServerStdlib} {
		t.Run("kind="+kind, func(t *testing.T) {
			e := startEnv(t, func(c *config.Config) { c.HTTPServer = kind })
			_, builtin := e.g.HTTP.(*h1server.Server)
			if _, std := e.g.HTTP.(*http.Server); builtin != (kind == config.HTTPServerBuiltin) || std == (kind == config.HTTPServerBuiltin) {
				t.Fatalf("http_server %q runs %T", kind, e.g.HTTP)
			}
			r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", false, ""))
			if r.status != 200 || !strings.Contains(r.body, `"choices"`) {
				t.Fatalf("chat: %d %s", r.status, r.body)
			}
			r = e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", true, ""))
			if r.status != 200 || !strings.Contains(r.body, "data: [DONE]") {
				t.Fatalf("stream: %d %s", r.status, r.body)
			}
		})
	}
}

// socket_io: standard serves the API through net.Conn's own reads and
// writes (the fallback for hosts where the raw path does worse).
func TestSocketIOStandard_ServesTheAPI(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.SocketIO = config.SocketIOStandard })
	t.Cleanup(func() { rawio.SetEnabled(true) })
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", true, ""))
	if r.status != 200 || !strings.Contains(r.body, "data: [DONE]") {
		t.Fatalf("stream: %d %s", r.status, r.body)
	}
	c, err := net.Dial("tcp", e.g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, raw := rawio.Wrap(c).(*rawio.Conn); raw {
		t.Fatal("socket_io: standard left the raw path on")
	}
}

// A request the builtin server cannot parse gets the OpenAI error envelope,
// like every other error of the API.
func TestHTTPServerBuiltin_MalformedRequestGetsTheErrorEnvelope(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.HTTPServer = config.HTTPServerBuiltin })
	c, err := net.Dial("tcp", e.g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Error struct{ Message, Type string }
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || json.Unmarshal(b, &env) != nil || !strings.Contains(env.Error.Message, "Host header") || env.Error.Type != "invalid_request_error" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// The net/http server gets raw-I/O connections (socket_io: raw), and plain
// ones with socket_io: standard.
func TestRawListener_WrapsAcceptedTCPConnections(t *testing.T) {
	t.Cleanup(func() { rawio.SetEnabled(true) })
	for _, on := range []bool{true, false} {
		rawio.SetEnabled(on)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc, err := rawListener{ln}.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, raw := sc.(*rawio.Conn); raw != on {
			t.Errorf("raw path %v: accepted %T", on, sc)
		}
		// The connection still carries bytes both ways and reports EOF.
		go func() { c.Write([]byte("ping")); c.Close() }()
		got, err := io.ReadAll(sc)
		if err != nil || string(got) != "ping" {
			t.Errorf("raw path %v: read %q, %v", on, got, err)
		}
		sc.Close()
		ln.Close()
	}
}

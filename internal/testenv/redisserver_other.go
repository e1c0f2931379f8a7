//go:build !unix

package testenv

import "testing"

// RedisServer is a redis-server process of the test's own; the tests that
// stop and freeze one run on Unix only.
type RedisServer struct{}

// NewRedisServer skips: stopping and freezing a server needs Unix signals.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Skip("the Redis restart and outage tests run on Unix only")
	return nil
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return "" }

// Port is the server's TCP port.
func (s *RedisServer) Port() int { return 0 }

// Start starts the server.
func (s *RedisServer) Start() {}

// Kill stops the server.
func (s *RedisServer) Kill() {}

// Restart restarts the server empty.
func (s *RedisServer) Restart() {}

// Freeze stops the process.
func (s *RedisServer) Freeze() {}

// Thaw resumes it.
func (s *RedisServer) Thaw() {}

//go:build unix

package gateway

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReload_FileWatchAndSIGHUP(t *testing.T) {
	a := newUpstream(t, "a", answer)
	b := newUpstream(t, "b", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	write := func(backend string) {
		src := fmt.Sprintf("backends:\n  a: {url: %s}\n  b: {url: %s}\nmodels:\n  m: {backend: %s}\n", a.URL, b.URL, backend)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	gw, r := startFileGW(t, path, io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Watch(ctx, 20*time.Millisecond)

	write("b") // picked up by polling
	waitFor(t, func() bool { return r.Reloads() == 1 })
	if _, _, body := gw.chat("m", false); !strings.Contains(body, "from b") {
		t.Fatalf("after the file changed: %s", body)
	}

	// Without polling, only SIGHUP notices the next change.
	cancel()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	r.Watch(ctx2, 0)
	write("a")
	time.Sleep(50 * time.Millisecond)
	if r.Reloads() != 1 {
		t.Fatalf("reloaded without polling or a signal")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return r.Reloads() == 2 })
	if _, _, body := gw.chat("m", false); !strings.Contains(body, "from a") {
		t.Fatalf("after SIGHUP: %s", body)
	}
}

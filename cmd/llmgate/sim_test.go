package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"llmgate/internal/sim"
)

// TestSim_TryLineWorksAsPrinted: the banner's curl, run in a shell as the
// user would paste it, gets an answer, with the API key the simulator
// requires when it requires one.
func TestSim_TryLineWorksAsPrinted(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	for _, key := range []string{"", "sk-sim-secret"} {
		mc, _ := sim.PresetFor("qwen2.5-7b-instruct")
		mc.MeanOutputTokens = 4
		ctx, cancel := context.WithCancel(context.Background())
		addr, stop, err := sim.Listen(ctx, "127.0.0.1:0", sim.Config{Models: []sim.ModelConfig{mc}, APIKey: key})
		if err != nil {
			t.Fatal(err)
		}
		line := tryCurl(addr, mc.Name, key)
		out, err := exec.Command("sh", "-c", line+" -w ' HTTP %{http_code}'").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"choices"`) || !strings.HasSuffix(string(out), "HTTP 200") {
			t.Errorf("key %q: %s\n%s (%v)", key, line, out, err)
		}
		stop()
		cancel()
	}
}

func TestSim_ReplicasListenOnConsecutivePorts(t *testing.T) {
	got, err := replicaAddrs("127.0.0.1:8000", 3)
	if err != nil || strings.Join(got, " ") != "127.0.0.1:8000 127.0.0.1:8001 127.0.0.1:8002" {
		t.Errorf("replicaAddrs(127.0.0.1:8000, 3) = %v, %v", got, err)
	}
	got, err = replicaAddrs("127.0.0.1:0", 2)
	if err != nil || strings.Join(got, " ") != "127.0.0.1:0 127.0.0.1:0" {
		t.Errorf("port 0: %v, %v; want a random port for each", got, err)
	}
	for _, bad := range []struct {
		listen string
		n      int
	}{{"127.0.0.1:65535", 2}, {"localhost", 2}, {"127.0.0.1:8000", 0}} {
		if _, err := replicaAddrs(bad.listen, bad.n); err == nil {
			t.Errorf("replicaAddrs(%q, %d) accepted", bad.listen, bad.n)
		}
	}
}

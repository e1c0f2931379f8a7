//go:build unix

// Package agents runs real coding agents — Claude Code, Codex and opencode
// at the versions pinned in package-lock.json — against `llmgate serve
// --demo` with the simulator scripted by script.yaml. Each client is
// configured only by `llmgate connect`, in a temporary home of its own, and
// runs a plain prompt and an agent turn in which the scripted model asks
// for a read-only tool on a file in the working directory; Claude Code
// also runs `llmgate mcp` as an MCP client, from the entry connect
// cline-mcp wrote, and calls its chat tool. A recording
// proxy between each client and the gateway keeps every request, so the
// test checks that the tool's result reached the gateway and the report
// shows what each client sends; an HTTP proxy that refuses everything is
// the clients' only way out, so no run reaches the internet.
//
// realengine_test.go runs the same clients on llama.cpp's real
// llama-server, started by `llmgate serve -c` from its engines: section.
//
// The tests run only with LLMGATE_AGENTS=1 (.ci/agents.sh sets it after
// `npm ci`), the real-engine one also only with llama-server prepared
// (test/real-engine/setup.sh); otherwise they skip, saying so.
package agents

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

// defaultRunTimeout bounds every client run: a client that waits on a
// network it cannot reach, or loops, fails here instead of hanging CI.
// LLMGATE_AGENTS_RUN_TIMEOUT (a Go duration) changes it for slow machines.
const defaultRunTimeout = 120 * time.Second

// defaultModel is the demo model the clients use: the fastest preset, with
// vLLM's 32k context (the case issue 18 is about).
const defaultModel = "qwen2.5-7b-instruct"

// env holds what every run of the suite shares.
type env struct {
	root    string // repository root
	out     string // where logs and recorded requests are kept
	tmp     string // the clients' homes and working directories
	bin     string // llmgate
	timeout time.Duration
	model   string
	runID   string
	gateway *gateway
	vars    map[string]string // script placeholders
}

func TestAgents_RealClientsAgainstDemo(t *testing.T) {
	if os.Getenv("LLMGATE_AGENTS") != "1" {
		t.Skip("SKIPPED: real-client runs need LLMGATE_AGENTS=1 and `npm ci --prefix test/agents` " +
			"(.ci/agents.sh does both); they install Claude Code, Codex and opencode from npm")
	}
	e := setup(t)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) { runClient(t, e, c) })
	}
}

func setup(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, "", defaultRunTimeout)
	e.model = os.Getenv("LLMGATE_AGENTS_MODEL")
	if e.model == "" {
		e.model = defaultModel
	}

	// Each client's working directory and its sentinel file exist before
	// the script is rendered: the script names the paths.
	tmp := e.tmp
	e.vars = map[string]string{"RUN": e.runID}
	for _, c := range clients {
		sb := sandboxFor(tmp, c)
		for _, d := range []string{sb.home, sb.work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		sentinel := fmt.Sprintf("LLMGATE-SENTINEL-%s-%s", c.key, randomHex(8))
		if err := os.WriteFile(filepath.Join(sb.work, "sentinel.txt"), []byte("The sentinel is "+sentinel+".\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e.vars[c.key+"_WORK"] = sb.work
		e.vars[c.key+"_SENTINEL"] = sentinel
	}
	script := filepath.Join(e.out, "script.yaml")
	if err := renderScript("script.yaml", script, e.vars); err != nil {
		t.Fatal(err)
	}
	e.gateway = startGateway(t, e.bin, []string{"serve", "--demo", "--listen", "127.0.0.1:0", "--sim-script", script, "--data", filepath.Join(tmp, "data")},
		"sk-lg-agents-"+randomHex(16), true, filepath.Join(e.out, "gateway.log"))
	return e
}

// newEnv prepares what every suite shares: the output directory
// (LLMGATE_AGENTS_OUT, plus sub), the run time-out (LLMGATE_AGENTS_RUN_TIMEOUT,
// else timeout), the installed clients (checked) and the llmgate binary
// (LLMGATE_AGENTS_BIN, else built from this tree).
func newEnv(t *testing.T, sub string, timeout time.Duration) *env {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{root: root, runID: randomHex(4), timeout: timeout, tmp: t.TempDir()}
	if v := os.Getenv("LLMGATE_AGENTS_RUN_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("LLMGATE_AGENTS_RUN_TIMEOUT=%q: want a positive Go duration such as 180s", v)
		}
		e.timeout = d
	}
	e.out = os.Getenv("LLMGATE_AGENTS_OUT")
	if e.out == "" {
		e.out = t.TempDir()
	}
	e.out = filepath.Join(e.out, sub)
	if err := os.MkdirAll(e.out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("logs and recorded requests: %s", e.out)
	checkInstalled(t)
	e.bin = os.Getenv("LLMGATE_AGENTS_BIN")
	if e.bin == "" {
		e.bin = testenv.SharedLLMGate(t)
	}
	return e
}

// renderScript fills the ${NAME} placeholders of the script template; an
// unknown name is an error rather than an empty string.
func renderScript(src, dst string, vars map[string]string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var missing []string
	out := os.Expand(string(b), func(k string) string {
		v, ok := vars[k]
		if !ok {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return fmt.Errorf("%s: unknown placeholders %v", src, missing)
	}
	return os.WriteFile(dst, []byte(out), 0o644)
}

// checkInstalled fails when `npm ci` has not installed the clients, or
// installed a placeholder instead of a client's native binary.
func checkInstalled(t *testing.T) {
	t.Helper()
	pins := pinnedVersions(t)
	home := t.TempDir() // --version must not touch the real home either
	for _, c := range clients {
		bin, err := filepath.Abs(filepath.Join("node_modules", ".bin", c.bin))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s is not installed (%v): run npm ci --prefix test/agents", c.pkg, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, "--version")
		cmd.Env = sandbox{home: home}.baseEnv()
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), pins[c.pkg]) {
			t.Fatalf("%s --version: want %s, got %q (err %v); rerun npm ci --prefix test/agents (install scripts must run)",
				c.bin, pins[c.pkg], strings.TrimSpace(string(out)), err)
		}
		t.Logf("%s %s", c.pkg, pins[c.pkg])
	}
}

// pinnedVersions reads the exact versions package.json pins.
func pinnedVersions(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	exact := regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	for _, c := range clients {
		if v := pkg.Dependencies[c.pkg]; !exact.MatchString(v) {
			t.Fatalf("package.json must pin %s to an exact version, has %q", c.pkg, v)
		}
	}
	return pkg.Dependencies
}

// gateway is a running `llmgate serve`.
type gateway struct {
	base   string // root URL, without /v1
	key    string // the API key the clients get
	master string // the master key
	log    string // path of its log
}

var (
	wroteLine     = regexp.MustCompile(`(?m)^wrote (\S+)$`)
	baseURLLine   = regexp.MustCompile(`(?m)^\s*Base URL\s+(http://\S+)/v1\s*$`)
	apiKeyLine    = regexp.MustCompile(`(?m)^\s*API key\s+(\S+)\s*$`)
	listeningLine = regexp.MustCompile(`msg="llmgate listening" url=(http://\S+)/v1`)
)

// startGateway runs llmgate with args and the master key master, and waits
// until it is ready. The demo prints its base URL and an API key for the
// clients (banner); a gateway from a config file logs its URL, and the
// clients get the master key.
func startGateway(t *testing.T, bin string, args []string, master string, banner bool, logPath string) *gateway {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LLMGATE_MASTER_KEY="+master)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed when the process has ended (waitErr then says how),
	// so that both the wait for readiness and the clean-up can see it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	})
	g := &gateway{log: logPath, master: master}
	if !banner {
		g.key = master
	}
	if _, ok := testenv.Poll(60*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("llmgate %s exited early (%v):\n%s", strings.Join(args, " "), waitErr, readFile(logPath))
		default:
		}
		b, _ := os.ReadFile(logPath)
		line := listeningLine
		if banner {
			line = baseURLLine
		}
		if m := line.FindSubmatch(b); m != nil && g.base == "" {
			g.base = string(m[1])
		}
		if m := apiKeyLine.FindSubmatch(b); m != nil && banner {
			g.key = string(m[1])
		}
		if g.base == "" || g.key == "" {
			return false
		}
		resp, err := http.Get(g.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); !ok {
		t.Fatalf("llmgate %s not ready after 60s:\n%s", strings.Join(args, " "), readFile(logPath))
	}
	t.Logf("gateway at %s", g.base)
	return g
}

// sandbox is one client's temporary home and working directory.
type sandbox struct {
	home, work string
}

func sandboxFor(tmp string, c *client) sandbox {
	return sandbox{home: filepath.Join(tmp, c.name, "home"), work: filepath.Join(tmp, c.name, "work")}
}

// baseEnv is the whole environment a client (and connect) gets: nothing of
// the real user's home or settings leaks in.
func (sb sandbox) baseEnv() []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + sb.home,
		"XDG_CONFIG_HOME=" + filepath.Join(sb.home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(sb.home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(sb.home, ".local", "state"),
		"XDG_CACHE_HOME=" + filepath.Join(sb.home, ".cache"),
		"SHELL=/bin/bash",
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
	}
	for _, k := range []string{"USER", "LOGNAME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// result is what one client run left behind.
type result struct {
	stdout, stderr []byte
	err            error
	took           time.Duration
	exchanges      []exchange // requests the run sent to the gateway
}

// runClient configures one client with llmgate connect and runs its
// plain prompts and agent turn, each under e.timeout.
func runClient(t *testing.T, e *env, c *client) {
	sb := sandboxFor(e.tmp, c)
	out := filepath.Join(e.out, c.name)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	rec := startRecorder(t, e.gateway.base)
	trap := startEgressTrap(t)
	t.Cleanup(func() {
		if err := rec.writeJSONL(filepath.Join(out, "exchanges.jsonl")); err != nil {
			t.Error(err)
		}
		var b strings.Builder
		for _, ex := range rec.snapshot(0) {
			b.WriteString(describe(ex) + "\n")
		}
		fmt.Fprintf(&b, "egress attempts (refused): %v\n", trap.hosts())
		_ = os.WriteFile(filepath.Join(out, "requests.txt"), []byte(b.String()), 0o644)
		t.Logf("%s: what it sent to the gateway\n%s", c.name, b.String())
	})

	// The only configuration step: llmgate connect, pointed at the recorder.
	wrote := map[string]string{}
	for _, target := range append([]string{c.name}, c.alsoConnect...) {
		wrote[target] = connectClient(t, e, sb, out, target, rec.url, e.model)
	}

	env := append(sb.baseEnv(), trap.proxyEnv()...)
	env = append(env, c.env(e)...)
	for _, r := range c.runs {
		t.Run(r.name, func(t *testing.T) {
			prompt := r.prompt(e)
			args := append([]string{}, r.args...)
			if r.argsFor != nil {
				args = r.argsFor(e, wrote)
			}
			args = append(args, prompt)
			bin, _ := filepath.Abs(filepath.Join("node_modules", ".bin", c.bin))
			from := rec.count()
			res := execClient(bin, args, env, sb.work, e.timeout)
			res.exchanges = rec.snapshot(from)
			_ = os.WriteFile(filepath.Join(out, r.name+".stdout"), res.stdout, 0o644)
			_ = os.WriteFile(filepath.Join(out, r.name+".stderr"), res.stderr, 0o644)
			t.Logf("%s %s: %v, %d requests to the gateway", c.bin, strings.Join(r.args, " "), res.took.Round(100*time.Millisecond), len(res.exchanges))
			defer func() {
				if t.Failed() {
					dumpFailure(t, e, res)
				}
			}()
			if res.err != nil {
				t.Fatalf("%s failed: %v", c.bin, res.err)
			}
			r.check(t, e, res)
		})
	}
	if unexpected := unexpectedEgress(trap.hosts(), c.allowedEgress); len(unexpected) > 0 {
		t.Errorf("%s tried to reach %v (refused by the test's proxy); turn it off with an env var or flag, "+
			"or, if the pinned version has no switch, list it in allowedEgress with the reason", c.name, unexpected)
	}
}

// connectClient runs `llmgate connect target` in the client's sandbox,
// pointed at baseURL, keeps its output in out, and returns the file it
// wrote.
func connectClient(t *testing.T, e *env, sb sandbox, out, target, baseURL, model string) string {
	t.Helper()
	connect := exec.Command(e.bin, "connect", target, "--base-url", baseURL, "--api-key", e.gateway.key, "--model", model)
	connect.Env = sb.baseEnv()
	connect.Dir = sb.work
	cout, err := connect.CombinedOutput()
	_ = os.WriteFile(filepath.Join(out, "connect-"+target+"-"+model+".txt"), cout, 0o644)
	t.Logf("llmgate connect %s --model %s:\n%s", target, model, cout)
	if err != nil {
		t.Fatalf("llmgate connect %s: %v", target, err)
	}
	if m := wroteLine.FindSubmatch(cout); m != nil {
		return string(m[1])
	}
	return ""
}

// execClient runs a client in its own process group, killed whole when
// the timeout passes.
func execClient(bin string, args, env []string, dir string, timeout time.Duration) *result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Dir = env, dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever the client left running in its group (a server, a shell)
		// goes with it; ESRCH when nothing is left is fine.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	res := &result{stdout: stdout.Bytes(), stderr: stderr.Bytes(), took: time.Since(start), err: err}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.err = fmt.Errorf("no exit within %v (killed): %v", timeout, err)
	}
	return res
}

// dumpFailure prints what a failed run needs for diagnosis: the client's
// output, the requests it sent, and the end of the gateway's log.
func dumpFailure(t *testing.T, e *env, res *result) {
	t.Logf("client stdout:\n%s", clip(string(res.stdout), 8000))
	t.Logf("client stderr:\n%s", clip(string(res.stderr), 8000))
	var b strings.Builder
	for _, ex := range res.exchanges {
		b.WriteString(describe(ex) + "\n")
	}
	t.Logf("requests of this run:\n%s", b.String())
	t.Logf("gateway log (last lines):\n%s", tail(readFile(e.gateway.log), 40))
}

func unexpectedEgress(hosts, allowed []string) []string {
	var out []string
	for _, h := range hosts {
		ok := false
		for _, a := range allowed {
			if h == a {
				ok = true
			}
		}
		if !ok {
			out = append(out, h)
		}
	}
	return out
}

// jsonLines decodes a JSON-lines output; lines that are not JSON objects
// (progress text some clients mix in) are skipped.
func jsonLines(b []byte) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// gatewaySawToolResult checks that some request of the run carried the
// sentinel inside a tool result of its dialect.
func gatewaySawToolResult(t *testing.T, res *result, sentinel string) {
	t.Helper()
	for _, ex := range res.exchanges {
		for _, tr := range toolResults(ex.Body) {
			if strings.Contains(tr, sentinel) {
				t.Logf("request #%d (%s %s) carried the tool result with the sentinel", ex.Seq, ex.Method, ex.URL)
				return
			}
		}
	}
	t.Errorf("no request to the gateway carried a tool result containing %s", sentinel)
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

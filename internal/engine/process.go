package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
)

// run is one process of an engine, from spawn to exit.
type run struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
	readyAt time.Time
	exited  chan struct{} // closed (with m.mu held) once the process exited
	// pumped is closed when the output pipe reached EOF: every line the
	// process wrote is in the log ring.
	pumped  chan struct{}
	exitErr error
	// stopReason is set when llmgate asked the process to stop; an exit
	// without it is a crash.
	stopReason string
	failed     bool // stopped because it never became ready
	cancel     context.CancelFunc
	timer      *time.Timer // start-up time-out
	kill       *time.Timer // SIGKILL after the stop grace
}

// spawnLocked starts e's process and its health poll.
func (m *Manager) spawnLocked(e *Engine) {
	c := e.cfg
	port := strconv.Itoa(c.Port)
	if err := portFree(c.Port); err != nil {
		m.startFailed(e, apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_port_busy",
			"cannot start engine %q: port %d is already in use (a leftover engine or another server?); stop that process or change engines.%s.port",
			c.Name, c.Port, c.Name).Wrap(err))
		return
	}
	args := make([]string, len(c.Cmd))
	for i, a := range c.Cmd {
		args[i] = strings.ReplaceAll(a, config.PortPlaceholder, port)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = strings.ReplaceAll(c.Workdir, config.PortPlaceholder, port)
	cmd.Env = childEnv(os.Environ())
	for _, k := range sortedNames(c.Env) {
		cmd.Env = append(cmd.Env, k+"="+strings.ReplaceAll(c.Env[k], config.PortPlaceholder, port))
	}
	// Its own process group, so that stopping it reaches the workers an
	// engine forks (vLLM's engine core, tensor-parallel ranks). On Linux the
	// kernel also sends it the stop signal if the gateway dies (crash, OOM
	// kill, SIGKILL), so it does not keep the GPU and the port.
	cmd.SysProcAttr = procAttr()
	parentDeathSignal(cmd.SysProcAttr, c.Signal())
	pr, pw, err := os.Pipe()
	if err != nil {
		m.startFailed(e, apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_start_failed",
			"cannot start engine %q: %v", c.Name, err))
		return
	}
	// A file, not a Go writer: exec then copies nothing itself, and Wait
	// does not hang on grandchildren that keep the pipe open.
	cmd.Stdout, cmd.Stderr = pw, pw
	r := &run{cmd: cmd, exited: make(chan struct{}), pumped: make(chan struct{})}
	startErr := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked the
		// child exits, not the process (golang/go#27505). A locked thread
		// runs nothing else and ends only if this goroutine returns still
		// locked, so hold it from the fork until the child has exited.
		runtime.LockOSThread()
		err := cmd.Start()
		startErr <- err
		if err != nil {
			runtime.UnlockOSThread()
			return
		}
		rec := m.state.add(c, cmd.Process.Pid, args)
		werr := cmd.Wait()
		runtime.UnlockOSThread()
		m.state.remove(rec)
		// Let the engine's last lines ("shutting down") reach the log before
		// llmgate's own line about the exit; a grandchild that keeps the
		// pipe open must not hold this up for long.
		select {
		case <-r.pumped:
		case <-time.After(500 * time.Millisecond):
		}
		m.mu.Lock()
		r.exitErr = werr
		close(r.exited)
		m.onExit(e, r)
		m.mu.Unlock()
	}()
	err = <-startErr
	pw.Close()
	if err != nil {
		pr.Close()
		m.startFailed(e, apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_start_failed",
			"cannot start engine %q: %v (check engines.%s.cmd and workdir)", c.Name, err, c.Name).Wrap(err))
		return
	}
	// The goroutine reads r only with m.mu held, which this holds.
	r.pid, r.started = cmd.Process.Pid, time.Now()
	e.run = r
	e.starts++
	e.logs.add(fmt.Sprintf("[llmgate] started pid %d: %s", r.pid, strings.Join(args, " ")))
	m.log.Info("engine starting", "engine", c.Name, "pid", r.pid, "port", c.Port, "cmd", strings.Join(args, " "))
	go func() {
		e.logs.pump(pr, "")
		pr.Close()
		close(r.pumped)
	}()
	hctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go m.pollHealth(hctx, e, r)
	r.timer = time.AfterFunc(time.Duration(c.StartupTimeout), func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.onStartTimeout(e, r)
	})
}

// childEnv is the gateway's environment minus its own secrets: an engine
// has no business with the master key.
func childEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LLMGATE_MASTER_KEY=") {
			out = append(out, kv)
		}
	}
	return out
}

// portFree reports an error when something already listens on the port:
// a health check would otherwise find that process ready.
func portFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// readyLearnTimeout bounds what the gateway asks an engine that just
// became ready before admitting the requests waiting for it.
const readyLearnTimeout = 2 * time.Second

// pollHealth polls the health path until it answers 200.
func (m *Manager) pollHealth(ctx context.Context, e *Engine, r *run) {
	url := fmt.Sprintf("http://127.0.0.1:%d%s", e.cfg.Port, e.cfg.HealthPath)
	tr := &http.Transport{Proxy: nil, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	tick := time.NewTicker(time.Duration(e.cfg.HealthInterval))
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if b := m.backend(e); m.readyHook != nil && b != nil {
					hctx, cancel := context.WithTimeout(ctx, readyLearnTimeout)
					m.readyHook(hctx, b)
					cancel()
				}
				m.mu.Lock()
				m.onReady(e, r)
				m.mu.Unlock()
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-r.exited:
			return
		case <-tick.C:
		}
	}
}

func (m *Manager) onReady(e *Engine, r *run) {
	if e.run != r || e.state != StateStarting {
		return
	}
	r.timer.Stop()
	r.readyAt = time.Now()
	e.state = StateReady
	e.lastUsed = r.readyAt
	e.logs.add(fmt.Sprintf("[llmgate] ready after %s", r.readyAt.Sub(r.started).Round(time.Millisecond)))
	m.log.Info("engine ready", "engine", e.cfg.Name, "pid", r.pid, "startup", r.readyAt.Sub(r.started).Round(time.Millisecond))
	m.admitAll(e)
	m.schedule(e.g)
}

func (m *Manager) onStartTimeout(e *Engine, r *run) {
	if e.run != r || e.state != StateStarting {
		return
	}
	c := e.cfg
	msg := fmt.Sprintf("engine %q did not become ready within %s: GET http://127.0.0.1:%d%s never answered 200 (raise engines.%s.startup_timeout if loading is slow)",
		c.Name, time.Duration(c.StartupTimeout), c.Port, c.HealthPath, c.Name)
	e.setErr(msg)
	r.failed = true
	m.failAll(e, apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_startup_timeout",
		"%s. Last log lines: %s", msg, e.logs.tailText(5)))
	m.stopLocked(e, "start-up time-out")
}

// stopLocked asks e's process group to stop with the configured signal,
// and kills it after the grace period.
func (m *Manager) stopLocked(e *Engine, reason string) {
	if e.delayed != nil { // a postponed start: nothing runs yet
		e.delayed.Stop()
		e.delayed = nil
	}
	if e.drain != nil {
		e.drain.Stop()
		e.drain = nil
	}
	r := e.run
	if r == nil {
		if e.state == StateStarting {
			e.state = StateStopped
		}
		if e.g.active == e {
			e.g.active = nil
			m.schedule(e.g)
		}
		return
	}
	if e.state == StateStopping {
		return
	}
	e.state = StateStopping
	e.unload = false
	r.stopReason = reason
	r.timer.Stop()
	r.cancel()
	if b := m.backend(e); b != nil {
		// Idle keep-alive connections (and ones dialed but never used) make
		// an HTTP server's graceful shutdown wait; nobody needs them now.
		b.Close()
	}
	e.logs.add(fmt.Sprintf("[llmgate] stopping pid %d (%s) with %s", r.pid, reason, strings.ToUpper(e.cfg.StopSignal)))
	m.log.Info("engine stopping", "engine", e.cfg.Name, "pid", r.pid, "reason", reason)
	_ = killGroup(r.pid, e.cfg.Signal())
	r.kill = time.AfterFunc(time.Duration(e.cfg.StopGrace), func() {
		_ = killGroup(r.pid, syscall.SIGKILL)
	})
}

// onExit handles the end of a process: an expected stop or a crash.
func (m *Manager) onExit(e *Engine, r *run) {
	r.cancel()
	r.timer.Stop()
	if r.kill != nil {
		r.kill.Stop()
	}
	if e.run != r {
		return
	}
	e.run = nil
	if e.drain != nil {
		e.drain.Stop()
		e.drain = nil
	}
	g := e.g
	if g.active == e {
		g.active = nil
	}
	if r.stopReason != "" {
		e.state = StateStopped
		if r.failed {
			e.state = StateFailed
		}
		e.logs.add(fmt.Sprintf("[llmgate] pid %d stopped (%s): %s", r.pid, r.stopReason, exitText(r.exitErr)))
		// Workers left in the group get the rest of the grace period.
		go reapGroup(r.pid, time.Duration(e.cfg.StopGrace))
		m.log.Info("engine stopped", "engine", e.cfg.Name, "pid", r.pid, "reason", r.stopReason)
		m.schedule(g)
		return
	}
	// A crash: workers left behind would hold the GPU and the port.
	_ = killGroup(r.pid, syscall.SIGKILL)
	if !r.readyAt.IsZero() && time.Since(r.readyAt) > time.Minute {
		e.crashes = 1
	} else {
		e.crashes++
	}
	if e.crashes >= 2 {
		e.restartAt = time.Now().Add(backoff(e.crashes))
	}
	c := e.cfg
	msg := fmt.Sprintf("engine %q exited unexpectedly (%s)", c.Name, exitText(r.exitErr))
	if r.readyAt.IsZero() {
		msg = fmt.Sprintf("engine %q exited while starting (%s)", c.Name, exitText(r.exitErr))
	}
	e.setErr(msg)
	e.state = StateFailed
	e.logs.add("[llmgate] " + msg)
	m.log.Warn("engine crashed", "engine", c.Name, "pid", r.pid, "status", exitText(r.exitErr), "crashes", e.crashes)
	retry := "the next request restarts it"
	if d := time.Until(e.restartAt); d > 0 {
		retry = fmt.Sprintf("after %d crashes in a row the next start waits %s", e.crashes, d.Round(100*time.Millisecond))
	}
	m.failAll(e, apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_crashed",
		"%s; %s. Last log lines: %s", msg, retry, e.logs.tailText(5)))
	if c.AlwaysOn && !m.closed && !m.isRetired(c.Name) {
		m.startLocked(e)
		return
	}
	m.schedule(g)
}

// backoff is the wait before restart number n of a crashing engine.
func backoff(crashes int) time.Duration {
	d := time.Second << min(crashes-2, 6)
	return min(d, time.Minute)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return ee.String()
	}
	return err.Error()
}

// reapGroup waits for the rest of a stopped engine's process group to
// exit and kills what is left when the grace period ends, so that no
// worker outlives its engine.
func reapGroup(pgid int, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			_ = killGroup(pgid, syscall.SIGKILL)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// groupAlive reports whether a process group still has live members.
// Zombies waiting for a parent that never reaps them do not count.
func groupAlive(pgid int) bool {
	if killGroup(pgid, 0) != nil {
		return false
	}
	found, ok := groupMemberSince(pgid, 0)
	return found || !ok // no /proc (not Linux): trust kill(2)
}

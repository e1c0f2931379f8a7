package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"llmgate/internal/config"
)

// The state file lists the engine processes a gateway runs, so that the
// next gateway can stop the ones a crashed (SIGKILLed, OOM-killed) gateway
// left behind: they would hold the GPU memory and the port. On Linux the
// parent-death signal (sys_linux.go) normally stops them already; the file
// covers what it cannot (an engine that ignores the signal, a kernel
// without it, an engine started by another thread model). A process is
// only ever signalled when its pid, its start time (/proc/<pid>/stat field
// 22) and the boot all match the record, so a reused pid is never killed.

// StateFileName is the state file's name in the gateway's data directory
// (next to a SQLite database).
const StateFileName = "llmgate-engines.json"

// orphanGraceMax bounds how long a gateway's start waits for a leftover
// engine to stop after its stop signal, before killing it.
const orphanGraceMax = 15 * time.Second

// procID names one process across pid reuse.
type procID struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"` // clock ticks after boot
}

// procRecord is one running engine process.
type procRecord struct {
	Engine     string    `json:"engine"`
	PID        int       `json:"pid"`
	PGID       int       `json:"pgid"`
	StartTime  uint64    `json:"start_time"` // /proc/<pid>/stat field 22
	Cmd        []string  `json:"cmd"`
	Port       int       `json:"port"`
	StopSignal string    `json:"stop_signal"`
	StopGrace  string    `json:"stop_grace"`
	StartedAt  time.Time `json:"started_at"`
	Owner      procID    `json:"owner"` // the gateway process that started it
}

type stateDoc struct {
	Version int          `json:"version"`
	BootID  string       `json:"boot_id,omitempty"`
	Engines []procRecord `json:"engines"`
}

// stateFile is a Manager's handle on the state file; nil when disabled.
type stateFile struct {
	path   string
	self   procID
	bootID string
	log    *slog.Logger
	mu     *sync.Mutex // shared by every Manager of this process using path
	warned bool        // a write failure was logged
}

// stateLocks serializes the read-modify-write of one state file between
// the Managers of one process (tests run several gateways).
var stateLocks sync.Map // absolute path -> *sync.Mutex

// statePath is where a Manager keeps its state file: Options.StateFile,
// else next to a SQLite database, else (PostgreSQL, :memory:) in the
// user's cache directory. "" disables it.
func statePath(cfg *config.Config, opt Options) string {
	if opt.StateFile != "" {
		if opt.StateFile == "-" {
			return ""
		}
		return opt.StateFile
	}
	db := cfg.Database
	switch {
	case db == "":
		return ""
	case strings.Contains(db, "://") || db == ":memory:":
		dir, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		return filepath.Join(dir, "llmgate", StateFileName)
	}
	return filepath.Join(filepath.Dir(db), StateFileName)
}

// openState returns the state file at path, or nil when path is "" or the
// platform cannot tell processes apart by start time (no /proc).
func openState(path string, log *slog.Logger) *stateFile {
	if path == "" {
		return nil
	}
	st, err := readProcStat(os.Getpid())
	if err != nil {
		log.Debug("engine state file disabled: process start times are unavailable", "err", err)
		return nil
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	mu, _ := stateLocks.LoadOrStore(path, &sync.Mutex{})
	return &stateFile{path: path, self: procID{PID: os.Getpid(), StartTime: st.start}, bootID: bootID(),
		log: log, mu: mu.(*sync.Mutex)}
}

// add records a started engine process and returns its record (nil when
// the process already exited or the file is disabled).
func (s *stateFile) add(c *config.Engine, pid int, args []string) *procRecord {
	if s == nil {
		return nil
	}
	st, err := readProcStat(pid)
	if err != nil {
		return nil
	}
	rec := procRecord{Engine: c.Name, PID: pid, PGID: st.pgid, StartTime: st.start, Cmd: args, Port: c.Port,
		StopSignal: strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(c.StopSignal)), "SIG"), StopGrace: time.Duration(c.StopGrace).String(),
		StartedAt: time.Now().UTC().Truncate(time.Millisecond), Owner: s.self}
	s.update(func(recs []procRecord) []procRecord {
		return append(recs, rec)
	})
	return &rec
}

// remove forgets an engine process that exited.
func (s *stateFile) remove(rec *procRecord) {
	if s == nil || rec == nil {
		return
	}
	s.update(func(recs []procRecord) []procRecord {
		out := recs[:0]
		for _, r := range recs {
			if r.PID != rec.PID || r.StartTime != rec.StartTime {
				out = append(out, r)
			}
		}
		return out
	})
}

// update rewrites the file with f applied to its records.
func (s *stateFile) update(f func([]procRecord) []procRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(f(s.read()))
}

// read returns the file's records; records from an earlier boot are
// dropped (their processes died with it). Called with s.mu held.
func (s *stateFile) read() []procRecord {
	b, err := os.ReadFile(s.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cannot read the engine state file", "path", s.path, "err", err)
		}
		return nil
	}
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		s.log.Warn("ignoring an unreadable engine state file", "path", s.path, "err", err)
		return nil
	}
	if doc.BootID != s.bootID {
		return nil
	}
	return doc.Engines
}

// write replaces the file atomically (temp file and rename), or removes it
// when no engine runs. Called with s.mu held.
func (s *stateFile) write(recs []procRecord) {
	var err error
	if len(recs) == 0 {
		if err = os.Remove(s.path); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	} else {
		err = s.writeFile(recs)
	}
	if err != nil && !s.warned {
		s.warned = true
		s.log.Warn("cannot write the engine state file; engines left running by a crash will not be stopped at the next start",
			"path", s.path, "err", err)
	}
}

func (s *stateFile) writeFile(recs []procRecord) error {
	b, err := json.MarshalIndent(stateDoc{Version: 1, BootID: s.bootID, Engines: recs}, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// reapOrphans stops the engine processes that a gateway which is no longer
// running left behind, and forgets them. Records of a gateway that still
// runs (another llmgate sharing the data directory, or another Manager of
// this process) are kept and their processes left alone. It returns once
// the leftovers exited, or were killed after their stop grace (at most
// orphanGraceMax) and a short wait.
func (s *stateFile) reapOrphans() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := s.read()
	if len(recs) == 0 {
		return
	}
	var keep, stop []procRecord
	for _, r := range recs {
		switch {
		case s.alive(r.Owner):
			keep = append(keep, r)
		case s.alive(procID{PID: r.PID, StartTime: r.StartTime}) || s.groupLeftover(r):
			stop = append(stop, r)
		}
		// Otherwise the engine, workers and all, exited with (or after) its
		// gateway.
	}
	if len(stop) > 0 {
		s.stopAll(stop)
	}
	s.write(keep)
}

// groupLeftover reports whether an engine's process group outlived its
// main process: worker processes (vLLM's tensor-parallel workers, a
// shell's children) that still hold the GPU. It is only trusted when no
// process has the leader's pid, so the pid was not reused: Linux keeps a
// group's id reserved while any member lives. A member must also have
// started no earlier than the engine.
func (s *stateFile) groupLeftover(r procRecord) bool {
	if r.PGID <= 0 || r.PGID != r.PID {
		return false
	}
	if _, err := readProcStat(r.PGID); err == nil {
		return false // the leader runs (handled by alive) or its pid was reused
	}
	found, _ := groupMemberSince(r.PGID, r.StartTime)
	return found
}

// groupMemberSince reports whether a live (not zombie) process of group
// pgid started at or after since (clock ticks after boot); ok is false when
// /proc cannot be read.
func groupMemberSince(pgid int, since uint64) (found, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false, false
	}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.pgid == pgid && st.state != 'Z' && st.start >= since {
			return true, true
		}
	}
	return false, true
}

// alive reports whether process p still runs (a zombie does not count):
// its pid exists and it started at the recorded time.
func (s *stateFile) alive(p procID) bool {
	if p.PID <= 0 {
		return false
	}
	st, err := readProcStat(p.PID)
	return err == nil && st.start == p.StartTime && st.state != 'Z'
}

// stopAll sends each record its stop signal, waits for the processes and
// their groups to exit, and kills what is left after the grace period.
func (s *stateFile) stopAll(recs []procRecord) {
	grace := time.Duration(0)
	for _, r := range recs {
		sig, name := syscall.SIGTERM, "SIGTERM"
		if v, ok := signalNamed(r.StopSignal); ok {
			sig, name = v, "SIG"+strings.TrimPrefix(strings.ToUpper(r.StopSignal), "SIG")
		}
		g, err := time.ParseDuration(r.StopGrace)
		if err != nil || g <= 0 {
			g = time.Duration(config.DefaultEngineStopGrace)
		}
		grace = max(grace, min(g, orphanGraceMax))
		s.log.Info("stopping an engine left running by a previous llmgate", "engine", r.Engine, "pid", r.PID,
			"port", r.Port, "signal", name, "started_at", r.StartedAt, "cmd", strings.Join(r.Cmd, " "))
		s.signal(r, sig)
	}
	pending := recs
	deadline := time.Now().Add(grace)
	killed := false
	for {
		pending = s.stillRunning(pending)
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if killed {
				break
			}
			killed = true
			for _, r := range pending {
				s.log.Warn("engine left running by a previous llmgate ignored its stop signal; killing it", "engine", r.Engine, "pid", r.PID, "grace", grace)
				s.signal(r, syscall.SIGKILL)
			}
			deadline = time.Now().Add(2 * time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range recs {
		if containsRec(pending, r) {
			s.log.Error(fmt.Sprintf("could not stop engine %s left running by a previous llmgate (pid %d); stop it by hand", r.Engine, r.PID),
				"engine", r.Engine, "pid", r.PID, "port", r.Port)
			continue
		}
		s.log.Warn(fmt.Sprintf("stopped engine %s left running by a previous llmgate (pid %d)", r.Engine, r.PID),
			"engine", r.Engine, "pid", r.PID, "port", r.Port)
	}
}

// signal sends sig to a recorded engine's process group, and to the
// process itself in case it left the group; the process (or, once it is
// gone, its group) is checked again right before, so a pid reused since is
// left alone.
func (s *stateFile) signal(r procRecord, sig syscall.Signal) {
	main := s.alive(procID{PID: r.PID, StartTime: r.StartTime})
	if r.PGID > 0 && (main || s.groupLeftover(r)) {
		_ = killGroup(r.PGID, sig)
	}
	if main {
		_ = killProcess(r.PID, sig)
	}
}

// stillRunning returns the records whose process or process group still
// has a live member.
func (s *stateFile) stillRunning(recs []procRecord) []procRecord {
	var out []procRecord
	for _, r := range recs {
		if s.alive(procID{PID: r.PID, StartTime: r.StartTime}) || (r.PGID > 0 && groupAlive(r.PGID)) {
			out = append(out, r)
		}
	}
	return out
}

func containsRec(recs []procRecord, r procRecord) bool {
	for _, x := range recs {
		if x.PID == r.PID && x.StartTime == r.StartTime {
			return true
		}
	}
	return false
}

func signalNamed(name string) (syscall.Signal, bool) {
	e := &config.Engine{StopSignal: name}
	sig := e.Signal()
	return sig, sig != 0
}

// procStat is what the gateway needs from /proc/<pid>/stat.
type procStat struct {
	state byte
	pgid  int
	start uint64 // field 22, clock ticks after boot
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

// parseProcStat parses "pid (comm) state ppid pgrp ... starttime ...";
// comm may contain spaces and parentheses.
func parseProcStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	pgid, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, errors.New("malformed /proc stat")
	}
	return procStat{state: f[0][0], pgid: pgid, start: start}, nil
}

// bootID identifies the running boot; start times restart at each boot.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/redact"
)

// Reloader applies a changed configuration file to a running gateway: on
// SIGHUP, when the file changes (polled), or when Reload is called. A new
// routing table is built and swapped in atomically; requests in flight
// finish on the table they started with. Backends whose settings did not
// change keep their connections, breakers and health checks. A file that
// does not load is rejected with the reason logged, and the running
// configuration stays.
type Reloader struct {
	g    *Gateway
	path string
	log  *slog.Logger

	// Adjust, when set, is applied to every loaded config before it is
	// validated, so that command-line overrides (--listen, --database)
	// survive reloads.
	Adjust func(*config.Config)

	mu      sync.Mutex
	current *config.Config
	sum     [32]byte // content of the last file read, applied or rejected
	stamp   fileStamp
	pending fileStamp // a change seen once, applied when it holds still
	reloads int
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// NewReloader returns a reloader for the gateway's config file. current is
// the configuration the gateway was started with.
func NewReloader(g *Gateway, path string, current *config.Config) *Reloader {
	r := &Reloader{g: g, path: path, log: g.log, current: current}
	if data, err := os.ReadFile(path); err == nil {
		r.sum = sha256.Sum256(data)
	}
	r.stamp, _ = stat(path)
	return r
}

// Reloads reports how many reloads were applied.
func (r *Reloader) Reloads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloads
}

// Reload reads the file and applies it. It returns the reason when the
// file is rejected; the running configuration is then unchanged.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := os.ReadFile(r.path)
	if err != nil {
		r.log.Error("config reload rejected: cannot read the file; keeping the running config", "file", r.path, "err", err)
		return fmt.Errorf("read %s: %w", r.path, err)
	}
	r.sum = sha256.Sum256(data)
	r.stamp, _ = stat(r.path)
	if len(bytes.TrimSpace(data)) == 0 {
		// Almost always a file caught mid-save; an empty config would drop
		// every model.
		r.log.Error("config reload rejected: the file is empty; keeping the running config", "file", r.path)
		return fmt.Errorf("%s is empty", r.path)
	}
	cfg, err := config.Load(bytes.NewReader(data), r.path)
	if err == nil && r.Adjust != nil {
		r.Adjust(cfg)
		err = cfg.Validate()
	}
	if err == nil && r.g.Engines != nil {
		// Engines are processes: their ports are bound to the running ones,
		// and a new engine needs a restart rather than a silent port 0.
		var changed []string
		if changed, err = r.g.Engines.Rebind(cfg); err == nil && len(changed) > 0 {
			r.log.Warn("engine settings changed in the file take effect after a gateway restart", "engines", changed)
		}
	}
	if err != nil {
		r.log.Error("config reload rejected: keeping the running config", "file", r.path, "err", err)
		return err
	}
	LogWarnings(r.log, cfg)
	r.apply(cfg)
	return nil
}

func (r *Reloader) apply(cfg *config.Config) {
	r.g.swapTable(cfg)
	if r.g.Engines != nil {
		// Engines the file no longer declares take no more requests from
		// the table just swapped in: stop them (after their requests in
		// flight), so that they free their GPU.
		go r.g.Engines.StopRetired(context.Background())
	}
	r.warnRestartOnly(cfg)
	r.current = cfg
	r.reloads++
	r.log.Info("config reloaded", "file", r.path, "models", len(cfg.Models), "backends", len(cfg.Backends))
}

// warnRestartOnly says which changed settings a reload cannot apply.
func (r *Reloader) warnRestartOnly(cfg *config.Config) {
	prev := r.current
	if prev == nil {
		return
	}
	for _, s := range []struct {
		key      string
		old, new any
	}{
		{"listen", prev.Listen, cfg.Listen},
		{"database", redact.Secrets(prev.Database), redact.Secrets(cfg.Database)},
		{"max_body_bytes", prev.MaxBodyBytes, cfg.MaxBodyBytes},
		{"log_format", prev.LogFormat, cfg.LogFormat},
		{"max_connections", prev.ConnectionLimit(), cfg.ConnectionLimit()},
		{"tls_cert_file", prev.TLSCertFile, cfg.TLSCertFile}, // the files' contents are re-read; the paths are not
		{"tls_key_file", prev.TLSKeyFile, cfg.TLSKeyFile},
		{"responses_ttl", time.Duration(prev.ResponsesTTL), time.Duration(cfg.ResponsesTTL)},
		{"store_responses", optBool(prev.StoreResponses), optBool(cfg.StoreResponses)},
		{"spool_dir", prev.SpoolDir, cfg.SpoolDir},
		{"spool_fsync", prev.SpoolFsync, cfg.SpoolFsync},
		{"access_log", prev.AccessLogOn(), cfg.AccessLogOn()},
		{"console", prev.ConsoleOn(), cfg.ConsoleOn()},
		{"metrics_key", prev.MetricsKey, cfg.MetricsKey},
		{"body_read_timeout", time.Duration(prev.BodyReadTimeout), time.Duration(cfg.BodyReadTimeout)},
		{"max_body_reads_per_key", optInt(prev.MaxBodyReadsPerKey), optInt(cfg.MaxBodyReadsPerKey)},
		{"max_large_body_memory", prev.LargeBodyMemory(), cfg.LargeBodyMemory()},
		{"engines", prev.Engines, cfg.Engines},
		{"redis", redact.Secrets(prev.Redis), redact.Secrets(cfg.Redis)},
		{"redis_prefix", prev.RedisPrefix, cfg.RedisPrefix},
		{"redis_fail_open", prev.RedisFailOpen, cfg.RedisFailOpen},
		{"redis_replicas", prev.RedisReplicas, cfg.RedisReplicas},
		{"retention", time.Duration(prev.Retention), time.Duration(cfg.Retention)},
	} {
		if !reflect.DeepEqual(s.old, s.new) {
			if s.key == "engines" || s.key == "metrics_key" { // too big to print, or secret
				r.log.Warn("config setting changed but needs a restart to take effect", "key", s.key)
				continue
			}
			r.log.Warn("config setting changed but needs a restart to take effect", "key", s.key, "running", s.old, "file", s.new)
		}
	}
}

// Watch reloads on SIGHUP and, when poll > 0, whenever the file's content
// changes (checked every poll; editors that replace the file are handled
// since the path is stat'ed each time). The signal handler is installed
// before Watch returns; it stops when ctx ends.
func (r *Reloader) Watch(ctx context.Context, poll time.Duration) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		tick = t.C
		go func() { <-ctx.Done(); t.Stop() }()
	}
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				r.log.Info("SIGHUP: reloading config", "file", r.path)
				_ = r.Reload()
			case <-tick:
				if r.changed() {
					_ = r.Reload()
				}
			}
		}
	}()
}

// changed reports whether the file's content differs from what was last
// read. The stamp check keeps the poll to one stat call while nothing
// happens; a new stamp must hold still for one more poll, so that a file
// being written is not read half-way; the hash keeps a touch without
// changes from reloading.
func (r *Reloader) changed() bool {
	st, err := stat(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) || r.stamp != (fileStamp{}) {
			// A missing file mid-save is normal for editors that replace
			// it; wait for it to come back.
			r.stamp = fileStamp{}
		}
		return false
	}
	if st == r.stamp {
		r.pending = fileStamp{}
		return false
	}
	if st != r.pending {
		r.pending = st
		return false
	}
	r.stamp, r.pending = st, fileStamp{}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return false
	}
	return sha256.Sum256(data) != r.sum
}

func stat(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// optBool shows an optional setting: its value, or "default" when unset.
func optBool(b *bool) string {
	if b == nil {
		return "default"
	}
	return strconv.FormatBool(*b)
}

func optInt(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

package usage

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Spool keeps usage records on disk while the database is unreachable, so a
// long outage costs neither memory nor records. Batches are appended to a
// JSON-lines file and fsynced before Append returns. A drainer moves the
// file aside (rename, so new appends start a fresh file) and writes its
// records in batches; it deletes the file only after every batch is stored.
// A crash between storing and deleting replays records the database already
// has, which the store ignores by record ID: each record lands exactly once.
type Spool struct {
	dir  string
	mu   sync.Mutex // guards appends and the rename of the active file
	dmu  sync.Mutex // one drain at a time
	size int64      // bytes in the active file (approximate, for Pending)
}

const (
	spoolActive   = "usage-spool.jsonl"
	spoolDraining = "usage-spool.draining.jsonl"
)

// OpenSpool opens a spool directory, created at the first append so that a
// gateway whose database never fails leaves no trace. Files left by an
// earlier run are drained like new ones.
func OpenSpool(dir string) (*Spool, error) {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("usage spool %s is not a directory", dir)
	}
	s := &Spool{dir: dir}
	if fi, err := os.Stat(filepath.Join(dir, spoolActive)); err == nil {
		s.size = fi.Size()
	}
	return s, nil
}

// Dir returns the spool directory.
func (s *Spool) Dir() string { return s.dir }

// Append writes a batch durably.
func (s *Spool) Append(batch []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create usage spool directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, spoolActive), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	enc := json.NewEncoder(w)
	for i := range batch {
		if err := enc.Encode(&batch[i]); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if fi, err := f.Stat(); err == nil {
		s.size = fi.Size()
	}
	return f.Close()
}

// Pending reports whether records wait on disk.
func (s *Spool) Pending() bool {
	s.mu.Lock()
	active := s.size > 0
	s.mu.Unlock()
	if active {
		return true
	}
	_, err := os.Stat(filepath.Join(s.dir, spoolDraining))
	return err == nil
}

// Drain writes every spooled record to w in batches of up to maxBatch,
// including records appended while it runs. It returns the number of
// records written (including ones the store already had) and stops at the
// first failing batch, leaving the rest for later.
func (s *Spool) Drain(ctx context.Context, w Writer, maxBatch int) (int, error) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	total := 0
	for {
		n, more, err := s.drainOne(ctx, w, maxBatch)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// drainOne writes the file being drained (moving the active file aside
// first when there is none) and reports whether another file may wait.
func (s *Spool) drainOne(ctx context.Context, w Writer, maxBatch int) (int, bool, error) {
	draining := filepath.Join(s.dir, spoolDraining)
	if _, err := os.Stat(draining); errors.Is(err, fs.ErrNotExist) {
		s.mu.Lock()
		err := os.Rename(filepath.Join(s.dir, spoolActive), draining)
		if err == nil {
			s.size = 0
		}
		s.mu.Unlock()
		if errors.Is(err, fs.ErrNotExist) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
	}
	f, err := os.Open(draining)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	batch := make([]Record, 0, maxBatch)
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := w.InsertUsage(ctx, batch); err != nil {
			return err
		}
		n += len(batch)
		batch = batch[:0]
		return nil
	}
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A torn last line can only come from a crash during an
			// append that never returned; skip it rather than block the
			// records after it.
			continue
		}
		batch = append(batch, r)
		if len(batch) >= maxBatch {
			if err := flush(); err != nil {
				return n, false, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return n, false, err
	}
	if err := flush(); err != nil {
		return n, false, err
	}
	f.Close()
	return n, true, os.Remove(draining)
}

// drainLoop retries the spool until stop closes; the ledger runs it.
func (s *Spool) drainLoop(w Writer, maxBatch int, log *slog.Logger, stop <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if !s.Pending() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := s.Drain(ctx, w, maxBatch)
		cancel()
		if err != nil {
			log.Warn("usage spool not drained yet; will retry", "written", n, "err", err)
		} else if n > 0 {
			log.Info("usage spool drained into the database", "records", n)
		}
	}
}

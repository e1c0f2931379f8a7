package ledger

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"llmgate/internal/usage"
)

// Spool is the ledger's journal on disk: every record is appended to it
// before Add returns, so a record whose Add returned survives a kill of the
// process, and records wait in it while the database is unreachable.
//
// The journal is a directory of segment files (usage-<seq>.jsonl, one
// record per JSON line). The ledger appends to one segment at a time and
// starts a new one each time its writer takes the queue for the database;
// once every record of a segment is stored, the segment is deleted. A
// segment the database refused is left for the drainer, which writes it in
// batches and deletes it only after every batch is stored. Segments left by
// a process that was killed are drained the same way at the next start. A
// crash between storing and deleting replays records the database already
// has, which the store ignores by record ID: each record lands exactly once.
//
// One process uses a spool directory at a time (a lock file keeps a second
// one out), since a process draining another's live segment would race it.
type Spool struct {
	dir  string
	lock *os.File
	seq  atomic.Uint64 // last segment number handed out

	omu   sync.Mutex
	owned map[uint64]bool // segments the ledger still writes or stores; the drainer leaves them alone

	dmu sync.Mutex // one drain at a time

	// The segment being appended to, and the next one opened ahead.
	fmu     sync.Mutex
	f       *os.File
	fSeq    uint64
	fSize   int64
	fTorn   bool // a failed write may have left part of a line at the end
	next    *os.File
	nextSeq uint64
	syncOn  bool // fsync every append (power-loss durability)

	failWrite func() error // tests: called before each journal write
}

const (
	segPrefix = "usage-"
	segSuffix = ".jsonl"
	lockName  = "usage-spool.lock"
	// A stored segment's file, emptied, waits under this name to be the
	// next segment: on some filesystems creating a file costs a
	// millisecond of kernel time, renaming one a few microseconds.
	spareName = "usage-spare.tmp"
	// Files of the spool before it became a journal; drained like segments.
	legacyActive   = "usage-spool.jsonl"
	legacyDraining = "usage-spool.draining.jsonl"
)

// ErrSpoolBusy is returned by OpenSpool when another process holds the
// spool directory.
var ErrSpoolBusy = errors.New("in use by another gateway process")

// OpenSpool opens (creating) a spool directory and locks it for this
// process. Segments left by an earlier run are drained by the ledger.
//
// Its errors name the directory and say, once, what to do.
func OpenSpool(dir string) (*Spool, error) {
	const writable = " (spool_dir must name a directory this process can write)"
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("usage spool %s is not a directory%s", dir, writable)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("usage spool %s: %w%s", dir, err, writable)
	}
	lf, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("usage spool %s: lock: %w%s", dir, err, writable)
	}
	if err := lockFile(lf); err != nil {
		lf.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("usage spool %s: %w (give each gateway process its own spool_dir)", dir, ErrSpoolBusy)
		}
		return nil, fmt.Errorf("usage spool %s: lock: %w%s", dir, err, writable)
	}
	s := &Spool{dir: dir, lock: lf, owned: map[uint64]bool{}}
	segs, err := s.segments()
	if err != nil {
		s.Close()
		return nil, err
	}
	for _, g := range segs {
		if g.seq > s.seq.Load() {
			s.seq.Store(g.seq)
		}
	}
	return s, nil
}

// Dir returns the spool directory.
func (s *Spool) Dir() string { return s.dir }

// Close releases the directory lock. The ledger closes the spool it was
// given when it is closed.
func (s *Spool) Close() error {
	s.fmu.Lock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if s.next != nil { // opened ahead, never written
		s.next.Close()
		os.Remove(s.segPath(s.nextSeq))
		s.next = nil
	}
	s.fmu.Unlock()
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close() // closing the descriptor drops the lock
	s.lock = nil
	return err
}

func (s *Spool) segPath(seq uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s%016x%s", segPrefix, seq, segSuffix))
}

type segment struct {
	seq  uint64 // 0 for the files of older versions
	path string
}

// segments lists segment files, oldest first (older versions' files first).
func (s *Spool) segments() ([]segment, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []segment
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == legacyDraining || name == legacyActive:
			out = append(out, segment{path: filepath.Join(s.dir, name)})
		case strings.HasPrefix(name, segPrefix) && strings.HasSuffix(name, segSuffix):
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 16, 64)
			if err != nil || n == 0 {
				continue
			}
			out = append(out, segment{seq: n, path: filepath.Join(s.dir, name)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].seq != out[j].seq {
			return out[i].seq < out[j].seq
		}
		return out[i].path > out[j].path // legacy: "draining" before "active"
	})
	return out, nil
}

// newSegment reserves a segment number, owned by the caller until release.
func (s *Spool) newSegment() uint64 {
	n := s.seq.Add(1)
	s.omu.Lock()
	s.owned[n] = true
	s.omu.Unlock()
	return n
}

// release hands a segment to the drainer (or forgets it once removed).
func (s *Spool) release(seq uint64) {
	s.omu.Lock()
	delete(s.owned, seq)
	s.omu.Unlock()
}

func (s *Spool) isOwned(seq uint64) bool {
	s.omu.Lock()
	defer s.omu.Unlock()
	return seq != 0 && s.owned[seq]
}

func (s *Spool) openSeg(seq uint64) (*os.File, error) {
	path := s.segPath(seq)
	// Reuse the spare file when there is one. It was emptied before it was
	// named spare; were it not, its lines are records already stored, which
	// a replay skips by record ID.
	_ = os.Rename(filepath.Join(s.dir, spareName), path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open usage spool segment: %w", err)
	}
	if s.syncOn {
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// prepare opens segment seq ahead of its first write.
func (s *Spool) prepare(seq uint64) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if (s.f != nil && s.fSeq >= seq) || (s.next != nil && s.nextSeq == seq) {
		return
	}
	if s.next != nil {
		s.next.Close()
		os.Remove(s.segPath(s.nextSeq))
		s.next = nil
	}
	if f, err := s.openSeg(seq); err == nil { // else the first write opens it and reports why not
		s.next, s.nextSeq = f, seq
	}
}

// write appends b (whole lines) to segment seq, closing the segment
// written before. A failed write is cut back off the file so that the next
// line starts clean; when that fails too, the next write starts with a
// newline, so only the torn line is unreadable.
func (s *Spool) write(seq uint64, b []byte) error {
	if s.failWrite != nil {
		if err := s.failWrite(); err != nil {
			return err
		}
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.f != nil && s.fSeq != seq {
		s.f.Close()
		s.f = nil
	}
	if s.f == nil {
		f := s.next
		if f != nil && s.nextSeq == seq {
			s.next = nil
		} else {
			var err error
			if f, err = s.openSeg(seq); err != nil {
				return err
			}
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		s.f, s.fSeq, s.fSize, s.fTorn = f, seq, fi.Size(), false
	}
	if s.fTorn {
		if _, err := s.f.Write([]byte{'\n'}); err != nil {
			return fmt.Errorf("write usage spool: %w", err)
		}
		s.fSize++
		s.fTorn = false
	}
	n, err := s.f.Write(b)
	if err == nil && s.syncOn {
		err = s.f.Sync()
	}
	if err != nil {
		if n > 0 {
			if terr := s.f.Truncate(s.fSize); terr != nil {
				s.fSize += int64(n)
				s.fTorn = true
			}
		}
		return fmt.Errorf("write usage spool: %w", err)
	}
	s.fSize += int64(n)
	return nil
}

// seal closes segment seq if it is open: nothing more is appended to it.
func (s *Spool) seal(seq uint64) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.f != nil && s.fSeq == seq {
		s.f.Close()
		s.f = nil
	}
}

// remove deletes a segment whose records are all stored: its file is
// emptied and kept as the spare for a later segment.
func (s *Spool) remove(seq uint64) error {
	path := s.segPath(seq)
	if err := os.Truncate(path, 0); err == nil {
		if os.Rename(path, filepath.Join(s.dir, spareName)) == nil {
			return nil
		}
	}
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) { // never written: its records failed to journal
		return nil
	}
	return err
}

// Append writes a batch durably (fsynced) as a segment of its own, handed
// to the drainer at once. The ledger uses it for records whose journal
// write failed when the database refuses them too.
func (s *Spool) Append(batch []usage.Record) error {
	if s.failWrite != nil {
		if err := s.failWrite(); err != nil {
			return err
		}
	}
	seq := s.newSegment()
	defer s.release(seq)
	var b []byte
	for i := range batch {
		b = appendRecord(b, &batch[i])
	}
	path := s.segPath(seq)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// Pending reports whether records wait on disk for the drainer.
func (s *Spool) Pending() bool {
	segs, err := s.segments()
	if err != nil {
		return true // cannot tell: assume so, the drainer reports why
	}
	for _, g := range segs {
		if !s.isOwned(g.seq) {
			return true
		}
	}
	return false
}

// Drain writes every segment the ledger no longer owns to w in batches of
// up to maxBatch, deleting each once all its records are stored. It
// returns the number of records written (including ones the store already
// had) and stops at the first failing batch, leaving the rest for later.
func (s *Spool) Drain(ctx context.Context, w usage.Writer, maxBatch int) (int, error) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	segs, err := s.segments()
	if err != nil {
		return 0, err
	}
	total := 0
	for _, g := range segs {
		if s.isOwned(g.seq) {
			continue
		}
		n, err := drainFile(ctx, w, g.path, maxBatch)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// drainFile writes one segment's records and deletes the file.
func drainFile(ctx context.Context, w usage.Writer, path string, maxBatch int) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	batch := make([]usage.Record, 0, maxBatch)
	n, torn := 0, 0
	lastFailed := false // the last line read was not a record
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
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var r usage.Record
		lastFailed = false
		if err := decodeRecord(line, &r); err != nil {
			lastFailed = true
			// A torn line can only come from a write that failed (and
			// whose Add reported so) or a crash during an append that
			// never returned; skip it rather than block the records
			// after it (the file is then kept aside, below).
			torn++
			continue
		}
		batch = append(batch, r)
		if len(batch) >= maxBatch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return n, err
	}
	if err := flush(); err != nil {
		return n, err
	}
	if lastFailed && !endsWithNewline(f) {
		torn-- // an append cut by a crash: expected, and its Add never returned
	}
	f.Close()
	if torn > 0 {
		// Not deleted: kept beside the spool, out of the replay (its
		// readable records are stored), for whoever looks into it.
		slog.Warn("usage spool segment had lines that are not records; its records were stored and the file is kept aside",
			"file", path+badSuffix, "unreadable_lines", torn, "records", n)
		if err := os.Rename(path, path+badSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		return n, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	return n, nil
}

// endsWithNewline reports whether the file's last byte is a newline.
func endsWithNewline(f *os.File) bool {
	info, err := f.Stat()
	if err != nil || info.Size() == 0 {
		return false
	}
	var b [1]byte
	_, err = f.ReadAt(b[:], info.Size()-1)
	return err == nil && b[0] == '\n'
}

// badSuffix marks a drained segment that held unreadable lines.
const badSuffix = ".bad"

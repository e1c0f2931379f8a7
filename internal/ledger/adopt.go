package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"llmgate/internal/usage"
)

// ErrForeignSpool is returned by Adopt when the other directory's records
// are not the caller's database's: they stay where they are.
var ErrForeignSpool = errors.New("usage spool holds another database's records")

// Adopt moves the unsent records of dir, another spool directory (such as
// the default of earlier versions, which every SQLite database of a folder
// shared), into s, whose ledger then writes them like its own; call it
// before the ledger starts. dir is locked while its files move, so a
// directory another process holds is left alone (ErrSpoolBusy). ours is
// given the key ids its records name and says whether they are this
// database's; when it says no, nothing moves (ErrForeignSpool). dir is
// removed when nothing else is left in it. Adopt returns the number of
// records moved; a directory that does not exist has none.
func (s *Spool) Adopt(dir string, ours func(keyIDs map[string]bool) bool) (int, error) {
	abs, err1 := filepath.Abs(dir)
	own, err2 := filepath.Abs(s.dir)
	if err1 == nil && err2 == nil && abs == own {
		return 0, nil
	}
	if fi, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) || err == nil && !fi.IsDir() {
		return 0, nil
	}
	lockPath := filepath.Join(dir, lockName)
	lf, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if errors.Is(err, fs.ErrNotExist) { // removed meanwhile by another adopter
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer lf.Close()
	if err := lockFile(lf); err != nil {
		if errors.Is(err, errLocked) {
			return 0, fmt.Errorf("%s: %w", dir, ErrSpoolBusy)
		}
		return 0, err
	}
	old := &Spool{dir: dir}
	segs, err := old.segments()
	if err != nil {
		return 0, err
	}
	keyIDs, n := map[string]bool{}, 0
	for _, g := range segs {
		if err := readKeys(g.path, keyIDs, &n); err != nil {
			return 0, err
		}
	}
	if n > 0 && ours != nil && !ours(keyIDs) {
		return 0, fmt.Errorf("%s: %w", dir, ErrForeignSpool)
	}
	for _, g := range segs {
		if err := os.Rename(g.path, s.segPath(s.seq.Add(1))); err != nil {
			return 0, fmt.Errorf("move %s into %s: %w", g.path, s.dir, err)
		}
	}
	if len(segs) > 0 {
		if err := syncDir(s.dir); err != nil {
			return n, err
		}
	}
	// Only the lock file left: the directory goes (another file, such as a
	// .bad segment kept aside, keeps it).
	os.Remove(lockPath)
	os.Remove(dir)
	return n, nil
}

// readKeys adds the key ids of a segment's records to ids and counts them.
func readKeys(path string, ids map[string]bool, n *int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r usage.Record
		if len(sc.Bytes()) == 0 || decodeRecord(sc.Bytes(), &r) != nil {
			continue // a torn line: the drainer deals with it
		}
		ids[r.KeyID] = true
		*n++
	}
	return sc.Err()
}

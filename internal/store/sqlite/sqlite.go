// Package sqlite implements the store on an embedded SQLite database
// (modernc.org/sqlite, pure Go, WAL mode).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/store"
	"llmgate/internal/store/sqlstore"
	"llmgate/internal/usage"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a SQLite-backed store.
//
// The database file is watched: if the file at the path is deleted or
// replaced while open, every ledger write fails (rather than land in a file
// no longer reachable), CheckHealth says so, the old connections are closed,
// and the store reopens the file found at the path once there is one.
type Store struct {
	path  string // "" for databases that are not a plain file
	h     atomic.Pointer[handle]
	mu    sync.Mutex // one reopen at a time
	isMem bool
}

// handle is one open database: the connection pool, the ledger's prepared
// statements and the file they were opened on.
type handle struct {
	db   *sql.DB
	us   *sqlstore.UsageStmts // the ledger writer's statements, prepared once
	file *os.File             // the database file as opened, held so its inode is not reused
	info os.FileInfo          // its identity (fstat at open: device and inode)
	wal  os.FileInfo          // the -wal and -shm files as opened (nil if none)
	shm  os.FileInfo
	once sync.Once
	shut atomic.Bool
}

// ErrFileGone is returned (wrapped) when the database file was deleted or
// replaced while the store had it open.
var ErrFileGone = errors.New("sqlite database file gone")

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path and applies
// migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	s := &Store{path: path}
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		s.path, s.isMem = "", true
	}
	h, err := s.open(ctx, path, true)
	if err != nil {
		return nil, err
	}
	s.h.Store(h)
	return s, nil
}

// open opens the database at path, creating the file only when create is
// set. Connections open it with mode=rw, so a connection the pool opens
// later fails on a deleted file instead of creating an empty one.
func (s *Store) open(ctx context.Context, path string, create bool) (*handle, error) {
	h := &handle{}
	dsn := path
	q := url.Values{}
	if !s.isMem {
		f, err := openFile(path, create)
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		h.file = f
		if h.info, err = f.Stat(); err != nil {
			h.close()
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		dsn = "file:" + path
		q.Add("mode", "rw")
	}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_txlock", "immediate")
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("sqlite", dsn+sep+q.Encode())
	if err != nil {
		h.close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	h.db = db
	if err := migrate(ctx, db); err != nil {
		h.close()
		return nil, fmt.Errorf("migrate sqlite %s: %w", path, err)
	}
	if h.us, err = sqlstore.PrepareUsage(ctx, db); err != nil {
		h.close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	if !s.isMem {
		h.wal, _ = os.Stat(path + "-wal")
		h.shm, _ = os.Stat(path + "-shm")
	}
	return h, nil
}

// openFile opens the database file, creating it when create is set. (A
// new, empty file may sit next to the -wal file of a database deleted
// before: SQLite discards a WAL whose database is empty.)
func openFile(path string, create bool) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	return os.OpenFile(path, flags, 0o644)
}

// removeStaleWAL deletes the -wal and -shm files the closed handle h used
// when they are still at the path: they belong to the deleted or replaced
// database (SQLite leaves them when its file has moved), and SQLite would
// apply their pages to the file now at the path.
func (s *Store) removeStaleWAL(h *handle) {
	for _, f := range []struct {
		suffix string
		info   os.FileInfo
	}{{"-wal", h.wal}, {"-shm", h.shm}} {
		if f.info == nil {
			continue
		}
		if now, err := os.Stat(s.path + f.suffix); err == nil && os.SameFile(now, f.info) {
			os.Remove(s.path + f.suffix)
		}
	}
}

func (h *handle) close() error {
	var err error
	h.once.Do(func() {
		h.shut.Store(true)
		if h.us != nil {
			h.us.Close()
		}
		if h.db != nil {
			err = h.db.Close()
		}
		if h.file != nil {
			h.file.Close()
		}
	})
	return err
}

// identity returns nil while path still names the file h opened: same
// device and inode (fstat of the open file against stat of the path).
func (h *handle) identity(path string) error {
	if h.info == nil {
		return nil
	}
	if h.shut.Load() {
		return fmt.Errorf("%w: %s was deleted or replaced while in use; no database file to reopen yet", ErrFileGone, path)
	}
	now, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s was deleted while in use (restore it, or restart to start a new one)", ErrFileGone, path)
	}
	if err != nil {
		return fmt.Errorf("stat sqlite database %s: %w", path, err)
	}
	if !os.SameFile(h.info, now) {
		return fmt.Errorf("%w: %s was replaced by another file while in use", ErrFileGone, path)
	}
	return nil
}

func (s *Store) cur() *handle { return s.h.Load() }

func (s *Store) db() *sql.DB { return s.h.Load().db }

// Close closes the database.
func (s *Store) Close() error {
	return s.cur().close()
}

// CheckHealth reports whether the database file is still the one opened
// and answers. When the file was deleted or replaced, it closes the old
// connections (so nothing more is written into a file nobody can reach) and
// reopens whatever database file is now at the path; until there is one,
// it returns the reason.
func (s *Store) CheckHealth(ctx context.Context) error {
	h := s.cur()
	err := h.identity(s.path)
	if err == nil {
		var v int64
		return h.db.QueryRowContext(ctx, `SELECT v FROM versions WHERE name = 'keys'`).Scan(&v)
	}
	if !errors.Is(err, ErrFileGone) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h != s.cur() { // reopened meanwhile
		return nil
	}
	h.close()
	if _, serr := os.Stat(s.path); serr != nil {
		return err
	}
	s.removeStaleWAL(h)
	nh, oerr := s.open(ctx, s.path, false)
	if oerr != nil {
		return fmt.Errorf("%v; the file now there cannot be used: %w", err, oerr)
	}
	s.h.Store(nh)
	return nil
}

func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`, name, time.Now().Unix()); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// GetSetting returns a setting's value, or "" when unset.
func (s *Store) GetSetting(ctx context.Context, name string) (string, error) {
	return sqlstore.GetSetting(ctx, s.db(), sqlstore.SQLite, name)
}

// SetSetting stores a setting.
func (s *Store) SetSetting(ctx context.Context, name, value string) error {
	return sqlstore.SetSetting(ctx, s.db(), sqlstore.SQLite, name, value)
}

// CreateKey stores a new key.
func (s *Store) CreateKey(ctx context.Context, k *keys.Key) error {
	return sqlstore.CreateKey(ctx, s.db(), sqlstore.SQLite, k)
}

// ListKeys returns every key, newest first.
func (s *Store) ListKeys(ctx context.Context) ([]*keys.Key, error) {
	return sqlstore.ListKeys(ctx, s.db())
}

// GetKey returns one key by ID.
func (s *Store) GetKey(ctx context.Context, id string) (*keys.Key, error) {
	return sqlstore.GetKey(ctx, s.db(), sqlstore.SQLite, id)
}

// RevokeKey marks a key revoked.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	return sqlstore.RevokeKey(ctx, s.db(), sqlstore.SQLite, id, at)
}

// KeysVersion returns the key change counter.
func (s *Store) KeysVersion(ctx context.Context) (int64, error) {
	return sqlstore.KeysVersion(ctx, s.db())
}

// InsertUsage writes a batch atomically; records whose ID is already
// stored are skipped, so a retried batch never duplicates. Hourly rollups
// are updated in the same transaction from the new records only. The
// database file's identity is compared with the path's before and after:
// a batch that may have gone into a deleted or replaced file counts as not
// written, so the ledger keeps it (and writes it again, idempotently, into
// the database that takes its place). The batch is not cut short when ctx
// ends.
func (s *Store) InsertUsage(ctx context.Context, recs []usage.Record) error {
	h := s.cur()
	if err := h.identity(s.path); err != nil {
		return err
	}
	// The statements run without the caller's cancellation: for a
	// context that can end, the driver starts a goroutine and installs a
	// progress handler around every statement, which cost a third of the
	// CPU of a ledger row (~10 µs). A wait for the database lock is bounded
	// by busy_timeout, and the statements themselves do not block.
	if err := sqlstore.InsertUsage(context.WithoutCancel(ctx), h.db, sqlstore.SQLite, h.us, recs); err != nil {
		return err
	}
	if err := h.identity(s.path); err != nil {
		return fmt.Errorf("usage batch not counted as written: %w", err)
	}
	return nil
}

// Summary aggregates usage per group from hourly rollups plus the raw
// records of partial hours at the range's edges (see rollup.SummaryBuilder).
func (s *Store) Summary(ctx context.Context, f usage.Filter) ([]usage.SummaryRow, error) {
	return sqlstore.Summary(ctx, s.db(), sqlstore.SQLite, f)
}

// UseSince implements usage.RateReader.
func (s *Store) UseSince(ctx context.Context, since time.Time) ([]usage.SecondUse, error) {
	return sqlstore.UseSince(ctx, s.db(), sqlstore.SQLite, since)
}

// Recent returns the newest records, newest first.
func (s *Store) Recent(ctx context.Context, limit int) ([]usage.Record, error) {
	return sqlstore.Recent(ctx, s.db(), sqlstore.SQLite, limit)
}

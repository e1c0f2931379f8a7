//go:build !unix

package ledger

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked")

// lockFile does nothing here: this platform's builds do not keep a second
// process out of a spool directory, so give each process its own spool_dir.
func lockFile(*os.File) error { return nil }

// syncDir does nothing here: directories cannot be opened for syncing.
func syncDir(string) error { return nil }

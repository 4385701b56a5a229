// Atomic exchange of two names on Linux (renameat2 RENAME_EXCHANGE).

//go:build linux

package fileio

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Exchange swaps the files or directories a and b in one step: no instant
// sees either name missing. It fails with errors.ErrUnsupported where the
// system or the file system cannot (then a caller falls back to renames).
func Exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: errors.ErrUnsupported}
	}
	if err != nil {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
	}
	return nil
}

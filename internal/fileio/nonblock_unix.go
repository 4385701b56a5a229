// The non-blocking open of openRegular on Unix systems.

//go:build unix

package fileio

import (
	"os"
	"syscall"
)

const oNonblock = syscall.O_NONBLOCK

// clearNonblock makes reads of a regular file opened O_NONBLOCK ordinary
// blocking reads (for regular files the flag changes nothing on Linux, but
// POSIX leaves it open).
func clearNonblock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}

// The advisory lock that marks a temporary file of WriteAtomic as being
// written, on Unix systems (flock: released by the kernel when the writer
// dies, kill -9 included).

//go:build unix

package fileio

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive lock on f without waiting; false when another
// open file holds one.
func tryLock(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// canTellStale: a temporary without a lock is stale.
const canTellStale = true

// Elsewhere there is no advisory lock: WriteAtomic cannot tell a stale
// temporary from one being written, and removes none.

//go:build !unix

package fileio

import "os"

func tryLock(*os.File) bool { return true }

const canTellStale = false

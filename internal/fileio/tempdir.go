// Temporary directories written beside their target (draftd export): each
// is named PREFIX followed by digits and holds an advisory lock while its
// writer lives, so that the next writer can tell a leftover of one that
// died (kill -9, a second Ctrl-C) from one being written, and remove it.

package fileio

import (
	"os"
	"path/filepath"
	"strings"
)

// TempDir creates a directory in parent named prefix + digits, locked until
// unlock runs (or the process ends). Where there is no advisory lock it is
// not locked, and RemoveStaleDirs keeps every directory.
func TempDir(parent, prefix string) (dir string, unlock func(), err error) {
	for {
		dir, err := os.MkdirTemp(parent, prefix+"*")
		if err != nil {
			return "", nil, err
		}
		f, err := os.Open(dir)
		if err != nil {
			return "", nil, err
		}
		if tryLock(f) {
			// Another writer's cleanup may have taken it for a leftover in
			// the instant before the lock: then take another.
			fst, err1 := f.Stat()
			pst, err2 := os.Stat(dir)
			if err1 == nil && err2 == nil && os.SameFile(fst, pst) {
				return dir, func() { f.Close() }, nil
			}
		}
		f.Close()
	}
}

// isTempDir reports whether name is prefix followed by one or more digits.
func isTempDir(name, prefix string) bool {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok || digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// RemoveStaleDirs removes the directories of parent named prefix + digits
// that no live writer holds locked (see TempDir), and returns their paths.
// Other names, and everything where locks cannot be told, are kept.
func RemoveStaleDirs(parent, prefix string) []string {
	if !canTellStale {
		return nil
	}
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		if !e.IsDir() || !isTempDir(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if tryLock(f) && os.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
		f.Close()
	}
	return removed
}

// SyncDir flushes a directory's entries (the names created, renamed or
// removed in it) to the disk.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

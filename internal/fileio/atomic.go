// Package fileio holds the file plumbing shared by the model-file packages:
// read-only memory maps, atomic writes of files and directories. It knows
// nothing of file formats.
package fileio

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteAtomic writes path through write into a temporary file in the same
// directory, syncs it, and renames it over path, so readers never see a
// partial file. On error the temporary file is removed.
//
// The temporary is named ".NAME.tmpDIGITS" and holds an advisory lock while
// it is written. A temporary of that pattern without a lock is the leftover
// of a writer that died (kill -9, a crash, a power cut): WriteAtomic removes
// such leftovers of path before it writes (on Unix; elsewhere it cannot
// tell, and leaves them).
func WriteAtomic(path string, write func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	removeStale(dir, base)
	var tmp *os.File
	for {
		f, err := os.CreateTemp(dir, "."+base+".tmp*")
		if err != nil {
			return err
		}
		if tryLock(f) {
			tmp = f
			break
		}
		// Another writer's cleanup took it for a leftover in the instant
		// before the lock: it removes it; take another.
		f.Close()
	}
	err := write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if !canTellStale { // no lock to hold, and an open file may not be renamed
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		// Renamed while open on Unix: the lock holds until the name no
		// longer matches the pattern, so no cleanup takes it for a leftover.
		err = os.Rename(tmp.Name(), path)
	}
	if canTellStale {
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// isTemp reports whether name is a temporary of WriteAtomic for base.
func isTemp(name, base string) bool {
	digits, ok := strings.CutPrefix(name, "."+base+".tmp")
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

// removeStale removes the unlocked temporaries of base in dir.
func removeStale(dir, base string) {
	if !canTellStale {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return // the write itself will say what is wrong with dir
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !isTemp(e.Name(), base) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if tryLock(f) { // nobody writes it
			os.Remove(p)
		}
		f.Close()
	}
}

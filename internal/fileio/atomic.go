// Package fileio holds the file plumbing shared by the model-file packages:
// read-only memory maps and atomic writes. It knows nothing of file formats.
package fileio

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteAtomic writes path through write into a temporary file in the same
// directory, syncs it, and renames it over path, so readers never see a
// partial file. On error the temporary file is removed.
func WriteAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	err = write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

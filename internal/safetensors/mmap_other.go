// mmap_other.go reads the whole file into memory on systems without mmap. It
// is a portability fallback, not the zero-copy path draftd relies on.

//go:build !unix

package safetensors

import "os"

func mapFile(path string) ([]byte, error) { return os.ReadFile(path) }

func unmap([]byte) error { return nil }

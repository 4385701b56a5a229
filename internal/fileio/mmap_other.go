// mmap_other.go reads the whole file into memory on systems without mmap. It
// is a portability fallback, not the zero-copy path draftd relies on.

//go:build !unix

package fileio

func Map(path string) ([]byte, error) { return ReadFile(path) }

func Unmap([]byte) error { return nil }

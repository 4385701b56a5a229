// Read-only whole-file memory maps on Unix systems. Not a
// general mmap wrapper: only the one read-only, whole-file mapping that the
// model-file readers (gguf, safetensors) need.

//go:build unix

package fileio

import (
	"fmt"
	"math"
	"syscall"
)

// Map maps the whole of path read-only. An empty file maps to nil; a path
// that is not a regular file (a FIFO, a device) fails at once.
// Unmap must be called with the returned slice when done.
func Map(path string) ([]byte, error) {
	fd, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	if size == 0 {
		return nil, nil
	}
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("%s: file of %d bytes is too large to map", path, size)
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return data, nil
}

func Unmap(data []byte) error {
	if data == nil {
		return nil
	}
	return syscall.Munmap(data)
}

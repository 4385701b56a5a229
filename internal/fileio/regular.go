// Opening model files: only regular files are read. A named pipe, a device
// or a socket given as a model path would block the loader forever (an
// open of a FIFO waits for a writer) or read endless bytes, so it fails at
// once with an error that names the file and what it is.

package fileio

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
)

// openRegular opens path for reading without blocking on a FIFO (the open
// is non-blocking where the system has it), and fails unless it is a
// regular file. It returns the file and its size.
func openRegular(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is %s, not a regular file", path, kind(st.Mode()))
	}
	if err := clearNonblock(f); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return f, st.Size(), nil
}

// kind names a file mode's type.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// ReadFile is os.ReadFile for regular files only (see openRegular).
func ReadFile(path string) ([]byte, error) { return ReadFileMax(path, math.MaxInt-1) }

// ErrTooLarge: a file is larger than what its reader accepts.
var ErrTooLarge = errors.New("file too large")

// ReadFileMax is ReadFile for a file of at most limit bytes: a larger one
// (or one that grows past limit while it is read) fails with ErrTooLarge
// and an error naming the file, its size and the limit, before more than
// limit+1 bytes are held (a sparse file of many GiB is not read).
func ReadFileMax(path string, limit int64) ([]byte, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	limit = min(limit, math.MaxInt-1)
	if size > limit {
		return nil, fmt.Errorf("%s: %w (%d bytes; the limit is %d)", path, ErrTooLarge, size, limit)
	}
	data := make([]byte, 0, size+1)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if int64(len(data)) > limit {
			return nil, fmt.Errorf("%s: %w (it grew past the limit of %d bytes while read)", path, ErrTooLarge, limit)
		}
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(data) == cap(data) { // the file grew
			data = append(data, 0)[:len(data)]
		}
	}
}

package fileio

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestNotRegularFails: a FIFO (which would block an open for ever) or a
// device fails at once with an error naming the path and what it is; a
// regular file reads and maps.
func TestNotRegularFails(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, c := range []struct{ path, what string }{
		{fifo, "named pipe"}, {"/dev/zero", "character device"}, {dir, "directory"},
	} {
		for name, f := range map[string]func(string) ([]byte, error){"Map": Map, "ReadFile": ReadFile} {
			_, err := f(c.path)
			if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.what) {
				t.Errorf("%s(%s): have %v; want an error naming it as a %s", name, c.path, err, c.what)
			}
		}
	}
	reg := filepath.Join(dir, "file")
	want := bytes.Repeat([]byte("draftd"), 1000)
	if err := os.WriteFile(reg, want, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(reg)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("ReadFile: %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	m, err := Map(reg)
	if err != nil || !bytes.Equal(m, want) {
		t.Errorf("Map: %d bytes, %v; want %d bytes", len(m), err, len(want))
	}
	Unmap(m)
}

// TestReadFileMax: a file within the limit reads whole; one over it fails
// with ErrTooLarge naming the file, without being read (a sparse file).
func TestReadFileMax(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	os.WriteFile(small, []byte("12345"), 0o644)
	if b, err := ReadFileMax(small, 5); err != nil || string(b) != "12345" {
		t.Errorf("within the limit: %q, %v", b, err)
	}
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(8 << 30)
	f.Close()
	for _, p := range []string{small, huge} {
		_, err := ReadFileMax(p, 4)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s over a limit of 4: have %v; want ErrTooLarge naming it", p, err)
		}
	}
}

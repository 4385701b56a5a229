//go:build unix

package fileio

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteAtomicStale: a leftover temporary of the target (unlocked: its
// writer died) is removed; one being written (locked) and files of other
// names are kept.
func TestWriteAtomicStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	stale := filepath.Join(dir, ".m.gguf.tmp123")
	live := filepath.Join(dir, ".m.gguf.tmp456")
	others := []string{filepath.Join(dir, ".m.gguf.tmp"), filepath.Join(dir, ".m.gguf.tmp12a"), filepath.Join(dir, ".n.gguf.tmp1"), filepath.Join(dir, "m.gguf.tmp1")}
	for _, p := range append([]string{stale, live}, others...) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, func(w io.Writer) error { _, err := io.WriteString(w, "data"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Fatalf("%s: %q %v", path, b, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale %s kept (%v)", stale, err)
	}
	for _, p := range append([]string{live}, others...) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed (%v)", p, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2+len(others) {
		t.Errorf("%d entries left in %s; want %d", len(ents), dir, 2+len(others))
	}
}

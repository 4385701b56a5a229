//go:build unix

package fileio

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// TestRemoveStaleDirs: an unlocked PREFIX+digits directory is removed with
// what it holds; a TempDir being written, other names and files are kept.
func TestRemoveStaleDirs(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".out.export-123")
	os.Mkdir(stale, 0o755)
	os.WriteFile(filepath.Join(stale, "model.safetensors"), []byte("partial"), 0o644)
	live, unlock, err := TempDir(dir, ".out.export-")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	keep := []string{".out.export-", ".out.export-12x", ".out.export-1.old", ".other.export-1", "out"}
	for _, k := range keep {
		os.Mkdir(filepath.Join(dir, k), 0o755)
	}
	os.WriteFile(filepath.Join(dir, ".out.export-77"), nil, 0o644) // a file, not a directory
	removed := RemoveStaleDirs(dir, ".out.export-")
	if !slices.Equal(removed, []string{stale}) {
		t.Errorf("removed %q; want only %s", removed, stale)
	}
	want := append(slices.Clone(keep), filepath.Base(live), ".out.export-77")
	slices.Sort(want)
	var have []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		have = append(have, e.Name())
	}
	if !slices.Equal(have, want) {
		t.Errorf("left %q; want %q", have, want)
	}
	unlock()
	if removed := RemoveStaleDirs(dir, ".out.export-"); !slices.Equal(removed, []string{live}) {
		t.Errorf("after its unlock: removed %q; want %s", removed, live)
	}
}

// TestExchange swaps two directories (Linux), or says it cannot.
func TestExchange(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.Mkdir(a, 0o755)
	os.WriteFile(filepath.Join(a, "in-a"), nil, 0o644)
	os.Mkdir(b, 0o755)
	err := Exchange(a, b)
	if runtime.GOOS != "linux" || errors.Is(err, errors.ErrUnsupported) {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("have %v; want ErrUnsupported", err)
		}
		t.Skip("no RENAME_EXCHANGE here")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b, "in-a")); err != nil {
		t.Errorf("b after the exchange: %v", err)
	}
	if ents, _ := os.ReadDir(a); len(ents) != 0 {
		t.Errorf("a after the exchange holds %d entries; want 0", len(ents))
	}
	if err := Exchange(a, filepath.Join(dir, "missing")); err == nil {
		t.Error("an exchange with a missing name succeeded")
	}
}

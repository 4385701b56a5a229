package testmodel

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/models from the generator")

const shippedDir = "../../testdata/models"

// TestShippedModelsUpToDate regenerates every shipped tiny model and checks
// that the committed files are byte-identical (the generator is
// deterministic and the golden files were computed from these bytes).
// With -update it rewrites them instead.
func TestShippedModelsUpToDate(t *testing.T) {
	for _, s := range Shipped() {
		t.Run(s.Name, func(t *testing.T) {
			dir := t.TempDir()
			if *update {
				dir = shippedDir
				os.RemoveAll(filepath.Join(dir, s.Name))
			}
			if err := s.WriteGGUF(filepath.Join(dir, s.Name+".gguf")); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteHF(filepath.Join(dir, s.Name)); err != nil {
				t.Fatal(err)
			}
			if *update {
				return
			}
			err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				have, err := os.ReadFile(filepath.Join(shippedDir, rel))
				if err != nil {
					t.Errorf("shipped %s: %v (run go test ./internal/testmodel -run TestShipped -update)", rel, err)
					return nil
				}
				want, _ := os.ReadFile(p)
				if !bytes.Equal(have, want) {
					t.Errorf("shipped %s differs from the generator's output (run with -update and regenerate the golden files)", rel)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

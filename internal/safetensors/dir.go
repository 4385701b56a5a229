// dir.go opens a Hugging Face model directory's weights: the shards named by
// model.safetensors.index.json, else model.safetensors, else every
// *.safetensors file. It is not a config reader: config.json and
// tokenizer.json belong to other packages.

package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/draftd/draftd/internal/fileio"
)

// MaxIndexLen bounds model.safetensors.index.json (one line per tensor:
// real ones are well under 1 MB).
const MaxIndexLen = 64 << 20

// IndexName and SingleName are the file names Hugging Face uses.
const (
	IndexName  = "model.safetensors.index.json"
	SingleName = "model.safetensors"
)

// Dir is the set of safetensors files of one model directory.
type Dir struct {
	Path  string
	Files []*File
	// WeightMap is the index's tensor → file name map (nil without an index).
	WeightMap map[string]string

	byName map[string]*Tensor
}

type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenDir opens the weights of the model directory dir.
func OpenDir(dir string) (*Dir, error) {
	d := &Dir{Path: dir, byName: map[string]*Tensor{}}
	var names []string
	indexPath := filepath.Join(dir, IndexName)
	if st, err := os.Stat(indexPath); err == nil && st.Size() > MaxIndexLen {
		return nil, fmt.Errorf("safetensors %s: %w: %d bytes; an index is at most %d", indexPath, ErrFormat, st.Size(), MaxIndexLen)
	}
	raw, err := fileio.ReadFile(indexPath)
	switch {
	case err == nil:
		var idx index
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fmt.Errorf("safetensors %s: %w: %v", indexPath, ErrFormat, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("safetensors %s: %w: no weight_map", indexPath, ErrFormat)
		}
		d.WeightMap = idx.WeightMap
		seen := map[string]bool{}
		for tensor, file := range idx.WeightMap {
			if !filepath.IsLocal(file) {
				return nil, fmt.Errorf("safetensors %s: %w: tensor %q maps to %q, outside the directory", indexPath, ErrFormat, tensor, file)
			}
			if !seen[file] {
				seen[file] = true
				names = append(names, file)
			}
		}
		sort.Strings(names)
	case errors.Is(err, os.ErrNotExist):
		if _, err := os.Stat(filepath.Join(dir, SingleName)); err == nil {
			names = []string{SingleName}
		} else {
			matches, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if err != nil {
				return nil, fmt.Errorf("safetensors %s: %w", dir, err)
			}
			for _, m := range matches {
				names = append(names, filepath.Base(m))
			}
			if len(names) == 0 {
				return nil, fmt.Errorf("safetensors %s: no %s, %s or *.safetensors files", dir, IndexName, SingleName)
			}
		}
	default:
		return nil, fmt.Errorf("safetensors: %w", err)
	}

	for _, name := range names {
		f, err := Open(filepath.Join(dir, name))
		if err != nil {
			d.Close()
			if errors.Is(err, os.ErrNotExist) && d.WeightMap != nil {
				return nil, fmt.Errorf("safetensors %s: shard %s listed in the index is missing (it holds tensor %q): %w",
					indexPath, name, firstTensorIn(d.WeightMap, name), err)
			}
			return nil, err
		}
		d.Files = append(d.Files, f)
		for i := range f.tensors {
			t := &f.tensors[i]
			if prev, dup := d.byName[t.Name]; dup {
				d.Close()
				return nil, fmt.Errorf("safetensors %s: %w: tensor %q is in both %s and %s", dir, ErrFormat, t.Name, prev.File, t.File)
			}
			d.byName[t.Name] = t
		}
	}
	for tensor, file := range d.WeightMap {
		t, ok := d.byName[tensor]
		if !ok || filepath.Clean(filepath.Join(dir, file)) != filepath.Clean(t.File) {
			d.Close()
			return nil, fmt.Errorf("safetensors %s: %w: index maps tensor %q to %s, which does not hold it", indexPath, ErrFormat, tensor, file)
		}
	}
	return d, nil
}

// firstTensorIn names one tensor the index maps to file, for error messages.
func firstTensorIn(weightMap map[string]string, file string) string {
	var names []string
	for t, f := range weightMap {
		if f == file {
			names = append(names, t)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// Tensor returns the tensor called name from whichever file holds it.
func (d *Dir) Tensor(name string) (*Tensor, bool) {
	t, ok := d.byName[name]
	return t, ok
}

// Names lists every tensor name, sorted.
func (d *Dir) Names() []string {
	names := make([]string, 0, len(d.byName))
	for n := range d.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Close unmaps every file; tensor Data must not be used afterwards.
func (d *Dir) Close() error {
	var errs []error
	for _, f := range d.Files {
		errs = append(errs, f.Close())
	}
	d.Files = nil
	return errors.Join(errs...)
}

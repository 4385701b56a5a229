package model

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/safetensors"
)

// TestWeights checks Config.Weights against every shipped tiny model: the
// GGUF names are the GGUF file's tensors (less rope_freqs, which Weights
// leaves out; the generator writes biases after O, so the order is not
// compared), and every HF name is in the HF directory, where there is one,
// with the listed shape — qwen3 (QK norms), qwen2 (QKV biases) and llama
// (untied output).
func TestWeights(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/models/*.gguf")
	if len(files) == 0 {
		t.Fatal("no shipped models")
	}
	for _, path := range files {
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConfigFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := c.Weights()
		if err != nil {
			t.Fatal(err)
		}
		var have, want []string
		for _, w := range ws {
			have = append(have, w.GGUF)
		}
		for _, ti := range f.Tensors {
			if ti.Name != "rope_freqs.weight" {
				want = append(want, ti.Name)
			}
		}
		f.Close()
		slices.Sort(have)
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("%s: Weights GGUF names\n%v\nwant the file's\n%v", path, have, want)
		}
		hf := path[:len(path)-len(".gguf")]
		if m, _ := filepath.Glob(filepath.Join(hf, "*.safetensors")); len(m) == 0 {
			continue // GGUF only (the K-quant models ship a config.json beside it)
		}
		d, err := safetensors.OpenDir(hf)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			st, ok := d.Tensor(w.HF)
			if !ok {
				t.Errorf("%s: no HF tensor %s", path, w.HF)
				continue
			}
			shape := make([]int, len(st.Shape))
			for i, n := range st.Shape {
				shape[i] = int(n)
			}
			if !slices.Equal(shape, w.Shape) {
				t.Errorf("%s: %s has shape %v; Weights says %v", path, w.HF, shape, w.Shape)
			}
		}
		d.Close()
	}
}

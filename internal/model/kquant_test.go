package model_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
)

// TestLoadIQTypeError rewrites a shipped K-quant model with one tensor in
// IQ4_XS (a type draftd does not compute with) and checks that loading
// fails with an error naming the tensor and the type.
func TestLoadIQTypeError(t *testing.T) {
	src, err := gguf.Open(filepath.Join(modelsDir, "tiny-qwen3k-q4_k_m.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w := gguf.NewWriter()
	for _, kv := range src.KV {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	const iq4xs = dtype.Type(23) // 136 bytes per 256 weights
	for _, ti := range src.Tensors {
		typ, data := ti.Type, ti.Data
		if ti.Name == "blk.0.attn_k.weight" {
			typ, data = iq4xs, make([]byte, int(ti.NumElements())/256*136)
		}
		if err := w.AddTensor(ti.Name, typ, ti.Shape, data); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "iq.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	_, err = model.Load(path, model.Options{Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "blk.0.attn_k.weight") || !strings.Contains(err.Error(), "IQ4_XS") {
		t.Fatalf("load of a file with an IQ4_XS tensor: error %v; want one naming blk.0.attn_k.weight and IQ4_XS", err)
	}
}

// TestKQuantMix checks the per-type accounting of a Q4_K_M file against the
// tensor types llama.cpp's recipe gives a one-layer, tied model: Q6_K for
// the embedding (it is the output), attn_v and ffn_down; Q4_K for the rest.
func TestKQuantMix(t *testing.T) {
	m, err := model.Load(filepath.Join(modelsDir, "tiny-qwen3k-q4_k_m.gguf"), model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mix := m.Mix()
	if mix["Q6_K"].Tensors != 3 || mix["Q4_K"].Tensors != 5 || mix["Q4_K"].BitsPerWeight != 4.5 {
		t.Fatalf("mix %+v; want 3 Q6_K and 5 Q4_K (4.5 bits/weight) tensors", mix)
	}
	for _, ti := range m.Tensors {
		want := dtype.Q4_K
		switch {
		case strings.HasSuffix(ti.Name, "norm.weight"):
			want = dtype.F32
		case ti.Name == "token_embd.weight", strings.HasSuffix(ti.Name, ".attn_v.weight"), strings.HasSuffix(ti.Name, ".ffn_down.weight"):
			want = dtype.Q6_K
		}
		if ti.Type != want {
			t.Errorf("%s: %v; want %v", ti.Name, ti.Type, want)
		}
	}
}

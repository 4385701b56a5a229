package quant_test

// An external test: it builds its model with internal/testmodel, which
// itself uses this package's recipes.

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/quant"
	"github.com/draftd/draftd/internal/testmodel"
)

// TestKRecipes converts a 256-wide random model with each K recipe once
// internal/dtype encodes the K-quant types (skipped until then): every
// tensor has the type Plan gave it, and every matrix decodes to within the
// type's quantization error of the source (relative RMS error below 2^-(bits-2)).
func TestKRecipes(t *testing.T) {
	spec := testmodel.Spec{Name: "k-test", Arch: model.ArchQwen3, Hidden: 256, Intermediate: 512, Layers: 8,
		Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 512, MaxContext: 256, Tied: true, Type: dtype.F32, Seed: 3}
	dir := filepath.Join(t.TempDir(), "hf")
	for _, name := range []string{"q6_k", "q5_k_m", "q4_k_m"} {
		t.Run(name, func(t *testing.T) {
			r, _ := quant.Lookup(name)
			if !r.Supported() {
				t.Skipf("%s: K-quant types not in internal/dtype yet", name)
			}
			if _, err := os.Stat(dir); err != nil {
				if err := spec.WriteHF(dir); err != nil {
					t.Fatal(err)
				}
			}
			out := quant.Prepare(t, dir, name)
			f, err := gguf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			src, err := gguf.Open(quant.Prepare(t, dir, "f32"))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			bits := map[dtype.Type]float64{dtype.Q4_K: 4, dtype.Q5_K: 5, dtype.Q6_K: 6, dtype.Q8_0: 8, dtype.F32: 24}
			for _, ti := range f.Tensors {
				name := ti.Name
				if name == "token_embd.weight" {
					name = "output.weight" // tied: the embedding is the output matrix
				}
				want, err := quant.TensorType(r.Name, name, spec.Layers)
				if len(ti.Shape) < 2 {
					want, err = dtype.F32, nil
				}
				if err != nil || ti.Type != want {
					t.Errorf("%s: type %v; want %v (%v)", ti.Name, ti.Type, want, err)
					continue
				}
				st, _ := src.Tensor(ti.Name)
				have := make([]float32, ti.NumElements())
				ref := make([]float32, len(have))
				if err := dtype.Dequantize(ti.Type, have, ti.Data); err != nil {
					t.Fatal(err)
				}
				if err := dtype.Dequantize(st.Type, ref, st.Data); err != nil {
					t.Fatal(err)
				}
				var num, den float64
				for i := range ref {
					d := float64(have[i] - ref[i])
					num, den = num+d*d, den+float64(ref[i])*float64(ref[i])
				}
				if rel := math.Sqrt(num / den); !(rel < math.Exp2(-(bits[ti.Type] - 2))) {
					t.Errorf("%s (%v): relative RMS error %.3g", ti.Name, ti.Type, rel)
				}
			}
			if _, err := model.Load(out, model.Options{Threads: 2}); err != nil {
				t.Errorf("load: %v", err)
			}
		})
	}
}

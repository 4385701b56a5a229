// The tiny models shipped in testdata/models, the inputs of the numpy golden
// files and of the engine's fidelity tests.
package testmodel

import (
	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/model"
)

// Shipped lists the tiny models committed under testdata/models: qwen3 in
// every weight type, qwen2 (q/k/v bias, untied, sharded HF files), llama
// (GGUF Q/K row permutation) in a float and a quantized type, a Llama
// 3.x-style llama (tied, rope_scaling llama3 / GGUF rope_freqs), and a qwen3
// with 256-column rows in K-quant mixes (GGUF only; see Spec.RefGGUF).
func Shipped() []Spec {
	var s []Spec
	for _, t := range dtype.Types {
		s = append(s, Tiny(model.ArchQwen3, t))
	}
	q2 := Tiny(model.ArchQwen2, dtype.BF16)
	q2.Shards = 2
	s = append(s, q2, Tiny(model.ArchQwen2, dtype.Q4_0))
	s = append(s, Tiny(model.ArchLlama, dtype.F32), Tiny(model.ArchLlama, dtype.Q8_0), TinyLlama3(dtype.BF16))
	// K-quants: llama.cpp's Q4_K_M mix, and every new type on some matrix.
	for _, r := range []string{"q4_k_m", "kmix"} {
		k, err := TinyK(r)
		if err != nil {
			panic(err)
		}
		s = append(s, k)
	}
	return s
}

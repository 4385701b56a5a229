package model_test

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/kernels"
	"github.com/draftd/draftd/internal/model"
)

// TestChunkedPrefill prefills two reference prompts side by side in one
// ragged batch, each in its own chunk size (so a step mixes a sequence at
// position 0 with one part-way through, and attention tasks of 8 tokens
// with shorter ones), and compares the logits of every position with the
// numpy reference, on every kernel implementation. Quantized models are
// left to TestFidelity (their activation rounding needs its looser check).
func TestChunkedPrefill(t *testing.T) {
	defer kernels.SetImpl(kernels.Impls()[0])
	for _, g := range loadGolden(t) {
		if len(g.CasesQ8Act) > 0 || len(g.Cases) < 3 {
			continue
		}
		a, b := g.Cases[2], g.Cases[1] // 19 and 5 tokens
		for _, kvF32 := range []bool{false, true} {
			for _, impl := range kernels.Impls() {
				t.Run(fmt.Sprintf("%s/kvf32=%v/%s", g.Model, kvF32, impl), func(t *testing.T) {
					if err := kernels.SetImpl(impl); err != nil {
						t.Fatal(err)
					}
					m, err := model.Load(filepath.Join(modelsDir, g.Model+".gguf"), model.Options{Threads: 2, KVF32: kvF32})
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					type run struct {
						c      goldenCase
						chunk  int
						done   int
						blocks []*model.Block
						logits []float32 // (len(prompt), vocab)
					}
					runs := []*run{{c: a, chunk: 11}, {c: b, chunk: 2}}
					for _, r := range runs {
						for range (len(r.c.Prompt) + model.BlockSize - 1) / model.BlockSize {
							r.blocks = append(r.blocks, m.NewBlock())
						}
						r.logits = make([]float32, len(r.c.Prompt)*m.Vocab)
					}
					for {
						var seqs []*model.Seq
						var active []*run
						for _, r := range runs {
							if r.done == len(r.c.Prompt) {
								continue
							}
							n := min(r.chunk, len(r.c.Prompt)-r.done)
							seqs = append(seqs, &model.Seq{Tokens: r.c.Prompt[r.done : r.done+n], Pos: r.done, Blocks: r.blocks})
							active = append(active, r)
						}
						if len(seqs) == 0 {
							break
						}
						total := 0
						for _, s := range seqs {
							total += len(s.Tokens)
						}
						step := make([]float32, total*m.Vocab) // (new tokens, vocab), in sequence order
						if err := m.ForwardLogits(seqs, step); err != nil {
							t.Fatal(err)
						}
						off := 0
						for i, r := range active {
							n := len(seqs[i].Tokens)
							copy(r.logits[r.done*m.Vocab:(r.done+n)*m.Vocab], step[off*m.Vocab:(off+n)*m.Vocab])
							off += n
							r.done += n
						}
					}
					tol := tolerance(kvF32)
					for ri, r := range runs {
						for p, want := range r.c.Logits {
							for v, w := range want {
								if d := math.Abs(float64(r.logits[p*m.Vocab+v]) - w); !(d <= tol) {
									t.Fatalf("sequence %d position %d id %d: have %g; want %g (|diff| %.3g > %g)", ri, p, v, r.logits[p*m.Vocab+v], w, d, tol)
								}
							}
						}
					}
				})
			}
		}
	}
}

package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/cputime"
	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/kernels"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/testmodel"
)

// benchModel returns a random model of the given shape, written once to the
// user cache directory (about 20 s and 0.6–2 GB per file) and reused.
func benchModel(b *testing.B, spec testmodel.Spec) *model.Model {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "draftd-bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, spec.Name+".gguf")
	if _, err := os.Stat(path); err != nil {
		b.Logf("writing %s", path)
		if err := spec.WriteGGUF(path); err != nil {
			b.Fatal(err)
		}
	}
	m, err := model.Load(path, model.Options{Threads: benchThreads(b)})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkDecodeStep times one decode step (one new token per sequence) of
// a batch of sequences that each already hold ctx positions of KV cache
// (random f16 values: attention cost does not depend on them).
func BenchmarkDecodeStep(b *testing.B) {
	cases := []struct {
		name string
		spec testmodel.Spec
		bs   []int
	}{
		{"qwen3-0.6b", testmodel.Qwen3_06B(dtype.Q8_0), []int{1, 8, 32}},
		{"qwen3-0.6b", testmodel.Qwen3_06B(dtype.BF16), []int{1, 32}},
		{"qwen3-1.7b", testmodel.Qwen3_17B(dtype.Q4_0), []int{1, 32}},
		{"qwen3-1.7b", q4km(testmodel.Qwen3_17B(dtype.Q4_K)), []int{1, 8, 32}},
	}
	const ctx = 512
	for _, c := range cases {
		typ := lowerType(c.spec.Type)
		if c.spec.Recipe != "" {
			typ = c.spec.Recipe
		}
		b.Run(fmt.Sprintf("%s/%s", c.name, typ), func(b *testing.B) {
			m := benchModel(b, c.spec)
			defer m.Close()
			r := rand.New(rand.NewPCG(1, 2))
			for _, batch := range c.bs {
				b.Run(fmt.Sprintf("B=%d", batch), func(b *testing.B) {
					seqs := make([]*model.Seq, batch)
					for i := range seqs {
						nb := (ctx + 1 + model.BlockSize - 1) / model.BlockSize
						blocks := make([]*model.Block, nb)
						for j := range blocks {
							blk := m.NewBlock()
							for k := range blk.K {
								blk.K[k] = dtype.F32ToF16(float32(r.NormFloat64()))
								blk.V[k] = dtype.F32ToF16(float32(r.NormFloat64()))
							}
							blocks[j] = blk
						}
						seqs[i] = &model.Seq{Tokens: []int{r.IntN(m.Vocab)}, Pos: ctx, Blocks: blocks}
					}
					b.ResetTimer()
					cpu0 := cputime.Process()
					for b.Loop() {
						if err := m.Forward(seqs); err != nil {
							b.Fatal(err)
						}
					}
					ms := b.Elapsed().Seconds() * 1000 / float64(b.N)
					b.ReportMetric(ms, "ms/step")
					b.ReportMetric(float64(batch)*1000/ms, "tok/s")
					b.ReportMetric(float64(m.WeightBytes)/1e9/(ms/1000), "wGB/s")
					if cpu0 != 0 {
						b.ReportMetric(float64(cputime.Process()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
					}
				})
			}
		})
	}
}

// q4km is s in llama.cpp's Q4_K_M mix.
func q4km(s testmodel.Spec) testmodel.Spec {
	k, err := s.WithRecipe("q4_k_m")
	if err != nil {
		panic(err)
	}
	k.Name += "_m"
	return k
}

func lowerType(t dtype.Type) string {
	s := []byte(t.String())
	for i, c := range s {
		if 'A' <= c && c <= 'Z' {
			s[i] = c + 'a' - 'A'
		}
	}
	return string(s)
}

// BenchmarkStepMatmuls times only the kernels of the kernels package in one
// forward step of a real (random) 0.6B Q8_0 model: per layer the Q, K, V,
// O, gate, up and down matmuls and SiLU·mul, then the fused LM-head argmax
// (decode; a prefill computes it for one token) — everything except
// attention, norms and RoPE. B=1/8/32 are decode batches (compare with
// BenchmarkDecodeStep for the matmul share); T=512 and T=4096 (the latter
// with DRAFTD_LONG=1) are one cold prompt's prefill.
func BenchmarkStepMatmuls(b *testing.B) {
	m := benchModel(b, testmodel.Qwen3_06B(dtype.Q8_0))
	defer m.Close()
	pool := kernels.NewPool(2)
	defer pool.Close()
	type step struct {
		name      string
		tokens    int
		lmhead    int
		isPrefill bool
	}
	steps := []step{{"B=1", 1, 1, false}, {"B=8", 8, 8, false}, {"B=32", 32, 32, false}, {"T=512", 512, 1, true}}
	if os.Getenv("DRAFTD_LONG") != "" {
		steps = append(steps, step{"T=4096", 4096, 1, true})
	}
	l0 := m.Layer[0]
	hidden, inter, qdim, kvdim := l0.Q.Cols, l0.Gate.Rows, l0.Q.Rows, l0.K.Rows
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 4))
			T := s.tokens
			xb := randVecF(r, T*max(hidden, qdim, inter))
			q := make([]float32, T*qdim)
			k := make([]float32, T*kvdim)
			v := make([]float32, T*kvdim)
			out := make([]float32, T*hidden)
			gate := make([]float32, T*inter)
			up := make([]float32, T*inter)
			ids := make([]int, s.lmhead)
			for b.Loop() {
				for _, l := range m.Layer {
					kernels.MatMul(pool, q, l.Q, xb, T)
					kernels.MatMul(pool, k, l.K, xb, T)
					kernels.MatMul(pool, v, l.V, xb, T)
					kernels.MatMul(pool, out, l.O, q, T)
					kernels.MatMul(pool, gate, l.Gate, xb, T)
					kernels.MatMul(pool, up, l.Up, xb, T)
					kernels.SiLUMul(gate, gate, up)
					kernels.MatMul(pool, out, l.Down, gate, T)
				}
				kernels.MatMulArgmax(pool, ids, m.Output, xb, s.lmhead)
			}
			ms := b.Elapsed().Seconds() * 1000 / float64(b.N)
			b.ReportMetric(ms, "ms/step")
			b.ReportMetric(float64(T)*1000/ms, "tok/s")
		})
	}
}

func randVecF(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

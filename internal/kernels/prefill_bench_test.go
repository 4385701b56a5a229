// BenchmarkPrefill: a cold prompt through a real (random) 0.6B-shaped model,
// as the engine prefills it; not a kernel benchmark (see attention_bench_test.go
// for the attention share).
package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/draftd/draftd/internal/cputime"
	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/testmodel"
)

// prefillChunk is the engine's default prefill chunk (engine.DefaultPrefillChunk).
const prefillChunk = 512

// benchThreads is the kernel pool size of the whole-model benchmarks
// (BenchmarkPrefill, BenchmarkDecodeStep): 2, or DRAFTD_BENCH_THREADS when
// set (1 for before/after comparisons on a shared machine).
func benchThreads(b *testing.B) int {
	s := os.Getenv("DRAFTD_BENCH_THREADS")
	if s == "" {
		return 2
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("DRAFTD_BENCH_THREADS=%q: want a positive integer", s)
	}
	return n
}

// BenchmarkPrefill times the cold prefill of one prompt of n tokens into an
// empty cache, in chunks of 512 tokens as the engine runs it (each chunk one
// Forward call that ends with the greedy id of its last token), and reports
// prompt tokens per second.
func BenchmarkPrefill(b *testing.B) {
	cases := []struct {
		name string
		spec testmodel.Spec
	}{
		{"qwen3-0.6b", testmodel.Qwen3_06B(dtype.Q8_0)},
		{"qwen3-0.6b", testmodel.Qwen3_06B(dtype.Q5_0)},
		{"qwen3-0.6b", q4km(testmodel.Qwen3_06B(dtype.Q4_K))}, // Q4_K + Q6_K, the K-quant tile kernels
	}
	for _, c := range cases {
		typ := lowerType(c.spec.Type)
		if c.spec.Recipe != "" {
			typ = c.spec.Recipe
		}
		b.Run(fmt.Sprintf("%s/%s", c.name, typ), func(b *testing.B) {
			m := benchModel(b, c.spec, model.KVF16)
			defer m.Close()
			r := rand.New(rand.NewPCG(7, 8))
			for _, n := range []int{512, 4096} {
				b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
					prompt := make([]int, n)
					for i := range prompt {
						prompt[i] = r.IntN(m.Vocab)
					}
					blocks := make([]*model.Block, (n+model.BlockSize-1)/model.BlockSize)
					for i := range blocks {
						blocks[i] = m.NewBlock()
					}
					cpu0 := cputime.Process()
					for b.Loop() {
						for p := 0; p < n; p += prefillChunk {
							s := &model.Seq{Tokens: prompt[p:min(n, p+prefillChunk)], Pos: p, Blocks: blocks}
							if err := m.Forward([]*model.Seq{s}); err != nil {
								b.Fatal(err)
							}
						}
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(n)/sec, "tok/s")
					b.ReportMetric(sec*1e3, "ms/prompt")
					if cpu0 != 0 {
						b.ReportMetric(float64(cputime.Process()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
					}
				})
			}
		})
	}
}

package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/cputime"
	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/kernels"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/testmodel"
)

// benchModel returns a random model of the given shape, written once to the
// user cache directory (about 20 s and 0.6–2 GB per file) and reused.
func benchModel(b *testing.B, spec testmodel.Spec, kv model.KVType) *model.Model {
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
	m, err := model.Load(path, model.Options{Threads: benchThreads(b), KV: kv})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkDecodeStep times one decode step (one new token per sequence) of
// a batch of sequences that each already hold ctx positions of KV cache
// (valid random encodings: attention cost does not depend on the values).
// Names: BenchmarkDecodeStep/<model>/<type>/ctx=<N>/B=<b> for the default
// f16 cache, …/<type>/kv=<kv>/ctx=<N>/B=<b> for another cache type, and
// …/<type>/dv=<rows>/ctx=<N>/B=<b> with a trimmed draft LM head
// (model.SetDraftVocab) of that many rows.
//
// Before the timer starts every KV block has been written and read once
// (the first steps after allocation otherwise run up to 2× slower), and
// the step's streaming floor is measured beside it: floor-ms = weight
// bytes / stream bandwidth + KV bytes read / KV bandwidth, where the stream
// bandwidth is the best of 3 passes of all threads over 256 MiB (as
// BenchmarkMemBandwidth) and the KV bandwidth the best of 3 passes of all
// threads over the step's own KV segments in attention's order (one
// (layer, sequence, KV head) task at a time, every block's segment copied
// into an L1-resident buffer). x-floor is ms/step over floor-ms.
//
// At B > 8 and more than 512 positions the sequences share 8 distinct sets
// of KV blocks (sequence i reads set i mod 8; DRAFTD_BENCH_KV_SETS changes
// the 8): 32 × 4,096 positions of distinct f16 KV would be 15 GB. Between
// two reads of one set attention reads the other 7, ≥ 7 × 16 MiB per layer
// at 4,096 positions and 7 × 2 MiB at 512 — well past the 32 MB L3 at long
// contexts, so the KV still streams from DRAM (the KV-bandwidth pass reads
// the same blocks in the same order).
func BenchmarkDecodeStep(b *testing.B) {
	type kvCase struct {
		kv   model.KVType
		ctxs []int
		dv   int // rows of a trimmed draft head (ids 0…dv-1: the cost does not depend on which); 0: whole
		bs   []int
	}
	long := []int{512, 2048, 4096}
	cases := []struct {
		name string
		spec testmodel.Spec
		bs   []int
		kvs  []kvCase
	}{
		{"qwen3-0.6b", testmodel.Qwen3_06B(dtype.Q8_0), []int{1, 8, 32}, []kvCase{{model.KVF16, long, 0, nil}, {model.KVQ8_0, long, 0, nil},
			{model.KVF16, []int{512}, 16384, []int{1, 32}}, {model.KVF16, []int{512}, 32768, []int{1, 32}}, {model.KVF16, []int{512}, 65536, []int{1, 32}}}},
		{"qwen3-0.6b", testmodel.Qwen3_06B(dtype.BF16), []int{1, 32}, []kvCase{{model.KVF16, []int{512}, 0, nil}}},
		{"qwen3-0.6b", testmodel.Qwen3_06B(dtype.Q5_0), []int{1, 32}, []kvCase{{model.KVF16, []int{512}, 0, nil}}},
		{"qwen3-1.7b", testmodel.Qwen3_17B(dtype.Q4_0), []int{1, 32}, []kvCase{{model.KVF16, []int{512}, 0, nil}}},
		{"qwen3-1.7b", q4km(testmodel.Qwen3_17B(dtype.Q4_K)), []int{1, 8, 32}, []kvCase{{model.KVF16, []int{512}, 0, nil}}},
	}
	sets := 8
	if s := os.Getenv("DRAFTD_BENCH_KV_SETS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("DRAFTD_BENCH_KV_SETS=%q: want a positive integer", s)
		}
		sets = n
	}
	for _, c := range cases {
		typ := lowerType(c.spec.Type)
		if c.spec.Recipe != "" {
			typ = c.spec.Recipe
		}
		b.Run(fmt.Sprintf("%s/%s", c.name, typ), func(b *testing.B) {
			var m *model.Model
			defer func() {
				if m != nil {
					m.Close()
				}
			}()
			for _, kc := range c.kvs {
				kvName := ""
				if kc.kv != model.KVF16 {
					kvName = "kv=" + kc.kv.String() + "/"
				}
				if kc.dv > 0 {
					kvName += fmt.Sprintf("dv=%d/", kc.dv)
				}
				batches := c.bs
				if kc.bs != nil {
					batches = kc.bs
				}
				for _, ctx := range kc.ctxs {
					for _, batch := range batches {
						b.Run(fmt.Sprintf("%sctx=%d/B=%d", kvName, ctx, batch), func(b *testing.B) {
							if m == nil || m.KVType() != kc.kv {
								if m != nil {
									m.Close()
								}
								m = benchModel(b, c.spec, kc.kv)
							}
							var keep []int // nil: the whole head
							if kc.dv > 0 {
								keep = make([]int, kc.dv)
								for i := range keep {
									keep[i] = i
								}
							}
							if err := m.SetDraftVocab(keep); err != nil {
								b.Fatal(err)
							}
							distinct := batch
							if ctx > 512 {
								distinct = min(batch, sets)
							}
							seqs := decodeSeqs(m, batch, distinct, ctx)
							pool := kernels.NewPool(m.Threads())
							kvBytes, kvBW := kvReadBandwidth(pool, m, seqs)
							seqBW := streamBandwidth(pool)
							pool.Close()
							if err := m.Forward(seqs); err != nil { // warm-up: every block read once more
								b.Fatal(err)
							}
							b.ResetTimer()
							cpu0 := cputime.Process()
							for b.Loop() {
								if err := m.Forward(seqs); err != nil {
									b.Fatal(err)
								}
							}
							ms := b.Elapsed().Seconds() * 1000 / float64(b.N)
							floor := (float64(m.StepWeightBytes())/seqBW + float64(kvBytes)/kvBW) * 1000
							b.ReportMetric(ms, "ms/step")
							b.ReportMetric(float64(batch)*1000/ms, "tok/s")
							b.ReportMetric(float64(m.StepWeightBytes())/1e9/(ms/1000), "wGB/s")
							b.ReportMetric(float64(kvBytes)/1e9, "kvGB/step")
							b.ReportMetric(seqBW/1e9, "bwGB/s")
							b.ReportMetric(kvBW/1e9, "kvbwGB/s")
							b.ReportMetric(floor, "floor-ms")
							b.ReportMetric(ms/floor, "x-floor")
							if cpu0 != 0 {
								b.ReportMetric(float64(cputime.Process()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
							}
						})
					}
				}
			}
		})
	}
}

// decodeSeqs returns batch sequences of ctx cached positions and one new
// token each, over `distinct` sets of KV blocks (sequence i uses set
// i mod distinct), every block filled with valid encodings of random values.
func decodeSeqs(m *model.Model, batch, distinct, ctx int) []*model.Seq {
	r := rand.New(rand.NewPCG(1, 2))
	nb := (ctx + 1 + model.BlockSize - 1) / model.BlockSize
	pattern := m.NewBlock()
	fillBlock(r, pattern)
	blockSets := make([][]*model.Block, distinct)
	for i := range blockSets {
		blockSets[i] = make([]*model.Block, nb)
		for j := range nb {
			blk := m.NewBlock()
			model.CopyPositions(blk, pattern, model.BlockSize, m.HeadDim)
			blockSets[i][j] = blk
		}
	}
	seqs := make([]*model.Seq, batch)
	for i := range seqs {
		seqs[i] = &model.Seq{Tokens: []int{r.IntN(m.Vocab)}, Pos: ctx, Blocks: blockSets[i%distinct]}
	}
	return seqs
}

// fillBlock sets every position of blk to random normal keys and values in
// the block's cache type.
func fillBlock(r *rand.Rand, blk *model.Block) {
	switch {
	case blk.K != nil:
		for k := range blk.K {
			blk.K[k] = dtype.F32ToF16(float32(r.NormFloat64()))
			blk.V[k] = dtype.F32ToF16(float32(r.NormFloat64()))
		}
	case blk.K32 != nil:
		for k := range blk.K32 {
			blk.K32[k] = float32(r.NormFloat64())
			blk.V32[k] = float32(r.NormFloat64())
		}
	default:
		for _, dst := range [][]byte{blk.K8, blk.V8} {
			x := randVecF(r, len(dst)/dtype.Q8_0.BlockBytes()*dtype.QK)
			q, err := dtype.Quantize(dtype.Q8_0, nil, x)
			if err != nil {
				panic(err)
			}
			copy(dst, q)
		}
	}
}

// kvReadBandwidth reads the KV segments one decode step's attention reads
// (positions [0, Pos+1) of every sequence, layer by layer, one task per
// (sequence, KV head) claimed by the pool's threads, each block's segment
// copied into a per-thread L1-sized buffer), three times, and returns the
// bytes of one pass and the best bandwidth in bytes/s.
func kvReadBandwidth(pool *kernels.Pool, m *model.Model, seqs []*model.Seq) (int64, float64) {
	posBytes := int64(m.BlockBytes() / model.BlockSize / m.Layers / m.KVHeads) // K and V of one position of one (layer, head)
	var total int64
	for _, s := range seqs {
		total += int64(s.Pos+1) * posBytes * int64(m.Layers*m.KVHeads)
	}
	free := make(chan []byte, pool.Threads())
	for range pool.Threads() {
		free <- make([]byte, 16<<10)
	}
	best := 0.0
	for range 3 {
		t0 := time.Now()
		for li := range m.Layers {
			pool.ForEach(len(seqs)*m.KVHeads, 1, func(lo, hi int) {
				d := <-free
				for t := lo; t < hi; t++ {
					s, g := seqs[t/m.KVHeads], t%m.KVHeads
					n := s.Pos + 1
					for bi, blk := range s.Blocks[:(n+model.BlockSize-1)/model.BlockSize] {
						np := min(model.BlockSize, n-bi*model.BlockSize)
						k, v := m.Segment(blk, li, g)
						seg := len(k) / model.BlockSize * np
						copy(d, k[:seg])
						copy(d[len(d)/2:], v[:seg])
					}
				}
				free <- d
			})
		}
		best = max(best, float64(total)/time.Since(t0).Seconds())
	}
	return total, best
}

var (
	streamOnce sync.Once
	streamSrc  []byte // (256 MiB) read by streamBandwidth
)

// streamBandwidth is the best of three passes of the pool's threads over
// 256 MiB in 16 KiB pieces copied into an L1-sized buffer (as
// BenchmarkMemBandwidth), in bytes/s: the weight stream's bandwidth.
func streamBandwidth(pool *kernels.Pool) float64 {
	streamOnce.Do(func() {
		streamSrc = make([]byte, 256<<20)
		for i := range streamSrc {
			streamSrc[i] = byte(i)
		}
	})
	src := streamSrc
	const piece = 16 << 10
	free := make(chan []byte, pool.Threads())
	for range pool.Threads() {
		free <- make([]byte, piece)
	}
	best := 0.0
	for range 3 {
		t0 := time.Now()
		pool.ForEach(len(src)/piece, 64, func(lo, hi int) {
			d := <-free
			for i := lo; i < hi; i++ {
				copy(d, src[i*piece:(i+1)*piece])
			}
			free <- d
		})
		best = max(best, float64(len(src))/time.Since(t0).Seconds())
	}
	return best
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
	m := benchModel(b, testmodel.Qwen3_06B(dtype.Q8_0), model.KVF16)
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

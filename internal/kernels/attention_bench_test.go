// Benchmarks of attention as the model calls it: the decode step of a batch
// of sequences (one layer, split over the pool like model.Forward) and the
// causal attention of prefill chunks. Shapes are Qwen3-0.6B's (8 KV heads ×
// 2 query heads, head size 128, f16 cache in 16-position blocks).
package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/cputime"
	"github.com/draftd/draftd/internal/dtype"
)

// benchKV returns nseq·kvHeads lists of nb f16 cache blocks, tiled from one
// random block.
func benchKV(r *rand.Rand, n, nb, hd, bs int) (keys, vals [][][]uint16) {
	pat := make([]uint16, bs*hd)
	for i := range pat {
		pat[i] = dtype.F32ToF16(float32(r.NormFloat64()))
	}
	keys, vals = make([][][]uint16, n), make([][][]uint16, n)
	for t := range n {
		for range nb {
			keys[t] = append(keys[t], append([]uint16(nil), pat...))
			vals[t] = append(vals[t], append([]uint16(nil), pat...))
		}
	}
	return keys, vals
}

// benchKVQ8 is benchKV for a q8_0 cache (rows of hd/32 block_q8_0).
func benchKVQ8(r *rand.Rand, n, nb, hd, bs int) (keys, vals [][][]byte) {
	pat, err := dtype.Quantize(dtype.Q8_0, nil, randVec(r, bs*hd, 1))
	if err != nil {
		panic(err)
	}
	keys, vals = make([][][]byte, n), make([][][]byte, n)
	for t := range n {
		for range nb {
			keys[t] = append(keys[t], append([]byte(nil), pat...))
			vals[t] = append(vals[t], append([]byte(nil), pat...))
		}
	}
	return keys, vals
}

// BenchmarkAttentionDecode times one layer's attention of a decode step:
// B sequences × 8 KV heads, every sequence holding ctx positions, split over
// the pool one (sequence, KV head) per task. It rotates through at least
// benchStreamBytes of cache so the cache streams from DRAM, and reports the
// cache bytes read per second and the time per layer. Names: ctx=<N>/B=<b>
// for the f16 cache, kv=q8_0/ctx=<N>/B=<b> for q8_0.
func BenchmarkAttentionDecode(b *testing.B) {
	const nq, hd, bs, kvHeads = 2, 128, 16, 8
	pool := NewPool(0)
	defer pool.Close()
	for _, q8 := range []bool{false, true} {
		for _, ctx := range []int{512, 4096} {
			for _, seqs := range []int{1, 8, 32} {
				name := fmt.Sprintf("ctx=%d/B=%d", ctx, seqs)
				if q8 {
					name = "kv=q8_0/" + name
				}
				b.Run(name, func(b *testing.B) {
					r := rand.New(rand.NewPCG(5, 5))
					perHead := 2 * ctx * hd * 2 // f16 bytes of keys and values
					if q8 {
						perHead = 2 * ctx * rowLen[byte](hd)
					}
					layers := max(1, benchStreamBytes/(perHead*seqs*kvHeads))
					keys := make([][][][]uint16, layers)
					vals := make([][][][]uint16, layers)
					k8 := make([][][][]byte, layers)
					v8 := make([][][][]byte, layers)
					for l := range layers {
						if q8 {
							k8[l], v8[l] = benchKVQ8(r, seqs*kvHeads, ctx/bs, hd, bs)
						} else {
							keys[l], vals[l] = benchKV(r, seqs*kvHeads, ctx/bs, hd, bs)
						}
					}
					q := randVec(r, seqs*kvHeads*nq*hd, 1)
					out := make([]float32, len(q))
					scale := float32(1 / math.Sqrt(hd))
					l := 0
					cpu0 := cputime.Process()
					for b.Loop() {
						ll := l % layers
						pool.ForEach(seqs*kvHeads, 1, func(lo, hi int) {
							for t := lo; t < hi; t++ {
								o, qt := out[t*nq*hd:(t+1)*nq*hd], q[t*nq*hd:(t+1)*nq*hd]
								if q8 {
									AttendQ8_0(o, qt, nq, hd, k8[ll][t], v8[ll][t], bs, ctx, scale)
								} else {
									AttendF16(o, qt, nq, hd, keys[ll][t], vals[ll][t], bs, ctx, scale)
								}
							}
						})
						l++
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(perHead*seqs*kvHeads)/sec/1e9, "kvGB/s")
					b.ReportMetric(sec*1e3, "ms/layer")
					reportCPU(b, cpu0)
				})
			}
		}
	}
}

// BenchmarkAttentionPrefill times one layer's causal attention of a whole
// prompt of n tokens, prefilled in chunks of 512 as the engine does: per
// chunk, tasks of 8 tokens × one KV head over the pool. It reports the time
// per layer (× 28 layers is the attention share of a 0.6B prefill) and the
// arithmetic rate (2 FLOPs per multiply-add of q·k and w·v). Names:
// tokens=<n> for the f16 cache, kv=q8_0/tokens=<n> for q8_0.
func BenchmarkAttentionPrefill(b *testing.B) {
	const nq, hd, bs, kvHeads, chunk, tokPerTask = 2, 128, 16, 8, 512, 8
	pool := NewPool(0)
	defer pool.Close()
	for _, c := range []struct {
		name string
		n    int
		q8   bool
	}{{"tokens=512", 512, false}, {"tokens=4096", 4096, false}, {"kv=q8_0/tokens=512", 512, true}, {"kv=q8_0/tokens=4096", 4096, true}} {
		n, q8 := c.n, c.q8
		b.Run(c.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(6, 6))
			var keys, vals [][][]uint16
			var k8, v8 [][][]byte
			if q8 {
				k8, v8 = benchKVQ8(r, kvHeads, n/bs, hd, bs)
			} else {
				keys, vals = benchKV(r, kvHeads, n/bs, hd, bs)
			}
			qd := kvHeads * nq * hd
			q := randVec(r, chunk*qd, 1)
			out := make([]float32, len(q))
			scale := float32(1 / math.Sqrt(hd))
			tasks := chunk / tokPerTask * kvHeads
			cpu0 := cputime.Process()
			for b.Loop() {
				for p0 := 0; p0 < n; p0 += chunk {
					pool.ForEach(tasks, 1, func(lo, hi int) {
						for i := lo; i < hi; i++ {
							// Later token blocks first: they see the most positions.
							blk, g := chunk/tokPerTask-1-i/kvHeads, i%kvHeads
							off := blk*tokPerTask*qd + g*nq*hd
							if q8 {
								AttendCausalQ8_0(out[off:], q[off:], qd, tokPerTask, nq, hd, k8[g], v8[g], bs, p0+blk*tokPerTask, scale)
							} else {
								AttendCausalF16(out[off:], q[off:], qd, tokPerTask, nq, hd, keys[g], vals[g], bs, p0+blk*tokPerTask, scale)
							}
						}
					})
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			// Σ over tokens of (positions seen) · heads · 2·hd multiply-adds.
			flops := float64(n) * float64(n+1) / 2 * kvHeads * nq * 2 * hd * 2
			b.ReportMetric(flops/sec/1e9, "GFLOP/s")
			b.ReportMetric(sec*1e3, "ms/layer")
			reportCPU(b, cpu0)
		})
	}
}

// reportCPU reports the process CPU time per iteration since cpu0
// (cpu-ms/op): on a shared machine, cpu-ms/op ÷ threads estimates the wall
// time a quiet machine would give (an upper bound: idle pool workers spin).
func reportCPU(b *testing.B, cpu0 time.Duration) {
	if cpu0 == 0 {
		return
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
}

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/cputime"
	"github.com/draftd/draftd/internal/dtype"
)

// benchStreamBytes is how much distinct weight memory a benchmark rotates
// through, well above the 32 MB L3, so weights stream from DRAM as they do
// in a decode step.
const benchStreamBytes = 256 << 20

// benchMatrices returns enough (rows, cols) matrices of type typ to cover
// benchStreamBytes. Contents are valid random encodings, tiled from a small
// random pattern so that building 600 MB of weights takes little time.
func benchMatrices(b *testing.B, typ dtype.Type, rows, cols int) []*Matrix {
	r := rand.New(rand.NewPCG(1, 1))
	rb, err := typ.RowBytes(cols)
	if err != nil {
		b.Fatal(err)
	}
	// A pattern of 64 random rows, encoded exactly as a file would hold them.
	pat, err := dtype.Quantize(typ, nil, randVec(r, 64*cols, 1))
	if err != nil {
		b.Fatal(err)
	}
	n := max(1, (benchStreamBytes+rows*rb-1)/(rows*rb))
	ms := make([]*Matrix, n)
	for i := range ms {
		data := make([]byte, rows*rb)
		for off := 0; off < len(data); off += len(pat) {
			copy(data[off:], pat)
		}
		m, err := NewMatrix(typ, rows, cols, data)
		if err != nil {
			b.Fatal(err)
		}
		ms[i] = m
	}
	return ms
}

// BenchmarkMatmul times MatMul at the shapes of Qwen3-0.6B with all CPUs
// (the pool of a model), rotating through more weight matrices than the
// caches hold, at decode batches and (except the LM head) a 512-token
// prefill. It reports GFLOP/s (2·rows·cols·batch per call) and wGB/s
// (stored weight bytes per call), and GFLOP/cpu-s (per CPU-second of the
// process, which a shared host disturbs less than wall time).
func BenchmarkMatmul(b *testing.B) {
	shapes := []struct {
		name       string
		rows, cols int
	}{
		{"lmhead", 151936, 1024},
		{"up", 3072, 1024},
		{"down", 1024, 3072},
	}
	pool := NewPool(0)
	defer pool.Close()
	for _, typ := range []dtype.Type{dtype.Q8_0, dtype.Q4_0, dtype.BF16, dtype.F16, dtype.F32, dtype.Q4_K, dtype.Q5_K, dtype.Q6_K, dtype.Q4_1, dtype.Q5_0, dtype.Q5_1} {
		b.Run(strings.ToLower(typ.String()), func(b *testing.B) {
			for _, s := range shapes {
				b.Run(s.name, func(b *testing.B) {
					ms := benchMatrices(b, typ, s.rows, s.cols)
					defer runtime.GC()
					batches := []int{1, 8, 32}
					if s.name != "lmhead" {
						batches = append(batches, 512) // prefill: a cold prompt's tokens at once
					}
					for _, batch := range batches {
						b.Run(fmt.Sprintf("B=%d", batch), func(b *testing.B) {
							r := rand.New(rand.NewPCG(2, 2))
							x := randVec(r, batch*s.cols, 1)
							y := make([]float32, batch*s.rows)
							i := 0
							c0 := cputime.Process()
							for b.Loop() {
								MatMul(pool, y, ms[i%len(ms)], x, batch)
								i++
							}
							sec := b.Elapsed().Seconds() / float64(b.N)
							b.ReportMetric(2*float64(s.rows*s.cols*batch)/sec/1e9, "GFLOP/s")
							b.ReportMetric(float64(ms[0].Bytes())/sec/1e9, "wGB/s")
							if cpu := (cputime.Process() - c0).Seconds() / float64(b.N); cpu > 0 {
								// Per CPU-second of the process (all workers, spinning
								// included): on a shared host steadier than per second.
								b.ReportMetric(2*float64(s.rows*s.cols*batch)/cpu/1e9, "GFLOP/cpu-s")
							}
						})
					}
				})
			}
		})
	}
}

// BenchmarkAttention times AttendF16/AttendF32 for one KV head of Qwen3
// (2 query heads per KV head, head size 128, 16-position cache blocks) at
// contexts 512 and 2048, rotating through more cache than L3 holds, as a
// decode step over many sequences and layers does. It reports the cache
// bytes read per second (kvGB/s) and the cost per cached position.
func BenchmarkAttention(b *testing.B) {
	const nq, hd, bs = 2, 128, 16
	for _, f16 := range []bool{true, false} {
		name := "f32"
		if f16 {
			name = "f16"
		}
		for _, ctx := range []int{512, 2048} {
			b.Run(fmt.Sprintf("%s/ctx=%d", name, ctx), func(b *testing.B) {
				r := rand.New(rand.NewPCG(3, 3))
				nb := ctx / bs
				esz := 4
				if f16 {
					esz = 2
				}
				perHead := 2 * ctx * hd * esz
				heads := max(1, benchStreamBytes/2/perHead)
				pat := randVec(r, bs*hd, 1)
				pat16 := make([]uint16, len(pat))
				for i, v := range pat {
					pat16[i] = dtype.F32ToF16(v)
				}
				k16, v16 := make([][][]uint16, heads), make([][][]uint16, heads)
				k32, v32 := make([][][]float32, heads), make([][][]float32, heads)
				for h := range heads {
					for range nb {
						if f16 {
							k16[h] = append(k16[h], append([]uint16(nil), pat16...))
							v16[h] = append(v16[h], append([]uint16(nil), pat16...))
						} else {
							k32[h] = append(k32[h], append([]float32(nil), pat...))
							v32[h] = append(v32[h], append([]float32(nil), pat...))
						}
					}
				}
				q := randVec(r, nq*hd, 1)
				out := make([]float32, nq*hd)
				scale := float32(1 / math.Sqrt(hd))
				i := 0
				for b.Loop() {
					if f16 {
						AttendF16(out, q, nq, hd, k16[i%heads], v16[i%heads], bs, ctx, scale)
					} else {
						AttendF32(out, q, nq, hd, k32[i%heads], v32[i%heads], bs, ctx, scale)
					}
					i++
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(perHead)/sec/1e9, "kvGB/s")
				b.ReportMetric(sec*1e9/float64(ctx), "ns/pos")
			})
		}
	}
}

// BenchmarkMemBandwidth is the read bandwidth the matmul benchmarks are
// measured against: all CPUs (the pool) stream benchStreamBytes, far more
// than L3, by copying 16 KiB pieces into a per-worker buffer that stays in
// L1 (Go's vectorized memmove: the reads are the cost). It reports GB/s; a
// weight-bound matmul (BenchmarkMatmul at B=1) can at best reach this as
// wGB/s. GB/cpu-s is the same bytes per CPU-second of the process (all
// workers): on a shared host, where the workers wait for a CPU much of the
// wall time, the rate a weight-bound matmul's wGB/cpu-s compares with.
// DRAFTD_BENCH_THREADS=N streams with N workers instead of one per CPU.
func BenchmarkMemBandwidth(b *testing.B) {
	threads := 0
	if s := os.Getenv("DRAFTD_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("DRAFTD_BENCH_THREADS=%q: want a positive integer", s)
		}
		threads = n
	}
	pool := NewPool(threads)
	defer pool.Close()
	src := make([]byte, benchStreamBytes)
	for i := range src {
		src[i] = byte(i)
	}
	const piece = 16 << 10
	free := make(chan []byte, pool.Threads()) // one L1-sized buffer per running chunk
	for range pool.Threads() {
		free <- make([]byte, piece)
	}
	b.SetBytes(int64(len(src)))
	c0 := cputime.Process()
	for b.Loop() {
		pool.ForEach(len(src)/piece, 64, func(lo, hi int) {
			d := <-free
			for i := lo; i < hi; i++ {
				copy(d, src[i*piece:(i+1)*piece])
			}
			free <- d
		})
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(len(src))/sec/1e9, "GB/s")
	if cpu := (cputime.Process() - c0).Seconds() / float64(b.N); cpu > 0 {
		b.ReportMetric(float64(len(src))/cpu/1e9, "GB/cpu-s")
	}
}

// BenchmarkMatmulHot is one thread's B = 1 matmul over one matrix of the
// 0.5B drafter's shapes again and again, so its weights come from L2
// (896×896) or L3 (the MLP shapes) instead of DRAM: the kernel's own ceiling
// in weight bytes per CPU-second (wGB/cpu-s), to set beside
// BenchmarkMemBandwidth's GB/cpu-s. A kernel below the stream's rate here
// cannot keep up with the memory in a decode step.
func BenchmarkMatmulHot(b *testing.B) {
	for _, typ := range []dtype.Type{dtype.Q8_0, dtype.Q4_0, dtype.Q5_0, dtype.Q4_K, dtype.Q6_K} {
		for _, s := range [][2]int{{896, 896}, {4864, 896}, {896, 4864}} {
			if typ.IsK() && s[1]%256 != 0 {
				continue
			}
			b.Run(fmt.Sprintf("%s/%dx%d", strings.ToLower(typ.String()), s[0], s[1]), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 1))
				data, err := dtype.Quantize(typ, nil, randVec(r, s[0]*s[1], 1))
				if err != nil {
					b.Fatal(err)
				}
				w, err := NewMatrix(typ, s[0], s[1], data)
				if err != nil {
					b.Fatal(err)
				}
				x := randVec(r, s[1], 1)
				y := make([]float32, s[0])
				c0 := cputime.Process()
				for b.Loop() {
					MatMul(nil, y, w, x, 1)
				}
				if cpu := (cputime.Process() - c0).Seconds() / float64(b.N); cpu > 0 {
					b.ReportMetric(float64(w.Bytes())/cpu/1e9, "wGB/cpu-s")
				}
			})
		}
	}
}

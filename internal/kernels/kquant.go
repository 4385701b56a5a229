// MatMul for K-quant (Q2_K…Q6_K) and legacy Q4_1/Q5_0/Q5_1 weights: the
// activation quantization and the split over the pool; the kernels are in
// kquant_generic.go (plain Go), kquant_amd64.go (AVX2; AVX-512 VNNI tiles
// for Q4_K/Q5_K/Q6_K, whose activations are quantized in assembly straight
// into their tiled layout) and legacy_amd64.go. It does not handle
// Q8_0/Q4_0 or float weights (matmul.go).
//
// Activations are quantized as ggml does for these types: each row of x to
// Q8_K blocks of 256 (d = max/−127 as f32, q = round-half-even(x/d), and the
// sums of each 16 quants) for the K-quants, to Q8_0 blocks of 32 for Q5_0, and
// to Q8_1 blocks (Q8_0 plus s = f16(d·Σq)) for Q4_1/Q5_1. Each block product
// is then an exact integer dot, scaled in f32 (per block, in this order):
//
//	Q2_K, Q4_K, Q5_K: y += (d_w·d_x)·Σ_j sc_j·(q_w·q_x)_j − (dmin_w·d_x)·Σ_j m_j·bsum_j
//	Q3_K, Q6_K:       y += (d_w·d_x)·Σ_j sc_j·(q_w·q_x)_j
//	Q5_0:             y += (d_w·d_x)·(q_w·q_x)
//	Q4_1, Q5_1:       y += (d_w·d_x)·(q_w·q_x) + m_w·s_x
//
// with j over the 16-weight groups of a block (Q4_K/Q5_K: each 32-weight
// scale and min serves two groups). All implementations compute the same
// integers. The plain-Go kernel and the tile kernels (Q4_K, Q5_K, Q6_K;
// Q4_1, Q5_0, Q5_1 in legacy_amd64.go) add the block terms in this order,
// the latter with fused multiply-adds (the AVX2 and AVX-512 tile kernels
// of a type agree bit for bit); the other AVX2 kernels sum blocks in 8
// float lanes added at the end.
package kernels

import (
	"math"
	"sync"

	"github.com/draftd/draftd/internal/dtype"
)

// kType reports whether MatMul of t is handled by this file.
func kType(t dtype.Type) bool {
	switch t {
	case dtype.Q2_K, dtype.Q3_K, dtype.Q4_K, dtype.Q5_K, dtype.Q6_K, dtype.Q4_1, dtype.Q5_0, dtype.Q5_1:
		return true
	}
	return false
}

// kActs is a batch of activation rows quantized for one weight type.
type kActs struct {
	cols, nblk, bsz int
	q               []int8    // (batch, cols) quants
	d               []float32 // (batch, nblk) block scales (Q8_0/Q8_1: the f16 scale, widened)
	bsums           []int16   // (batch, nblk·16) K-quants: sums of each 16 quants
	s               []float32 // (batch, nblk) Q8_1: f16(d·Σq), widened
	kb              []int16   // block sums in the order a fast kernel wants (kquant_amd64.go), or nil
	xt              []byte    // Q4_K tile kernel: the rows tiled by groups of 4 (kquant_amd64.go), or nil
}

// kActsPool recycles activation buffers across MatMul calls.
var kActsPool = sync.Pool{New: func() any { return new(kActs) }}

// grow returns s resized to n elements, reallocated only when too small.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (a *kActs) row(b int) ([]int8, []float32, []int16, []float32) {
	q := a.q[b*a.cols : (b+1)*a.cols]
	d := a.d[b*a.nblk : (b+1)*a.nblk]
	var bs []int16
	var s []float32
	if len(a.bsums) > 0 {
		bs = a.bsums[b*a.nblk*16 : (b+1)*a.nblk*16]
	}
	if len(a.s) > 0 {
		s = a.s[b*a.nblk : (b+1)*a.nblk]
	}
	return q, d, bs, s
}

// quantizeKActs quantizes the (batch, cols) rows of x for weights of type t,
// rows split over p.
func quantizeKActs(p *Pool, t dtype.Type, x []float32, batch, cols int) *kActs {
	a := kActsPool.Get().(*kActs)
	a.cols, a.bsz = cols, t.BlockSize()
	a.nblk = cols / a.bsz
	a.q = grow(a.q, batch*cols)
	a.d = grow(a.d, batch*a.nblk)
	a.bsums, a.s, a.kb, a.xt = a.bsums[:0], a.s[:0], a.kb[:0], a.xt[:0]
	if t.IsK() {
		a.bsums = grow(a.bsums, batch*a.nblk*16)
	}
	if t == dtype.Q4_1 || t == dtype.Q5_1 {
		a.s = grow(a.s, batch*a.nblk)
	}
	p.For(batch, 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			q, d, bs, s := a.row(b)
			xr := x[b*cols : (b+1)*cols]
			for i := range a.nblk {
				if t.IsK() {
					quantQ8K(xr[i*256:(i+1)*256], q[i*256:(i+1)*256], &d[i], bs[i*16:(i+1)*16])
				} else {
					sum := quantQ8_0(xr[i*32:(i+1)*32], q[i*32:(i+1)*32], &d[i])
					if s != nil {
						s[i] = s8_1(sum, xr[i*32:(i+1)*32])
					}
				}
			}
		}
	})
	kernelSums(t, a, batch)
	return a
}

// quantQ8K is ggml's quantize_row_q8_K_ref for one block of 256.
func quantQ8K(x []float32, q []int8, d *float32, bsums []int16) {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	if amax == 0 {
		*d = 0
		clear(q)
		clear(bsums)
		return
	}
	iscale := -127 / mx
	for j, v := range x {
		q[j] = int8(min(127, int(math.RoundToEven(float64(iscale*v)))))
	}
	for j := range 16 {
		var s int16
		for _, v := range q[16*j : 16*j+16] {
			s += int16(v)
		}
		bsums[j] = s
	}
	*d = 1 / iscale
}

// quantQ8_0 is ggml's quantize_row_q8_0_ref for one block of 32 (d widened
// from its f16); it returns Σq.
func quantQ8_0(x []float32, q []int8, d *float32) int {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	df := amax / 127
	var id float32
	if df != 0 {
		id = 1 / df
	}
	sum := 0
	for j, v := range x {
		q[j] = int8(math.Round(float64(v * id)))
		sum += int(q[j])
	}
	*d = dtype.F16ToF32(dtype.F32ToF16(df))
	return sum
}

// s8_1 is the s field of ggml's Q8_1 block: f16(Σq · d) with d = amax/127 in f32.
func s8_1(sum int, x []float32) float32 {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	return dtype.F16ToF32(dtype.F32ToF16(float32(sum) * (amax / 127)))
}

// kmatmul is MatMul (ids == nil) or MatMulArgmaxKeep for the types of this
// file.
func kmatmul(p *Pool, y []float32, ids []int, keep [][]float32, w *Matrix, x []float32, batch int, ref bool) {
	a := legacyQuantize(p, w, x, batch, ref) // legacy_amd64.go: Q4_1/Q5_0/Q5_1 tiles, or nil
	if a == nil {
		a = kTileQuantize(p, w, x, batch, ref) // kquant_amd64.go: K-quant AVX-512 tiles, or nil
	}
	if a == nil {
		a = quantizeKActs(p, w.Type, x, batch, w.Cols)
	}
	defer kActsPool.Put(a)
	rows := func(y []float32, ystride, lo, hi int) {
		p.For(hi-lo, 16, func(l, h int) {
			if ref || !kRowsFast(w, a, y, ystride, batch, lo+l, lo+h, lo) {
				kRowsGeneric(w, a, y, ystride, batch, lo+l, lo+h, lo)
			}
		})
	}
	if ids == nil {
		rows(y, w.Rows, 0, w.Rows)
		return
	}
	// MatMulArgmax: logits of argmaxChunk rows at a time.
	buf := argmaxBufs.Get().(*[]float32)
	defer argmaxBufs.Put(buf)
	if cap(*buf) < batch*argmaxChunk {
		*buf = make([]float32, batch*argmaxChunk)
	}
	type maxAt struct {
		v float32
		i int
	}
	best := make([]maxAt, batch)
	for b := range best {
		best[b] = maxAt{float32(math.Inf(-1)), 0}
	}
	for lo := 0; lo < w.Rows; lo += argmaxChunk {
		hi := min(w.Rows, lo+argmaxChunk)
		ys := (*buf)[:batch*(hi-lo)]
		rows(ys, hi-lo, lo, hi)
		for b := range batch {
			row := ys[b*(hi-lo) : (b+1)*(hi-lo)]
			if keep != nil && keep[b] != nil {
				copy(keep[b][lo:hi], row)
			}
			i := argmax(row)
			if v := row[i]; v > best[b].v || (v == best[b].v && lo+i < best[b].i) {
				best[b] = maxAt{v, lo + i}
			}
		}
	}
	for b := range batch {
		ids[b] = best[b].i
	}
}

const argmaxChunk = 4096

var argmaxBufs = sync.Pool{New: func() any { return new([]float32) }}

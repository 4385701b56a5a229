//go:build !purego

// K-quant dispatch on amd64: Q4_K, Q5_K and Q6_K weights are repacked at load into
// the AVX2 kernels' block layout and multiplied by kquant_amd64.s, as are
// Q4_1/Q5_0/Q5_1 weights in ggml's own layout, and Q2_K/Q3_K repacked. The same AVX2
// kernels serve AVX-512 machines (there are no AVX-512 K-quant kernels: the
// development machine has no AVX-512 to test them on).
//
// Kernel block layouts (one row's blocks are contiguous, rows follow each other):
//
//	Q4_K (148 B): d f16, dmin f16, the 8 sub-block scales as bytes, the 8
//	      mins as bytes, then ggml's 128 bytes of nibbles unchanged.
//	Q5_K (180 B): the same with ggml's 32 bytes of 5th bits before the nibbles.
//	Q3_K (114 B): qs[64], hmask[32], the 16 6-bit scales decoded to int8 (−32…31)
//	      and reordered as Q6_K's, d f16.
//	Q2_K (100 B): qs[64], the 16 scales and the 16 mins as bytes, each reordered
//	      as Q6_K's scales, d, dmin f16.
//	Q6_K (210 B): ggml's block with its 16 int8 scales reordered per half of
//	      128 weights as s0 s2 s4 s6 s1 s3 s5 s7 (so that one shuffle gives the
//	      two scales of 32 consecutive weights); ql, qh and d unchanged.
//
// The activation sums the kernels take (kActs.kb) follow the same orders:
// per-32 sums for Q4_K/Q5_K, per-16 sums reordered like the scales for Q6_K.
// The Q4_1/Q5_0/Q5_1 kernels read ggml's blocks as stored, with unsigned
// quants: Q5_0's offset of 16 becomes the block term −16·d_x·Σq_x (kActs.c).
package kernels

import (
	"github.com/draftd/draftd/internal/dtype"
)

const kMaxNB = 4 // activation rows per kernel call (see _asm/kquant.go)

type lKernel func(w *byte, nblk int, x *int8, xstride int, xd *float32, dstride int, xc *float32, y *float32, ystride int)

var lKernels = map[dtype.Type]*[kMaxNB + 1]lKernel{
	dtype.Q4_1: {nil, q41AVX2x1, q41AVX2x2, q41AVX2x3, q41AVX2x4},
	dtype.Q5_0: {nil, q50AVX2x1, q50AVX2x2, q50AVX2x3, q50AVX2x4},
	dtype.Q5_1: {nil, q51AVX2x1, q51AVX2x2, q51AVX2x3, q51AVX2x4},
}

type kKernel func(w *byte, nrow, nblk int, x *int8, xstride int, xd *float32, dstride int, xb *int16, bstride int, y *float32, ystride int)

var (
	q4kK = [...]kKernel{nil, q4kAVX2x1, q4kAVX2x2, q4kAVX2x3, q4kAVX2x4}
	q5kK = [...]kKernel{nil, q5kAVX2x1, q5kAVX2x2, q5kAVX2x3, q5kAVX2x4}
	q6kK = [...]kKernel{nil, q6kAVX2x1, q6kAVX2x2, q6kAVX2x3, q6kAVX2x4}
	q3kK = [...]kKernel{nil, q3kAVX2x1, q3kAVX2x2, q3kAVX2x3, q3kAVX2x4}
	q2kK = [...]kKernel{nil, q2kAVX2x1, q2kAVX2x2, q2kAVX2x3, q2kAVX2x4}
)

// kpacked is a Q4_K/Q6_K matrix in the kernel layout.
type kpacked struct {
	data     []byte // (Rows, rowBytes)
	rowBytes int
}

// q6kOrder is the kernel position of each of a half's 8 scales.
var q6kOrder = [8]int{0, 4, 1, 5, 2, 6, 3, 7}

func kpack(m *Matrix) any {
	bb := map[dtype.Type]int{dtype.Q4_K: 148, dtype.Q5_K: 180, dtype.Q6_K: 210, dtype.Q3_K: 114, dtype.Q2_K: 100}[m.Type]
	if !hasAVX2 || bb == 0 {
		return nil
	}
	nblk := m.Cols / dtype.QKK
	pk := &kpacked{rowBytes: nblk * bb}
	pk.data = alignedBytes(m.Rows * pk.rowBytes)
	for r := range m.Rows {
		src := m.Row(r)
		for i := range nblk {
			dst := pk.data[r*pk.rowBytes+i*bb : r*pk.rowBytes+(i+1)*bb]
			switch m.Type {
			case dtype.Q3_K:
				s := src[i*110 : (i+1)*110]
				copy(dst[:64], s[32:96]) // qs
				copy(dst[64:96], s[:32]) // hmask
				for h := range 2 {
					for k := range 8 {
						dst[96+8*h+q6kOrder[k]] = byte(int8(dtype.ScaleQ3K(8*h+k, s[96:108])))
					}
				}
				copy(dst[112:], s[108:110])
				continue
			case dtype.Q2_K:
				s := src[i*84 : (i+1)*84]
				copy(dst[:64], s[16:80]) // qs
				for h := range 2 {
					for k := range 8 {
						dst[64+8*h+q6kOrder[k]] = s[8*h+k] & 0xf
						dst[80+8*h+q6kOrder[k]] = s[8*h+k] >> 4
					}
				}
				copy(dst[96:], s[80:84])
				continue
			}
			if m.Type != dtype.Q6_K {
				ob := m.Type.BlockBytes()
				s := src[i*ob : (i+1)*ob]
				copy(dst[:4], s[:4])
				for j := range 8 {
					dst[4+j], dst[12+j] = dtype.ScaleMinK4(j, s[4:16])
				}
				copy(dst[20:], s[16:]) // Q5_K: qh, then qs
			} else {
				s := src[i*210 : (i+1)*210]
				copy(dst, s)
				for h := range 2 {
					for k := range 8 {
						dst[192+8*h+q6kOrder[k]] = s[192+8*h+k]
					}
				}
			}
		}
	}
	return pk
}

// kernelSums fills a.kb for the kernels of type t (see the file comment).
func kernelSums(t dtype.Type, a *kActs, batch int) {
	switch t {
	case dtype.Q4_K, dtype.Q5_K:
		a.kb = grow(a.kb, batch*a.nblk*8)
		for i := range a.kb {
			a.kb[i] = a.bsums[2*i] + a.bsums[2*i+1]
		}
	case dtype.Q6_K, dtype.Q3_K, dtype.Q2_K:
		a.kb = grow(a.kb, batch*a.nblk*16)
		for i := 0; i < len(a.kb); i += 8 {
			for k := range 8 {
				a.kb[i+q6kOrder[k]] = a.bsums[i+k]
			}
		}
	case dtype.Q5_0:
		// The kernel's unsigned quants need −16·d_x·Σq_x per block.
		a.c = grow(a.c, batch*a.nblk)
		for i := range a.c {
			var sum int32
			for _, v := range a.q[32*i : 32*i+32] {
				sum += int32(v)
			}
			a.c[i] = -16 * a.d[i] * float32(sum)
		}
	}
}

func kRowsFast(w *Matrix, a *kActs, y []float32, ystride, batch, lo, hi, base int) bool {
	if lk := lKernels[w.Type]; lk != nil && impl >= implAVX2 {
		c := a.s // Q4_1/Q5_1: the s of each Q8_1 block
		if w.Type == dtype.Q5_0 {
			c = a.c
		}
		kTiles(lo, hi, batch, func(r, b0, nb int) {
			lk[nb](&w.Row(r)[0], a.nblk, &a.q[b0*a.cols], a.cols, &a.d[b0*a.nblk], 4*a.nblk, &c[b0*a.nblk], &y[b0*ystride+r-base], 4*ystride)
		})
		return true
	}
	pk, _ := w.packed.(*kpacked)
	if pk == nil || impl < implAVX2 || len(a.kb) == 0 {
		return false
	}
	ks, kbn := &q4kK, 8*a.nblk
	switch w.Type {
	case dtype.Q5_K:
		ks = &q5kK
	case dtype.Q6_K:
		ks, kbn = &q6kK, 16*a.nblk
	case dtype.Q3_K:
		ks, kbn = &q3kK, 16*a.nblk
	case dtype.Q2_K:
		ks, kbn = &q2kK, 16*a.nblk
	}
	kRowTiles(lo, hi, batch, func(r, nr, b0, nb int) {
		ks[nb](&pk.data[r*pk.rowBytes], nr, a.nblk, &a.q[b0*a.cols], a.cols, &a.d[b0*a.nblk], 4*a.nblk,
			&a.kb[b0*kbn], 2*kbn, &y[b0*ystride+r-base], 4*ystride)
	})
	return true
}

// Cache blocking of a K-quant matmul: kRowBlock weight rows (≤ 60 KB for
// 6144 columns) against kBatchChunk activation rows (≤ 400 KB) at a time, so
// that neither is streamed again for every row or every 4 tokens of a
// prefill. Each output is still one kernel call's sum over all columns.
const kRowBlock, kBatchChunk = 16, 64

// kTiles calls k(r, b0, nb) for every weight row r in [lo, hi) and every
// group of nb ≤ kMaxNB activation rows from b0, in cache-blocked order.
func kTiles(lo, hi, batch int, k func(r, b0, nb int)) {
	for r0 := lo; r0 < hi; r0 += kRowBlock {
		for c0 := 0; c0 < batch; c0 += kBatchChunk {
			c1 := min(batch, c0+kBatchChunk)
			for r := r0; r < min(hi, r0+kRowBlock); r++ {
				for b0 := c0; b0 < c1; b0 += kMaxNB {
					k(r, b0, min(kMaxNB, c1-b0))
				}
			}
		}
	}
}

// kRowTiles is kTiles with the rows of a row block in one call: k(r, nr, b0,
// nb) for weight rows [r, r+nr) and activation rows [b0, b0+nb).
func kRowTiles(lo, hi, batch int, k func(r, nr, b0, nb int)) {
	for r0 := lo; r0 < hi; r0 += kRowBlock {
		nr := min(hi, r0+kRowBlock) - r0
		for c0 := 0; c0 < batch; c0 += kBatchChunk {
			c1 := min(batch, c0+kBatchChunk)
			for b0 := c0; b0 < c1; b0 += kMaxNB {
				k(r0, nr, b0, min(kMaxNB, c1-b0))
			}
		}
	}
}

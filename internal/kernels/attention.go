// Attention of new query vectors over a paged KV cache. The cache is a list of
// blocks of bs positions; one block of one KV head is (bs, headDim) contiguous.
// This file is the API and the plain-Go reference; it does not own the cache
// (see internal/kvcache and model.Block).
package kernels

import (
	"math"

	"github.com/draftd/draftd/internal/dtype"
)

// f16Table widens every f16 bit pattern; 256 KiB, faster than bit twiddling.
var f16Table = func() []float32 {
	t := make([]float32, 1<<16)
	for i := range t {
		t[i] = dtype.F16ToF32(uint16(i))
	}
	return t
}()

// AttendF16 computes, for the nq query heads q (nq, headDim) that share one
// KV head, out (nq, headDim) = softmax(scale · q·Kᵀ) · V over positions
// [0, n). Position p's key is keys[p/bs][(p%bs)*headDim:][:headDim] (f16
// bits), its value likewise in vals. Softmax is taken in f32, online.
func AttendF16(out, q []float32, nq, headDim int, keys, vals [][]uint16, bs, n int, scale float32) {
	attendF16(out, q, nq, headDim, keys, vals, bs, n, scale)
}

// AttendF32 is AttendF16 for an f32 cache.
func AttendF32(out, q []float32, nq, headDim int, keys, vals [][]float32, bs, n int, scale float32) {
	attendF32(out, q, nq, headDim, keys, vals, bs, n, scale)
}

// AttendQ8_0 is AttendF16 for a q8_0 cache: position p's key is the row
// keys[p/bs][(p%bs)*rb:][:rb] of rb = headDim/32·34 bytes, headDim/32 ggml
// block_q8_0 (an f16 scale d, then 32 int8 q; element d·q), its value
// likewise in vals. headDim must be a multiple of 32 and the cached q in
// [-127, 127] (as ggml's quantizer writes them). The scores are integer
// block dots: each query row is quantized to q8_0 blocks by the same rule
// (quantQ8_0), and the score of a position is q8Score; the weighted sum of
// values is taken in f32 over the widened values d·q.
func AttendQ8_0(out, q []float32, nq, headDim int, keys, vals [][]byte, bs, n int, scale float32) {
	attendQ8_0(out, q, nq, headDim, keys, vals, bs, n, scale)
}

// AttendCausalF16 is AttendF16 for nt consecutive query tokens of one
// sequence (a prefill chunk): token i is at position p0+i and sees positions
// [0, p0+i]. Its nq query heads are q[i*stride:][:nq*headDim] and its
// output goes to out[i*stride:][:nq*headDim]. The result is that of nt
// AttendF16 calls; the AVX2 path serves the rows of several tokens from
// each pass over a cache block (flash-style: every K/V tile is read once
// per block of queries, the softmax stays online).
func AttendCausalF16(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]uint16, bs, p0 int, scale float32) {
	attendCausalF16(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
}

// AttendCausalF32 is AttendCausalF16 for an f32 cache.
func AttendCausalF32(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]float32, bs, p0 int, scale float32) {
	attendCausalF32(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
}

// AttendCausalQ8_0 is AttendCausalF16 for a q8_0 cache (see AttendQ8_0).
func AttendCausalQ8_0(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]byte, bs, p0 int, scale float32) {
	attendCausalQ8_0(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
}

// attendCausalGeneric is the reference of AttendCausalF16/F32: one
// attendGeneric per token.
func attendCausalGeneric[T uint16 | float32 | byte](out, q []float32, stride, nt, nq, headDim int, keys, vals [][]T, bs, p0 int, scale float32) {
	checkCausal(out, q, stride, nt, nq, headDim, len(keys), len(vals), bs, p0)
	for i := range nt {
		attendGeneric(out[i*stride:], q[i*stride:], nq, headDim, keys, vals, bs, p0+i+1, scale)
	}
}

func checkQ8Head(headDim int) {
	if headDim <= 0 || headDim%dtype.QK != 0 {
		panic("kernels.AttendQ8_0: head size not a multiple of 32")
	}
}

func checkCausal(out, q []float32, stride, nt, nq, headDim, nk, nv, bs, p0 int) {
	n := p0 + nt
	if nt <= 0 || p0 < 0 || stride < nq*headDim || bs <= 0 || nk*bs < n || nv*bs < n ||
		len(out) < (nt-1)*stride+nq*headDim || len(q) < (nt-1)*stride+nq*headDim {
		panic("kernels.AttendCausal: arguments out of range")
	}
}

func attendF16Generic(out, q []float32, nq, headDim int, keys, vals [][]uint16, bs, n int, scale float32) {
	attendGeneric(out, q, nq, headDim, keys, vals, bs, n, scale)
}

func attendQ8_0Generic(out, q []float32, nq, headDim int, keys, vals [][]byte, bs, n int, scale float32) {
	attendGeneric(out, q, nq, headDim, keys, vals, bs, n, scale)
}

func attendF32Generic(out, q []float32, nq, headDim int, keys, vals [][]float32, bs, n int, scale float32) {
	attendGeneric(out, q, nq, headDim, keys, vals, bs, n, scale)
}

// attendGeneric is the reference of AttendF16/AttendQ8_0/AttendF32: each
// cached row is widened to f32 (a q8_0 element to d·q), then scores, online
// softmax and the weighted sum are taken in f32; over a q8_0 cache the
// scores are q8Score of the quantized query instead.
func attendGeneric[T uint16 | float32 | byte](out, q []float32, nq, headDim int, keys, vals [][]T, bs, n int, scale float32) {
	rl := rowLen[T](headDim) // stored elements of one row
	var kbuf, vbuf [256]float32
	kf, vf := kbuf[:], vbuf[:] // (headDim) the widened key and value
	if headDim > len(kbuf) {
		kf, vf = make([]float32, headDim), make([]float32, headDim)
	}
	kf, vf = kf[:headDim], vf[:headDim]
	q8 := rl != headDim // a q8_0 cache: integer scores against the quantized query
	var qq [256]int8    // (headDim) the quantized query row
	var qd [8]float32   // (headDim/32) its block scales
	for h := range nq {
		qh := q[h*headDim : (h+1)*headDim]    // (headDim)
		acc := out[h*headDim : (h+1)*headDim] // (headDim) running Σ w·v
		clear(acc)
		if q8 {
			quantQuery(qh, qq[:headDim], qd[:headDim/dtype.QK], nil)
		}
		m, l := float32(math.Inf(-1)), float32(0)
		for p := range n {
			widenRow(vf, vals[p/bs][(p%bs)*rl:][:rl])
			var s float32
			if k := keys[p/bs][(p%bs)*rl:][:rl]; q8 {
				s = q8Score(qq[:headDim], qd[:headDim/dtype.QK], any(k).([]byte), scale)
			} else {
				widenRow(kf, k)
				for i, kv := range kf {
					s += qh[i] * kv
				}
				s *= scale
			}
			if s > m {
				c := float32(math.Exp(float64(m - s)))
				for i := range acc {
					acc[i] *= c
				}
				l *= c
				m = s
			}
			w := float32(math.Exp(float64(s - m)))
			l += w
			for i, vv := range vf {
				acc[i] += w * vv
			}
		}
		for i := range acc {
			acc[i] /= l
		}
	}
}

// rowLen is the number of stored T of one cached row of headDim elements:
// headDim, or for the q8_0 bytes headDim/32 blocks of 34.
func rowLen[T uint16 | float32 | byte](headDim int) int {
	var z T
	if _, ok := any(z).(byte); ok {
		return headDim / dtype.QK * (2 + dtype.QK)
	}
	return headDim
}

// widenRow sets dst to src as f32 (f16 bits through f16Table; q8_0 blocks
// as d·q, d through f16Table).
func widenRow[T uint16 | float32 | byte](dst []float32, src []T) {
	switch src := any(src).(type) {
	case []uint16:
		for i, v := range src {
			dst[i] = f16Table[v]
		}
	case []float32:
		copy(dst, src)
	case []byte:
		for b := range len(src) / (2 + dtype.QK) {
			blk := src[b*(2+dtype.QK) : (b+1)*(2+dtype.QK)] // (34): d f16, q [32]int8
			d := f16Table[uint16(blk[0])|uint16(blk[1])<<8]
			for j, v := range blk[2:] {
				dst[b*dtype.QK+j] = d * float32(int8(v))
			}
		}
	}
}

// quantQuery quantizes the query row x (headDim, a multiple of 32) to q8_0
// blocks by ggml's rule (quantQ8_0): q gets the int8 values, d[b] the f32 of
// block b's f16 scale and, if c is not nil, c[b] = -128·Σq of block b (the
// correction of the AVX-512 kernel, which offsets the keys by +128 to make
// them unsigned for VPDPBUSD).
func quantQuery(x []float32, q []int8, d []float32, c []int32) {
	for b := range len(x) / dtype.QK {
		sum := quantQ8_0(x[b*dtype.QK:(b+1)*dtype.QK], q[b*dtype.QK:(b+1)*dtype.QK], &d[b])
		if c != nil {
			c[b] = int32(-128 * sum)
		}
	}
}

// q8Score is the score of a quantized query row (q, block scales d) against
// one cached q8_0 row k (len(d) blocks of 34 bytes), the specification
// every q8_0 kernel follows bit for bit: per block the exact integer dot
// Σ q·k, times the product of the two scales, summed over the blocks in
// order in f32, then times scale:
//
//	s = 0;  for b: s += float32(dot_b) · (d_k,b · d_q,b);  s = s · scale
//
// (each product rounded to f32 on its own: no fused multiply-add).
func q8Score(q []int8, d []float32, k []byte, scale float32) float32 {
	var s float32
	for b, dq := range d {
		blk := k[b*(2+dtype.QK) : (b+1)*(2+dtype.QK)] // (34): d f16, q [32]int8
		dk := f16Table[uint16(blk[0])|uint16(blk[1])<<8]
		var dot int32
		for j, v := range blk[2:] {
			dot += int32(q[b*dtype.QK+j]) * int32(int8(v))
		}
		dd := float32(dk * dq)
		s += float32(float32(dot) * dd)
	}
	return s * scale
}

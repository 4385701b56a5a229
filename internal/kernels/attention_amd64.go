//go:build !purego

// Attention on amd64: the (token, head) query rows of one KV head go through
// the cache in passes of up to 8 rows, so each cached key and value a pass
// loads serves all of its rows; rows of later tokens see a few more
// positions, masked per row in the kernel (flash-style block attention for
// prefill; decode is the one-token case). Per 16 positions one kernel call
// computes the scores, the online-softmax step (vector exp) and the
// weighted sum of values. Queries and accumulators are kept
// chunk-interleaved ((headDim/W, rows, W), W = 16 lanes on AVX-512, 8 on
// AVX2) so every row's data is a constant offset from one pointer. Over a
// q8_0 cache the scores come first from a separate kernel (q8Scores*: the
// pass's query rows quantized to q8_0 once, integer block dots against the
// cached keys as q8Score specifies), then the block kernel takes the softmax
// step and the weighted sum of the values, widened to f32 in registers.
package kernels

import (
	"math"
	"unsafe"
)

const attnMaxNQ = 8

// use512 reports whether the AVX-512 kernels take a head of headDim.
func use512(headDim int) bool { return impl == implAVX512 && headDim%16 == 0 && headDim <= 256 }

// use2 reports whether the AVX2 kernels take a head of headDim.
func use2(headDim int) bool { return impl >= implAVX2 && headDim%8 == 0 && headDim <= 256 }

func attendF16(out, q []float32, nq, headDim int, keys, vals [][]uint16, bs, n int, scale float32) {
	switch {
	case use512(headDim):
		attendCausal512(out, q, nq*headDim, 1, nq, headDim, keys, vals, bs, n-1, scale)
	case use2(headDim):
		attendCausal2(out, q, nq*headDim, 1, nq, headDim, keys, vals, bs, n-1, scale)
	default:
		attendF16Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
	}
}

func attendF32(out, q []float32, nq, headDim int, keys, vals [][]float32, bs, n int, scale float32) {
	switch {
	case use512(headDim):
		attendCausal512(out, q, nq*headDim, 1, nq, headDim, keys, vals, bs, n-1, scale)
	case use2(headDim):
		attendCausal2(out, q, nq*headDim, 1, nq, headDim, keys, vals, bs, n-1, scale)
	default:
		attendF32Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
	}
}

func attendQ8_0(out, q []float32, nq, headDim int, keys, vals [][]byte, bs, n int, scale float32) {
	checkQ8Head(headDim)
	switch {
	case use512(headDim):
		attendCausal512(out, q, nq*headDim, 1, nq, headDim, keys, vals, bs, n-1, scale)
	case use2(headDim):
		attendCausal2(out, q, nq*headDim, 1, nq, headDim, keys, vals, bs, n-1, scale)
	default:
		attendQ8_0Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
	}
}

func attendCausalF16(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]uint16, bs, p0 int, scale float32) {
	switch {
	case use512(headDim):
		attendCausal512(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	case use2(headDim):
		attendCausal2(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	default:
		attendCausalGeneric(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	}
}

func attendCausalF32(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]float32, bs, p0 int, scale float32) {
	switch {
	case use512(headDim):
		attendCausal512(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	case use2(headDim):
		attendCausal2(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	default:
		attendCausalGeneric(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	}
}

func attendCausalQ8_0(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]byte, bs, p0 int, scale float32) {
	checkQ8Head(headDim)
	switch {
	case use512(headDim):
		attendCausal512(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	case use2(headDim):
		attendCausal2(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	default:
		attendCausalGeneric(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
	}
}

// attnScratch is the working memory of one AVX-512 pass, on the stack
// (headDim ≤ 256).
type attnScratch struct {
	q, acc [attnMaxNQ * 256]float32 // (headDim/16, rows, 16) chunk-interleaved
	ml     [16]float32              // running max (8 rows), then running sum (8 rows)
	s      [16*8 + 8]float32        // (16 positions, rows) scores, then 8 rescale factors
	lim    [attnMaxNQ]int32         // valid positions of each row in the current call (0 past the rows)
}

// attendCausal512 is the AVX-512 AttendCausal (and, with nt = 1, Attend):
// attendCausal2 on 16-lane kernels, for f16, f32 and q8_0 caches (q8_0:
// integer scores from q8ScoresAVX512, values widened in registers). A row's
// result does not depend on the rows that share its pass, so a token gets
// the same bits from a prefill block as from a decode step.
func attendCausal512[T uint16 | float32 | byte](out, q []float32, stride, nt, nq, headDim int, keys, vals [][]T, bs, p0 int, scale float32) {
	checkCausal(out, q, stride, nt, nq, headDim, len(keys), len(vals), bs, p0)
	var sc attnScratch
	var q8 *q8Query
	if rowLen[T](headDim) != headDim {
		q8 = new(q8Query) // on the stack: the kernels do not keep pointers
	}
	causalPasses(nt, nq, stride, headDim, p0, func(qo, end *[attnMaxNQ]int, g int) {
		attnPass512(&sc, q8, out, q, qo, end, g, headDim, keys, vals, bs, scale)
	})
}

// attnPass512 runs g ≤ 8 query rows through the cache (as attnPass2); over
// a q8_0 cache (q8 not nil) each kernel call's scores come from
// q8ScoresAVX512.
func attnPass512[T uint16 | float32 | byte](sc *attnScratch, q8 *q8Query, out, q []float32, qo, end *[attnMaxNQ]int, g, headDim int, keys, vals [][]T, bs int, scale float32) {
	nch := headDim / 16
	rl := rowLen[T](headDim) // stored T of one cached row
	n := attnBegin512(sc, q, qo, end, g, headDim)
	if q8 != nil {
		q8.quantize(q, qo, g, headDim)
	}
	for p := 0; p < n; {
		blk, off := p/bs, p%bs
		cnt := min(16, bs-off, n-p)
		for j := range g {
			sc.lim[j] = int32(min(max(end[j]-p, 0), cnt))
		}
		k := keys[blk][off*rl : (off+cnt)*rl]
		v := vals[blk][off*rl : (off+cnt)*rl]
		kn, vn := nextRows(keys, vals, p+cnt, n, bs, cnt, rl, &k[0], &v[0])
		if q8 != nil {
			// Two blocks ahead: the q8_0 kernels prefetch into L2 only.
			kn, vn = nextRows(keys, vals, p+cnt+16, n, bs, cnt, rl, kn, vn)
			kp := q8.keys(any(k).([]byte), cnt, headDim)
			q8ScoresAVX512(&sc.s[0], kp, headDim/32, g, &q8.q[0][0], &q8.m[0][0], scale, &q8.dk[0], any(kn).(*byte))
		}
		attnKernel(sc, g, nch, &k[0], &v[0], cnt, scale, kn, vn)
		p += cnt
	}
	attnEnd512(sc, out, qo, g, headDim)
}

// q8Query is the quantized query rows of one pass over a q8_0 cache and the
// score kernels' scratch (on the stack, ~10 KiB; headDim ≤ 256).
type q8Query struct {
	q    [attnMaxNQ][512]byte    // per row: the int8 q of its blocks at [0:headDim], |q| at [256:][:headDim]
	m    [attnMaxNQ][16]uint32   // per row, block b: d (f32 bits) at [2b], -128·Σq (int32) at [2b+1]
	dk   [8 * 16]uint16          // (blocks, 16 positions) the keys' f16 scales, kernel scratch
	sh   [attnMaxNQ * 16]float32 // (rows, 16 positions) AVX2 scores, kernel scratch
	kpad [16 * 8 * (2 + 32)]byte // a call's keys padded to 16 rows
}

// quantize sets the pass's g query rows (row j at q[qo[j]:][:headDim]) by
// the activation quantizer, bit for bit quantQuery's blocks.
func (z *q8Query) quantize(q []float32, qo *[attnMaxNQ]int, g, headDim int) {
	for j := range g {
		x, qq, m := &q[qo[j]:][:headDim][0], &z.q[j][0], (*byte)(unsafe.Pointer(&z.m[j][0]))
		if impl == implAVX512 {
			quantQ8AVX512(x, headDim/32, qq, 32, m, 8, 128)
		} else {
			quantQ8AVX2(x, headDim/32, qq, 32, m, 8, 128)
		}
		for i, v := range z.q[j][:headDim] {
			z.q[j][256+i] = byte(max(int8(v), -int8(v))) // |q| ≤ 127
		}
	}
}

// keys returns the start of 16 rows of keys for a score kernel: the cnt rows
// of k, copied with stale rows after them when cnt < 16 (the kernels read
// 16 rows; scores past cnt are masked off by lim).
func (z *q8Query) keys(k []byte, cnt, headDim int) *byte {
	if cnt == 16 {
		return &k[0]
	}
	copy(z.kpad[:], k[:cnt*rowLen[byte](headDim)])
	return &z.kpad[0]
}

// attnBegin512 interleaves the g rows' queries into sc.q, resets the
// softmax state and returns the positions the pass covers.
func attnBegin512(sc *attnScratch, q []float32, qo, end *[attnMaxNQ]int, g, headDim int) int {
	n := 0
	for j := range attnMaxNQ {
		sc.ml[j], sc.ml[8+j], sc.lim[j] = float32(math.Inf(-1)), 0, 0
	}
	for j := range g {
		for i := range headDim / 16 {
			copy(sc.q[(i*g+j)*16:(i*g+j)*16+16], q[qo[j]+16*i:])
		}
		n = max(n, end[j])
	}
	clear(sc.acc[:g*headDim])
	return n
}

// attnEnd512 writes acc / l of the g rows to out.
func attnEnd512(sc *attnScratch, out []float32, qo *[attnMaxNQ]int, g, headDim int) {
	for j := range g {
		l := sc.ml[8+j]
		o := out[qo[j] : qo[j]+headDim]
		for i := range headDim / 16 {
			a := sc.acc[(i*g+j)*16 : (i*g+j)*16+16]
			for e, v := range a {
				o[16*i+e] = v / l
			}
		}
	}
}

// attnKernel calls the AVX-512 kernel for g rows directly (see attn2Kernel).
func attnKernel[T uint16 | float32 | byte](sc *attnScratch, g, nch int, k, v *T, cnt int, scale float32, kn, vn *T) {
	acc, q, ml, s, lim := &sc.acc[0], &sc.q[0], &sc.ml[0], &sc.s[0], &sc.lim[0]
	kb, vb := (*byte)(unsafe.Pointer(k)), (*byte)(unsafe.Pointer(v))
	knb, vnb := (*byte)(unsafe.Pointer(kn)), (*byte)(unsafe.Pointer(vn))
	if unsafe.Sizeof(*k) == 1 {
		switch g {
		case 1:
			attendQ8AVX512x1(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 2:
			attendQ8AVX512x2(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 3:
			attendQ8AVX512x3(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 4:
			attendQ8AVX512x4(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 5:
			attendQ8AVX512x5(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 6:
			attendQ8AVX512x6(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 7:
			attendQ8AVX512x7(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		default:
			attendQ8AVX512x8(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		}
		return
	}
	if unsafe.Sizeof(*k) == 2 {
		switch g {
		case 1:
			attendF16AVX512x1(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 2:
			attendF16AVX512x2(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 3:
			attendF16AVX512x3(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 4:
			attendF16AVX512x4(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 5:
			attendF16AVX512x5(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 6:
			attendF16AVX512x6(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 7:
			attendF16AVX512x7(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		default:
			attendF16AVX512x8(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		}
		return
	}
	switch g {
	case 1:
		attendF32AVX512x1(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 2:
		attendF32AVX512x2(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 3:
		attendF32AVX512x3(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 4:
		attendF32AVX512x4(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 5:
		attendF32AVX512x5(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 6:
		attendF32AVX512x6(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 7:
		attendF32AVX512x7(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	default:
		attendF32AVX512x8(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	}
}

// nextRows returns the start of the cnt rows (of rl stored T each) after
// position p, for the kernel to prefetch, or def if they are not all there.
func nextRows[T uint16 | float32 | byte](keys, vals [][]T, p, n, bs, cnt, rl int, defK, defV *T) (*T, *T) {
	if p >= n {
		return defK, defV
	}
	b, o := p/bs, p%bs
	if end := (o + cnt) * rl; len(keys[b]) < end || len(vals[b]) < end {
		return defK, defV
	}
	return &keys[b][o*rl], &vals[b][o*rl]
}

// attn2Scratch is the working memory of one AVX2 pass, on the stack
// (headDim ≤ 256).
type attn2Scratch struct {
	q, acc [attnMaxNQ * 256]float32 // (headDim/8, rows, 8) chunk-interleaved
	ml     [16]float32              // running max (8 rows), then running sum (8 rows)
	s      [16*8 + 8]float32        // (16 positions, 8 rows) scores, then 8 rescale factors
	lim    [attnMaxNQ]int32         // valid positions of each row in the current call (0 past the rows)
}

// attendCausal2 is the AVX2 AttendCausal (and, with nt = 1, Attend): the
// nt·nq (token, head) query rows go through the cache in passes of up to 8
// rows, so each key and value a pass loads serves all of its rows; rows of
// later tokens see a few more positions, masked per row in the kernel.
func attendCausal2[T uint16 | float32 | byte](out, q []float32, stride, nt, nq, headDim int, keys, vals [][]T, bs, p0 int, scale float32) {
	checkCausal(out, q, stride, nt, nq, headDim, len(keys), len(vals), bs, p0)
	var sc attn2Scratch
	var q8 *q8Query
	if rowLen[T](headDim) != headDim {
		q8 = new(q8Query)
	}
	causalPasses(nt, nq, stride, headDim, p0, func(qo, end *[attnMaxNQ]int, g int) {
		attnPass2(&sc, q8, out, q, qo, end, g, headDim, keys, vals, bs, scale)
	})
}

// attnPass2 runs g ≤ 8 query rows through the cache: row j's query is
// q[qo[j]:][:headDim], its output out[qo[j]:][:headDim], and it sees
// positions [0, end[j]) (end[j] ≥ 1). Over a q8_0 cache (q8 not nil) each
// kernel call's scores come from q8ScoresAVX2.
func attnPass2[T uint16 | float32 | byte](sc *attn2Scratch, q8 *q8Query, out, q []float32, qo, end *[attnMaxNQ]int, g, headDim int, keys, vals [][]T, bs int, scale float32) {
	nch := headDim / 8
	rl := rowLen[T](headDim) // stored T of one cached row
	n := 0
	for j := range attnMaxNQ {
		sc.ml[j], sc.ml[8+j], sc.lim[j] = float32(math.Inf(-1)), 0, 0
	}
	for j := range g {
		for i := range nch {
			copy(sc.q[(i*g+j)*8:(i*g+j)*8+8], q[qo[j]+8*i:])
		}
		n = max(n, end[j])
	}
	clear(sc.acc[:g*headDim])
	if q8 != nil {
		q8.quantize(q, qo, g, headDim)
	}
	for p := 0; p < n; {
		blk, off := p/bs, p%bs
		cnt := min(16, bs-off, n-p)
		for j := range g {
			sc.lim[j] = int32(min(max(end[j]-p, 0), cnt))
		}
		k := keys[blk][off*rl : (off+cnt)*rl]
		v := vals[blk][off*rl : (off+cnt)*rl]
		kn, vn := nextRows(keys, vals, p+cnt, n, bs, cnt, rl, &k[0], &v[0])
		if q8 != nil {
			// Two blocks ahead: the q8_0 kernels prefetch into L2 only.
			kn, vn = nextRows(keys, vals, p+cnt+16, n, bs, cnt, rl, kn, vn)
			kp := q8.keys(any(k).([]byte), cnt, headDim)
			q8ScoresAVX2(&sc.s[0], kp, headDim/32, g, &q8.q[0][0], &q8.m[0][0], scale, &q8.dk[0], &q8.sh[0], any(kn).(*byte))
		}
		attn2Kernel(sc, g, nch, &k[0], &v[0], cnt, scale, kn, vn)
		p += cnt
	}
	for j := range g {
		o := out[qo[j] : qo[j]+headDim]
		attnOutAVX2(&o[0], &sc.acc[j*8], nch, 32*g, sc.ml[8+j])
	}
}

// attn2Kernel calls the AVX2 kernel for g rows directly (see attnKernel).
// The switch is deliberate: calling the kernels through a table of func
// values drops their //go:noescape, moves the caller's stack scratch to the
// heap and costs ~130 MB of allocations per batch-32 decode step (measured).
func attn2Kernel[T uint16 | float32 | byte](sc *attn2Scratch, g, nch int, k, v *T, cnt int, scale float32, kn, vn *T) {
	acc, q, ml, s, lim := &sc.acc[0], &sc.q[0], &sc.ml[0], &sc.s[0], &sc.lim[0]
	kb, vb := (*byte)(unsafe.Pointer(k)), (*byte)(unsafe.Pointer(v))
	knb, vnb := (*byte)(unsafe.Pointer(kn)), (*byte)(unsafe.Pointer(vn))
	if unsafe.Sizeof(*k) == 1 {
		switch g {
		case 1:
			attendQ8AVX2x1(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 2:
			attendQ8AVX2x2(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 3:
			attendQ8AVX2x3(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 4:
			attendQ8AVX2x4(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 5:
			attendQ8AVX2x5(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 6:
			attendQ8AVX2x6(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 7:
			attendQ8AVX2x7(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		default:
			attendQ8AVX2x8(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		}
		return
	}
	if unsafe.Sizeof(*k) == 2 {
		switch g {
		case 1:
			attendF16AVX2x1(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 2:
			attendF16AVX2x2(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 3:
			attendF16AVX2x3(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 4:
			attendF16AVX2x4(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 5:
			attendF16AVX2x5(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 6:
			attendF16AVX2x6(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		case 7:
			attendF16AVX2x7(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		default:
			attendF16AVX2x8(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
		}
		return
	}
	switch g {
	case 1:
		attendF32AVX2x1(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 2:
		attendF32AVX2x2(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 3:
		attendF32AVX2x3(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 4:
		attendF32AVX2x4(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 5:
		attendF32AVX2x5(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 6:
		attendF32AVX2x6(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	case 7:
		attendF32AVX2x7(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	default:
		attendF32AVX2x8(acc, q, ml, nch, kb, vb, cnt, scale, s, lim, knb, vnb)
	}
}

// causalPasses splits the nt·nq (token, head) query rows of a causal block
// into passes of up to attnMaxNQ rows and calls pass for each: row j's query
// (and output) starts at qo[j], and it sees positions [0, end[j]).
func causalPasses(nt, nq, stride, headDim, p0 int, pass func(qo, end *[attnMaxNQ]int, g int)) {
	var qo, end [attnMaxNQ]int
	rows := nt * nq
	for r0 := 0; r0 < rows; r0 += attnMaxNQ {
		g := min(attnMaxNQ, rows-r0)
		for j := range g {
			i, h := (r0+j)/nq, (r0+j)%nq
			qo[j], end[j] = i*stride+h*headDim, p0+i+1
		}
		pass(&qo, &end, g)
	}
}

// Q8_0 / Q4_0 matmul kernels: integer dot products of packed weight tiles
// with Q8_0-quantized activations (AVX-512 VNNI and AVX2). Not the
// activation quantizer (quant.go).
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ---------------------------------------------------------------------------
// Q8_0 / Q4_0 × Q8_0-quantized activations, AVX-512 VNNI.

func genQ512(nb int, q4 bool) {
	t, blockBytes := "q8", 64+8*128
	if q4 {
		t, blockBytes = "q4", 64+4*128
	}
	name := fmt.Sprintf("%sAVX512x%d", t, nb)
	TEXT(name, NOSPLIT, "func(w *byte, x *byte, xm *byte, nblk int, xstride int, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a 32-row × %d-activation tile of y = x·Wᵀ for", name, nb),
		fmt.Sprintf("%s weights packed by packTile (%d bytes per 32×32 block) and activations", map[bool]string{false: "Q8_0", true: "Q4_0"}[q4], blockBytes),
		"quantized by quantizeRow (blocked layout): for b < nb, r < 32,",
		"",
		"\ty[b*ystride/4+r] = Σ_blk float32(Σ_j u[r][j]·q[b][j] + corr[b]) · (d_w[r] · d_x[b])",
		"",
		"where u is the stored unsigned weight code (q+128 for Q8_0, the nibble for Q4_0)",
		"and corr = -offset·Σq undoes the offset; the sum over blk is sequential FMA.",
		"Meanwhile it prefetches pfn bytes at pf (the next tile), a block's worth per block.")
	W := Load(Param("w"), reg.RSI)
	Xp := Load(Param("x"), reg.RDI)
	XM := Load(Param("xm"), reg.R8)
	N := Load(Param("nblk"), reg.RCX)
	XS := Load(Param("xstride"), reg.R9)
	MOVQ(XS, reg.R10)
	SHRQ(U8(2), reg.R10) // meta stride: 8 bytes per row versus 32 quants
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)

	facc := func(g, b int) reg.VecPhysical { return Z(g*nb + b) }
	iacc := func(g, b int) reg.VecPhysical { return Z(12 + g*nb + b) }
	Comment("Z0-Z11: f32 accumulators (group g, row b) = Z[g*nb+b]; Z12-Z23: int32 block sums likewise")
	for g := range 2 {
		for b := range nb {
			VPXORD(facc(g, b), facc(g, b), facc(g, b))
		}
	}
	// Q8: Z24/Z25 weights of groups 0/1, Z26/Z27 their scales, Z28 scale product, Z29 activation broadcast.
	// Q4: Z24/Z25 low nibbles, Z26/Z27 high nibbles, Z28/Z29 scales, Z30 activation broadcast, Z31 0x0f mask.
	dw := [2]reg.VecPhysical{reg.Z26, reg.Z27}
	if q4 {
		dw = [2]reg.VecPhysical{reg.Z28, reg.Z29}
		MOVL(U32(0x0f0f0f0f), reg.EAX)
		VPBROADCASTD(reg.EAX, reg.Z31)
	}
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: (blockBytes + 63) / 64, n: 8}
	pfs.init()
	Label("block")
	VCVTPH2PS(M(W, 0), dw[0])
	VCVTPH2PS(M(W, 32), dw[1])
	Comment("start each block sum at corr = -offset·Σq_x")
	for b := range nb {
		VPBROADCASTD(M(XM, 8*b+4), iacc(0, b))
		VMOVDQA32(iacc(0, b), iacc(1, b))
	}
	if !q4 {
		for s := range 8 {
			Commentf("k = 4·%d … 4·%d+3 of the block", s, s)
			pfs.at(s)
			VMOVDQU32(M(W, 64+128*s), reg.Z24)
			VMOVDQU32(M(W, 64+128*s+64), reg.Z25)
			for b := range nb {
				VPBROADCASTD(M(Xp, 32*b+4*s), reg.Z29)
				vpdpbusd(reg.Z29, reg.Z24, iacc(0, b))
				vpdpbusd(reg.Z29, reg.Z25, iacc(1, b))
			}
		}
	} else {
		pfs.n = 4
		for m := range 4 {
			Commentf("k = 4·%d … 4·%d+3 (low nibbles) and 4·%d … 4·%d+3 (high nibbles)", m, m, m+4, m+4)
			pfs.at(m)
			VMOVDQU32(M(W, 64+128*m), reg.Z24)
			VMOVDQU32(M(W, 64+128*m+64), reg.Z25)
			VPSRLW(U8(4), reg.Z24, reg.Z26)
			VPSRLW(U8(4), reg.Z25, reg.Z27)
			VPANDD(reg.Z31, reg.Z24, reg.Z24)
			VPANDD(reg.Z31, reg.Z25, reg.Z25)
			VPANDD(reg.Z31, reg.Z26, reg.Z26)
			VPANDD(reg.Z31, reg.Z27, reg.Z27)
			for b := range nb {
				VPBROADCASTD(M(Xp, 32*b+4*m), reg.Z30)
				vpdpbusd(reg.Z30, reg.Z24, iacc(0, b))
				vpdpbusd(reg.Z30, reg.Z25, iacc(1, b))
				VPBROADCASTD(M(Xp, 32*b+4*(m+4)), reg.Z30)
				vpdpbusd(reg.Z30, reg.Z26, iacc(0, b))
				vpdpbusd(reg.Z30, reg.Z27, iacc(1, b))
			}
		}
	}
	Comment("acc += float(sum) · (d_w · d_x)")
	tmp := reg.Z28
	if q4 {
		tmp = reg.Z24
	}
	for b := range nb {
		for g := range 2 {
			VCVTDQ2PS(iacc(g, b), iacc(g, b))
			VMULPS_BCST(M(XM, 8*b), dw[g], tmp)
			VFMADD231PS(tmp, iacc(g, b), facc(g, b))
		}
	}
	ADDQ(U32(blockBytes), W)
	ADDQ(XS, Xp)
	ADDQ(reg.R10, XM)
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("block"))

	storeY(nb, 64, facc)
}

// ---------------------------------------------------------------------------
// Q8_0 / Q4_0 × Q8_0-quantized activations, AVX2 (VPMADDUBSW/VPMADDWD).

// q2MaxNB is the largest number of activation rows per AVX2 int8 kernel
// call (mirrored in matmul_amd64.go). Up to q2RegNB rows, the 2·nb int and
// 2·nb float accumulators and the weights of one step fill the 16 ymm
// registers; beyond, the float accumulators live on the stack (one load and
// store per block), so each weight vector serves more rows.
const (
	q2MaxNB = 4
	q2RegNB = 2
)

// ymmConst returns a 32-byte read-only global holding the 32-bit value v
// in every lane, for use as a memory operand.
func ymmConst(name string, v uint32) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i := range 8 {
		DATA(4*i, U32(v))
	}
	return m
}

var onesW Mem // int16 ones, for VPMADDWD

func genQ2(nb int, q4 bool) {
	t, blockBytes := "q8", 64+8*128
	if q4 {
		t, blockBytes = "q4", 64+4*128
	}
	name := fmt.Sprintf("%sAVX2x%d", t, nb)
	TEXT(name, NOSPLIT, "func(ws *byte, wq *byte, x *byte, xm *byte, nblk int, xstride int, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one 16-row group × %d activation rows of y = x·Wᵀ for", name, nb),
		fmt.Sprintf("%s weights packed by packTile (blocks %d bytes apart; ws points at the", map[bool]string{false: "Q8_0", true: "Q4_0"}[q4], blockBytes),
		"group's 16 scales, wq at its first quants) and activations quantized by",
		"quantizeRow (x, xm at row 0's quants and meta of block 0; row b's are 32·b",
		"and 8·b bytes further, the next block's xstride and xstride/4): for b < nb, r < 16,",
		"",
		"\ty[b*ystride/4+r] = Σ_blk float32(Σ_j w[r][j]·q[b][j]) · (d_w[r] · d_x[b])",
		"",
		"with the sum over blk a sequential FMA. Meanwhile it prefetches pfn bytes at",
		"pf (the next tile).")
	WS := Load(Param("ws"), reg.RSI)
	WQ := Load(Param("wq"), reg.RDX)
	Xp := Load(Param("x"), reg.RDI)
	XM := Load(Param("xm"), reg.R8)
	N := Load(Param("nblk"), reg.RCX)
	XS := Load(Param("xstride"), reg.R9)
	MOVQ(XS, reg.R10)
	SHRQ(U8(2), reg.R10) // meta stride: 8 bytes per row versus 32 quants
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)
	lines := (blockBytes + 63) / 64
	regAcc := nb <= q2RegNB
	var stack Mem
	iacc := func(h, b int) reg.VecPhysical { return Y(2*nb + h*nb + b) }
	facc := func(h, b int) reg.VecPhysical { return Y(h*nb + b) }
	if !regAcc {
		stack = AllocLocal(2 * nb * 32)
		iacc = func(h, b int) reg.VecPhysical { return Y(h*nb + b) }
	}
	fmem := func(h, b int) Mem { return stack.Offset(32 * (h*nb + b)) }
	// fma adds t·float(iacc) to the f32 accumulator (h, b), in a register or
	// on the stack: the same fused operation either way.
	fma := func(t reg.VecPhysical, h, b int) {
		if regAcc {
			VFMADD231PS(t, iacc(h, b), facc(h, b))
		} else {
			VFMADD213PS(fmem(h, b), t, iacc(h, b))
			VMOVUPS(iacc(h, b), fmem(h, b))
		}
	}
	if regAcc {
		for h := range 2 {
			for b := range nb {
				VPXOR(facc(h, b), facc(h, b), facc(h, b))
			}
		}
	} else {
		VPXOR(reg.Y0, reg.Y0, reg.Y0)
		for h := range 2 {
			for b := range nb {
				VMOVUPS(reg.Y0, fmem(h, b))
			}
		}
	}
	if !q4 {
		Comment("f32 accumulators (half h, row b) Y[h*nb+b] (or on the stack), int32 block sums Y[2nb+h*nb+b] (or Y[h*nb+b]);",
			"Y10/Y11 the weight magnitudes of the two 8-row halves (weights are read",
			"from memory), Y12 activation broadcast, Y13 product, Y15 int16 ones.",
			"VPMADDUBSW takes unsigned × signed bytes: |w| · (x·sign(w)) = w·x, and",
			"a pair of such products (≤ 2·128·127) never saturates int16.")
		VMOVDQU(onesW, reg.Y15)
		a := [2]reg.VecPhysical{reg.Y10, reg.Y11}
		xb, tp := reg.Y12, reg.Y13
		pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: lines, n: 8}
		pfs.init()
		Label("block")
		q := q8Regs{WS: WS, WQ: WQ, Xp: Xp, XM: XM, a: a, xb: xb, tp: tp, ones: reg.Y15, iacc: iacc}
		for s := range 8 {
			pfs.at(s)
			q.step(s, nb)
		}
		q.blockEnd(nb, fma)
		pfs.advance()
	} else {
		Comment("f32 accumulators (half h, row b) Y[h*nb+b] (or on the stack), int16 block sums Y[2nb+h*nb+b] (or Y[h*nb+b]);",
			"Y8-Y11 low and high nibbles of the two halves, Y12/Y13 activation broadcasts,",
			"Y14 product, Y15 0x0f bytes. A nibble product pair is ≤ 2·15·127, so the",
			"eight of a block sum exactly in int16; VPMADDWD then widens them.")
		MOVL(U32(0x0f0f0f0f), reg.EAX)
		VMOVD(reg.EAX, reg.X15)
		VPBROADCASTD(reg.X15, reg.Y15)
		lo := [2]reg.VecPhysical{reg.Y8, reg.Y9}
		hi := [2]reg.VecPhysical{reg.Y10, reg.Y11}
		xl, xh, tp := reg.Y12, reg.Y13, reg.Y14
		pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: lines, n: 4}
		pfs.init()
		Label("block")
		for m := range 4 {
			Commentf("k = 4·%d … 4·%d+3 (low nibbles) and 16+4·%d … 16+4·%d+3 (high nibbles)", m, m, m, m)
			pfs.at(m)
			for h := range 2 {
				VMOVDQU(M(WQ, 128*m+32*h), hi[h])
				VPAND(reg.Y15, hi[h], lo[h])
				VPSRLW(U8(4), hi[h], hi[h])
				VPAND(reg.Y15, hi[h], hi[h])
			}
			for b := range nb {
				VPBROADCASTD(M(Xp, 32*b+4*m), xl)
				VPBROADCASTD(M(Xp, 32*b+16+4*m), xh)
				for h := range 2 {
					if m == 0 {
						VPMADDUBSW(xl, lo[h], iacc(h, b))
					} else {
						VPMADDUBSW(xl, lo[h], tp)
						VPADDW(tp, iacc(h, b), iacc(h, b))
					}
					VPMADDUBSW(xh, hi[h], tp)
					VPADDW(tp, iacc(h, b), iacc(h, b))
				}
			}
		}
		Comment("acc += float(sum - 8·Σq_x) · (d_w · d_x)")
		for h := range 2 {
			VCVTPH2PS(M(WS, 16*h), lo[h])
		}
		for b := range nb {
			VPBROADCASTD(M(XM, 8*b+4), xl)
			VBROADCASTSS(M(XM, 8*b), xh)
			for h := range 2 {
				VPMADDWD(onesW, iacc(h, b), iacc(h, b))
				VPADDD(xl, iacc(h, b), iacc(h, b))
				VCVTDQ2PS(iacc(h, b), iacc(h, b))
				VMULPS(xh, lo[h], tp)
				fma(tp, h, b)
			}
		}
		pfs.advance()
	}
	ADDQ(U32(blockBytes), WS)
	ADDQ(U32(blockBytes), WQ)
	ADDQ(XS, Xp)
	ADDQ(reg.R10, XM)
	DECQ(N)
	JNZ(LabelRef("block"))

	storeY(nb, 32, func(h, b int) reg.VecPhysical {
		if regAcc {
			return facc(h, b)
		}
		VMOVUPS(fmem(h, b), reg.Y0)
		return reg.Y0
	})
}

// q8Regs are the registers of the AVX2 Q8_0 kernels' block loop (genQ2,
// genQ2P): the group's scales WS and quants WQ (signed bytes: the AVX2
// layout of packTile), the activations' quants Xp and meta XM, the weight
// magnitudes a of the two 8-row halves (and at the block end their scales),
// the activation broadcast xb, the product tp, the int16 ones (a register
// or memory), and the int32 block sum of (half h, row b).
type q8Regs struct {
	WS, WQ, Xp, XM reg.Register
	a              [2]reg.VecPhysical
	xb, tp         reg.VecPhysical
	ones           Op
	iacc           func(h, b int) reg.VecPhysical
}

// step emits step s of a block (k = 4s … 4s+3) for activation rows b < nb:
// VPMADDUBSW takes unsigned × signed bytes, |w| · (x·sign(w)) = w·x, and a
// pair of such products (≤ 2·128·127) never saturates int16; VPMADDWD by
// ones widens them into the block sums. VPABSB and VPSIGNB read the
// weights from memory (L1), which leaves no weight register to fill and
// saves the loads and moves of one (~4 % on Zen 3).
func (q q8Regs) step(s, nb int) {
	Commentf("k = 4·%d … 4·%d+3 of the block", s, s)
	for h := range 2 {
		VPABSB(M(q.WQ, 128*s+32*h), q.a[h])
	}
	for b := range nb {
		VPBROADCASTD(M(q.Xp, 32*b+4*s), q.xb)
		for h := range 2 {
			VPSIGNB(M(q.WQ, 128*s+32*h), q.xb, q.tp)
			VPMADDUBSW(q.tp, q.a[h], q.tp)
			if s == 0 {
				VPMADDWD(q.ones, q.tp, q.iacc(h, b))
			} else {
				VPMADDWD(q.ones, q.tp, q.tp)
				VPADDD(q.tp, q.iacc(h, b), q.iacc(h, b))
			}
		}
	}
}

// blockEnd emits the block's f32 update: fma(t, h, b) adds t·float(sum) to
// the accumulator of (half h, row b), t = d_w · d_x.
func (q q8Regs) blockEnd(nb int, fma func(t reg.VecPhysical, h, b int)) {
	Comment("acc += float(sum) · (d_w · d_x)")
	for h := range 2 {
		VCVTPH2PS(M(q.WS, 16*h), q.a[h])
	}
	for b := range nb {
		VBROADCASTSS(M(q.XM, 8*b), q.xb)
		for h := range 2 {
			VMULPS(q.xb, q.a[h], q.tp)
			VCVTDQ2PS(q.iacc(h, b), q.iacc(h, b))
			fma(q.tp, h, b)
		}
	}
}

// ---------------------------------------------------------------------------
// Q8_0 × Q8_0-quantized activations, AVX2, for large batches (prefill).

// q2PMinNB … q2PMaxNB are the numbers of activation rows per AVX2 Q8_0
// prefill kernel call (mirrored in matmul_amd64.go): a batch of more than
// 64 rows split into tiles of at most 5 has tiles of 4 or 5 rows.
const (
	q2PMinNB = 4
	q2PMaxNB = 5
)

// genQ2P is genQ2 for Q8_0 without prefetching (a blocked prefill sweep
// reads its weights from L2) and with up to 5 activation rows per call: at
// 5 rows the 2·5 int32 block sums, the weights and their magnitudes of one
// step, the broadcast, the product and the int16 ones fill 15 of the 16 ymm
// registers (6 rows, with the ones from memory, measured ~6 % slower). Each
// weight load then serves 5 rows instead of 4 (~4 % faster on Zen 3; an 8-row × 6 variant
// with every accumulator in a register measured ~10 % slower, since each
// activation broadcast serves 8 rows instead of 16). The sums are the same
// operations in the same order as genQ2's, so results are bit-identical.
func genQ2P(nb int) {
	const blockBytes = 64 + 8*128
	name := fmt.Sprintf("q8AVX2Px%d", nb)
	TEXT(name, NOSPLIT, "func(ws *byte, wq *byte, x *byte, xm *byte, nblk int, xstride int, y *float32, ystride int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one 16-row group × %d activation rows of y = x·Wᵀ for Q8_0", name, nb),
		"weights, as the q8AVX2x<n> kernels do (the same arguments less the prefetch,",
		"the same sums in the same order), for the cache-blocked sweeps of large",
		"batches: it does not prefetch and serves up to 5 rows per weight load.")
	WS := Load(Param("ws"), reg.RSI)
	WQ := Load(Param("wq"), reg.RDX)
	Xp := Load(Param("x"), reg.RDI)
	XM := Load(Param("xm"), reg.R8)
	N := Load(Param("nblk"), reg.RCX)
	XS := Load(Param("xstride"), reg.R9)
	MOVQ(XS, reg.R10)
	SHRQ(U8(2), reg.R10) // meta stride: 8 bytes per row versus 32 quants
	stack := AllocLocal(2 * nb * 32)
	iacc := func(h, b int) reg.VecPhysical { return Y(h*nb + b) }
	fmem := func(h, b int) Mem { return stack.Offset(32 * (h*nb + b)) }
	a := [2]reg.VecPhysical{Y(2 * nb), Y(2*nb + 1)}
	xb, tp, ones := Y(2*nb+2), Y(2*nb+3), Y(2*nb+4)
	VMOVDQU(onesW, ones)
	Comment("int32 block sums (half h, row b) Y[h*nb+b], f32 accumulators on the stack;",
		"a: weight magnitudes of the two 8-row halves; xb activation broadcast, tp product, then int16 ones.")
	VPXOR(reg.Y0, reg.Y0, reg.Y0)
	for h := range 2 {
		for b := range nb {
			VMOVUPS(reg.Y0, fmem(h, b))
		}
	}
	Label("block")
	q := q8Regs{WS: WS, WQ: WQ, Xp: Xp, XM: XM, a: a, xb: xb, tp: tp, ones: ones, iacc: iacc}
	for s := range 8 {
		q.step(s, nb)
	}
	q.blockEnd(nb, func(t reg.VecPhysical, h, b int) {
		VFMADD213PS(fmem(h, b), t, iacc(h, b))
		VMOVUPS(iacc(h, b), fmem(h, b))
	})
	ADDQ(U32(blockBytes), WS)
	ADDQ(U32(blockBytes), WQ)
	ADDQ(XS, Xp)
	ADDQ(reg.R10, XM)
	DECQ(N)
	JNZ(LabelRef("block"))

	storeY(nb, 32, func(h, b int) reg.VecPhysical {
		VMOVUPS(fmem(h, b), reg.Y0)
		return reg.Y0
	})
}

// ---------------------------------------------------------------------------
// Q8_0 / Q4_0 × one Q8_0-quantized activation row, AVX2, all 32 rows of a tile.

// genQR32 is genQ2(1, q4) for a whole 32-row tile in one call: the four
// 8-row quarters of a step are its four consecutive 32-byte pieces, so the
// call reads the tile front to back (genQ2's two 16-row calls each read
// every other 64-byte line, which streams ~12 % slower from DRAM on Zen 3).
// With one activation row no weight register has to outlive its step: Q8_0
// takes the magnitudes in place after the sign, Q4_0 unpacks one quarter at
// a time, so 4 f32 accumulators (Y0-Y3), 4 int block sums (Y4-Y7) and the
// step's registers fit the 16 ymm registers. The sums are the same
// operations in the same order as genQ2's, so results are bit-identical.
func genQR32(q4 bool) {
	t, blockBytes, steps := "q8", 64+8*128, 8
	if q4 {
		t, blockBytes, steps = "q4", 64+4*128, 4
	}
	name := t + "AVX2r32x1"
	TEXT(name, NOSPLIT, "func(w *byte, x *byte, xm *byte, nblk int, xstride int, y *float32, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one 32-row tile × 1 activation row of y = x·Wᵀ for %s", name, map[bool]string{false: "Q8_0", true: "Q4_0"}[q4]),
		"weights packed by packTile (w at the tile: each block's 32 scales, then its",
		"quants) and an activation row quantized by quantizeRow (x, xm at block 0's",
		"quants and meta; the next block's xstride and xstride/4 bytes further), as",
		fmt.Sprintf("%sAVX2x1 computes each 16-row half. Meanwhile it prefetches pfn bytes at pf", t),
		"(the next tile).")
	W := Load(Param("w"), reg.RSI)
	Xp := Load(Param("x"), reg.RDI)
	XM := Load(Param("xm"), reg.R8)
	N := Load(Param("nblk"), reg.RCX)
	XS := Load(Param("xstride"), reg.R9)
	MOVQ(XS, reg.R10)
	SHRQ(U8(2), reg.R10) // meta stride: 8 bytes per row versus 32 quants
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)
	facc := func(q int) reg.VecPhysical { return Y(q) }
	iacc := func(q int) reg.VecPhysical { return Y(4 + q) }
	for q := range 4 {
		VPXOR(facc(q), facc(q), facc(q))
	}
	if q4 {
		MOVL(U32(0x0f0f0f0f), reg.EAX)
		VMOVD(reg.EAX, reg.X15)
		VPBROADCASTD(reg.X15, reg.Y15)
	} else {
		VMOVDQU(onesW, reg.Y15)
	}
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: (blockBytes + 63) / 64, n: steps}
	pfs.init()
	Label("block")
	if !q4 {
		Comment("Y8-Y11 the quarters' signed weights (then their magnitudes), Y12 activation",
			"broadcast, Y13 product, Y15 int16 ones.")
		xb, tp := reg.Y12, reg.Y13
		for s := range steps {
			Commentf("k = 4·%d … 4·%d+3 of the block", s, s)
			pfs.at(s)
			VPBROADCASTD(M(Xp, 4*s), xb)
			for q := range 4 {
				w := Y(8 + q)
				VMOVDQU(M(W, 64+128*s+32*q), w)
				VPSIGNB(w, xb, tp)
				VPABSB(w, w)
				VPMADDUBSW(tp, w, tp)
				if s == 0 {
					VPMADDWD(reg.Y15, tp, iacc(q))
				} else {
					VPMADDWD(reg.Y15, tp, tp)
					VPADDD(tp, iacc(q), iacc(q))
				}
			}
		}
		Comment("acc += float(sum) · (d_w · d_x)")
		VBROADCASTSS(M(XM, 0), xb)
		for q := range 4 {
			VCVTPH2PS(M(W, 16*q), Y(8+q))
			VMULPS(xb, Y(8+q), tp)
			VCVTDQ2PS(iacc(q), iacc(q))
			VFMADD231PS(tp, iacc(q), facc(q))
		}
	} else {
		Comment("int16 block sums Y4-Y7; Y8/Y9 one quarter's low and high nibbles, Y10/Y11",
			"activation broadcasts, Y12 product, Y15 0x0f bytes.")
		lo, hi := reg.Y8, reg.Y9
		xl, xh, tp := reg.Y10, reg.Y11, reg.Y12
		for m := range steps {
			Commentf("k = 4·%d … 4·%d+3 (low nibbles) and 16+4·%d … 16+4·%d+3 (high nibbles)", m, m, m, m)
			pfs.at(m)
			VPBROADCASTD(M(Xp, 4*m), xl)
			VPBROADCASTD(M(Xp, 16+4*m), xh)
			for q := range 4 {
				VMOVDQU(M(W, 64+128*m+32*q), hi)
				VPAND(reg.Y15, hi, lo)
				VPSRLW(U8(4), hi, hi)
				VPAND(reg.Y15, hi, hi)
				if m == 0 {
					VPMADDUBSW(xl, lo, iacc(q))
				} else {
					VPMADDUBSW(xl, lo, tp)
					VPADDW(tp, iacc(q), iacc(q))
				}
				VPMADDUBSW(xh, hi, tp)
				VPADDW(tp, iacc(q), iacc(q))
			}
		}
		Comment("acc += float(sum - 8·Σq_x) · (d_w · d_x)")
		VPBROADCASTD(M(XM, 4), xl)
		VBROADCASTSS(M(XM, 0), xh)
		for q := range 4 {
			VCVTPH2PS(M(W, 16*q), lo)
			VPMADDWD(onesW, iacc(q), iacc(q))
			VPADDD(xl, iacc(q), iacc(q))
			VCVTDQ2PS(iacc(q), iacc(q))
			VMULPS(xh, lo, tp)
			VFMADD231PS(tp, iacc(q), facc(q))
		}
	}
	pfs.advance()
	ADDQ(U32(blockBytes), W)
	ADDQ(XS, Xp)
	ADDQ(reg.R10, XM)
	DECQ(N)
	JNZ(LabelRef("block"))

	Yp := Load(Param("y"), reg.RAX)
	for q := range 4 {
		VMOVUPS(facc(q), M(Yp, 32*q))
	}
	VZEROUPPER()
	RET()
}

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
		fmt.Sprintf("%s weights packed by packQ (%d bytes per 32×32 block) and activations", map[bool]string{false: "Q8_0", true: "Q4_0"}[q4], blockBytes),
		"quantized by quantQ8 (blocked layout): for b < nb, r < 32,",
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

	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range nb {
		VMOVUPS(facc(0, b), M(Yp, 0))
		VMOVUPS(facc(1, b), M(Yp, 64))
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	VZEROUPPER()
	RET()
}

// ---------------------------------------------------------------------------
// AVX2 fallbacks: one 16-row group per call.

func genQ2(q4 bool) {
	t, blockBytes := "q8", 64+8*128
	if q4 {
		t, blockBytes = "q4", 64+4*128
	}
	name := t + "AVX2"
	TEXT(name, NOSPLIT, "func(ws *byte, wq *byte, x *byte, xm *byte, nblk int, xstride int, y *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is the AVX2 %s kernel for one 16-row group of a packed tile and one", name, map[bool]string{false: "Q8_0", true: "Q4_0"}[q4]),
		"activation row: ws points at the group's scales, wq at its first quants",
		fmt.Sprintf("(blocks are %d bytes apart); x/xm at the row's quants/meta. y gets 16 floats.", blockBytes))
	if !q4 {
		Comment("VPMADDUBSW saturates at 2·255·127, so Q8_0 uses |w|·sign(x, w) instead of the offset.")
	}
	WS := Load(Param("ws"), reg.RSI)
	WQ := Load(Param("wq"), reg.RDX)
	Xp := Load(Param("x"), reg.RDI)
	XM := Load(Param("xm"), reg.R8)
	N := Load(Param("nblk"), reg.RCX)
	XS := Load(Param("xstride"), reg.R9)
	MOVQ(XS, reg.R10)
	SHRQ(U8(2), reg.R10)
	// Y0/Y1 f32 accumulators (rows 0-7, 8-15), Y2/Y3 int32 sums, Y14 int16 ones, Y15 byte constant.
	VPXOR(reg.Y0, reg.Y0, reg.Y0)
	VPXOR(reg.Y1, reg.Y1, reg.Y1)
	MOVL(U32(0x00010001), reg.EAX)
	VMOVD(reg.EAX, reg.X14)
	VPBROADCASTD(reg.X14, reg.Y14)
	if q4 {
		MOVL(U32(0x0f0f0f0f), reg.EAX)
	} else {
		MOVL(U32(0x80808080), reg.EAX)
	}
	VMOVD(reg.EAX, reg.X15)
	VPBROADCASTD(reg.X15, reg.Y15)
	Label("block")
	if q4 {
		VPBROADCASTD(M(XM, 4), reg.Y2)
		VMOVDQA(reg.Y2, reg.Y3)
		for m := range 4 {
			VPBROADCASTD(M(Xp, 4*m), reg.Y6)
			VPBROADCASTD(M(Xp, 4*(m+4)), reg.Y7)
			for h := range 2 {
				acc := Y(2 + h)
				VMOVDQU(M(WQ, 128*m+32*h), reg.Y4)
				VPAND(reg.Y15, reg.Y4, reg.Y5)
				VPMADDUBSW(reg.Y6, reg.Y5, reg.Y5)
				VPMADDWD(reg.Y14, reg.Y5, reg.Y5)
				VPADDD(reg.Y5, acc, acc)
				VPSRLW(U8(4), reg.Y4, reg.Y4)
				VPAND(reg.Y15, reg.Y4, reg.Y4)
				VPMADDUBSW(reg.Y7, reg.Y4, reg.Y4)
				VPMADDWD(reg.Y14, reg.Y4, reg.Y4)
				VPADDD(reg.Y4, acc, acc)
			}
		}
	} else {
		VPXOR(reg.Y2, reg.Y2, reg.Y2)
		VPXOR(reg.Y3, reg.Y3, reg.Y3)
		for s := range 8 {
			VPBROADCASTD(M(Xp, 4*s), reg.Y6)
			for h := range 2 {
				acc := Y(2 + h)
				VMOVDQU(M(WQ, 128*s+32*h), reg.Y4)
				VPXOR(reg.Y15, reg.Y4, reg.Y4) // signed w
				VPABSB(reg.Y4, reg.Y5)
				VPSIGNB(reg.Y4, reg.Y6, reg.Y7)
				VPMADDUBSW(reg.Y7, reg.Y5, reg.Y5)
				VPMADDWD(reg.Y14, reg.Y5, reg.Y5)
				VPADDD(reg.Y5, acc, acc)
			}
		}
	}
	VCVTPH2PS(M(WS, 0), reg.Y10)
	VCVTPH2PS(M(WS, 16), reg.Y11)
	VBROADCASTSS(M(XM, 0), reg.Y12)
	VMULPS(reg.Y12, reg.Y10, reg.Y10)
	VMULPS(reg.Y12, reg.Y11, reg.Y11)
	VCVTDQ2PS(reg.Y2, reg.Y2)
	VCVTDQ2PS(reg.Y3, reg.Y3)
	VFMADD231PS(reg.Y10, reg.Y2, reg.Y0)
	VFMADD231PS(reg.Y11, reg.Y3, reg.Y1)
	ADDQ(U32(blockBytes), WS)
	ADDQ(U32(blockBytes), WQ)
	ADDQ(XS, Xp)
	ADDQ(reg.R10, XM)
	DECQ(N)
	JNZ(LabelRef("block"))
	Yp := Load(Param("y"), reg.RAX)
	VMOVUPS(reg.Y0, M(Yp, 0))
	VMOVUPS(reg.Y1, M(Yp, 32))
	VZEROUPPER()
	RET()
}

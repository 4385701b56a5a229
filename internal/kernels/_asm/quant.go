// Activation quantization to Q8_0 in the blocked layout the int8 matmul
// kernels read.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ---------------------------------------------------------------------------
// Activation quantization to Q8_0, AVX-512.

func genQuant512() {
	TEXT("quantQ8AVX512", NOSPLIT, "func(x *float32, nblk int, q *byte, qstride int, m *byte, mstride int, off int)")
	Pragma("noescape")
	Doc("quantQ8AVX512 quantizes nblk blocks of 32 floats of x to Q8_0 exactly as",
		"dtype.Quantize does (d = amax/127 rounded to f16, q = round-half-away(x·(1/d))).",
		"Block i writes its 32 quants to q[i*qstride:], and to m[i*mstride:] the",
		"float32 scale d followed by the int32 -off·Σq.")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Q := Load(Param("q"), reg.RDI)
	QS := Load(Param("qstride"), reg.R9)
	Mp := Load(Param("m"), reg.R8)
	MS := Load(Param("mstride"), reg.R10)
	OFF := Load(Param("off"), reg.R11)
	NEGQ(OFF)
	// Constants: Z31 |x| mask, Z30 sign mask, Z29 0.5, Z28 1.0, X15 127.0, X14 zero.
	MOVL(U32(0x7fffffff), reg.EAX)
	VPBROADCASTD(reg.EAX, reg.Z31)
	MOVL(U32(0x80000000), reg.EAX)
	VPBROADCASTD(reg.EAX, reg.Z30)
	MOVL(U32(0x3f000000), reg.EAX)
	VPBROADCASTD(reg.EAX, reg.Z29)
	MOVL(U32(0x3f800000), reg.EAX)
	VPBROADCASTD(reg.EAX, reg.Z28)
	MOVL(U32(0x42fe0000), reg.EAX)
	VMOVD(reg.EAX, reg.X15)
	VXORPS(reg.X14, reg.X14, reg.X14)
	Label("block")
	VMOVUPS(M(Xp, 0), reg.Z0)
	VMOVUPS(M(Xp, 64), reg.Z1)
	Comment("amax of the block, in every lane of X2")
	VANDPS(reg.Z31, reg.Z0, reg.Z2)
	VANDPS(reg.Z31, reg.Z1, reg.Z3)
	VMAXPS(reg.Z3, reg.Z2, reg.Z2)
	VEXTRACTF32X8(U8(1), reg.Z2, reg.Y3)
	VMAXPS(reg.Y3, reg.Y2, reg.Y2)
	VEXTRACTF128(U8(1), reg.Y2, reg.X3)
	VMAXPS(reg.X3, reg.X2, reg.X2)
	VPERMILPS(U8(0x4e), reg.X2, reg.X3)
	VMAXPS(reg.X3, reg.X2, reg.X2)
	VPERMILPS(U8(0xb1), reg.X2, reg.X3)
	VMAXPS(reg.X3, reg.X2, reg.X2)
	Comment("d = amax/127; store d rounded to f16 and back; id = d != 0 ? 1/d : 0")
	VDIVSS(reg.X15, reg.X2, reg.X4)
	VCVTPS2PH(U8(0), reg.X4, reg.X5)
	VCVTPH2PS(reg.X5, reg.X5)
	VMOVSS(reg.X5, M(Mp, 0))
	VDIVSS(reg.X4, reg.X28, reg.X6)
	VCMPSS(U8(4), reg.X14, reg.X4, reg.X7)
	VANDPS(reg.X7, reg.X6, reg.X6)
	VBROADCASTSS(reg.X6, reg.Z6)
	for i, v := range []reg.VecPhysical{reg.Z0, reg.Z1} {
		Commentf("quants %d…%d: round half away from zero of x·id", 16*i, 16*i+15)
		t, f, s := Z(8+i), Z(10+i), Z(12+i)
		k := []reg.OpmaskPhysical{reg.K1, reg.K2}[i]
		VMULPS(reg.Z6, v, v)
		VRNDSCALEPS(U8(0x0b), v, t) // truncate, no precision exception
		VSUBPS(t, v, f)
		VANDPS(reg.Z31, f, f)
		VCMPPS(U8(0x1d), reg.Z29, f, k) // |frac| >= 0.5
		VANDPS(reg.Z30, v, s)
		VORPS(reg.Z28, s, s) // ±1
		VADDPS(s, t, k, t)
		VCVTTPS2DQ(t, t)
		VPMOVDB(t, M(Q, 16*i))
	}
	Comment("corr = -off · Σq")
	VPADDD(reg.Z9, reg.Z8, reg.Z8)
	VEXTRACTI32X8(U8(1), reg.Z8, reg.Y9)
	VPADDD(reg.Y9, reg.Y8, reg.Y8)
	VEXTRACTI128(U8(1), reg.Y8, reg.X9)
	VPADDD(reg.X9, reg.X8, reg.X8)
	VPSHUFD(U8(0x4e), reg.X8, reg.X9)
	VPADDD(reg.X9, reg.X8, reg.X8)
	VPSHUFD(U8(0xb1), reg.X8, reg.X9)
	VPADDD(reg.X9, reg.X8, reg.X8)
	VMOVD(reg.X8, reg.EAX)
	IMULL(reg.R11L, reg.EAX)
	MOVL(reg.EAX, M(Mp, 4))
	ADDQ(U8(128), Xp)
	ADDQ(QS, Q)
	ADDQ(MS, Mp)
	DECQ(N)
	JNZ(LabelRef("block"))
	VZEROUPPER()
	RET()
}

// permPack is the VPERMD index that puts the dwords left lane-interleaved by
// VPACKSSDW + VPACKSSWB back in element order.
var permPack Mem

func genQuant2() {
	permPack = GLOBL("perm_pack", RODATA|NOPTR)
	for i, v := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
		DATA(4*i, U32(v))
	}
	TEXT("quantQ8AVX2", NOSPLIT, "func(x *float32, nblk int, q *byte, qstride int, m *byte, mstride int, off int)")
	Pragma("noescape")
	Doc("quantQ8AVX2 is quantQ8AVX512 on AVX2: the same quants and meta, bit for bit.")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Q := Load(Param("q"), reg.RDI)
	QS := Load(Param("qstride"), reg.R9)
	Mp := Load(Param("m"), reg.R8)
	MS := Load(Param("mstride"), reg.R10)
	OFF := Load(Param("off"), reg.R11)
	NEGQ(OFF)
	// Constants: Y15 |x| mask, Y14 sign mask, Y13 0.5, Y12 1.0, X11 127.0, X10 zero,
	// Y9 the pack permutation.
	bcast := func(v uint32, y reg.VecPhysical) {
		MOVL(U32(v), reg.EAX)
		VMOVD(reg.EAX, y.AsX())
		VPBROADCASTD(y.AsX(), y)
	}
	bcast(0x7fffffff, reg.Y15)
	bcast(0x80000000, reg.Y14)
	bcast(0x3f000000, reg.Y13)
	bcast(0x3f800000, reg.Y12)
	MOVL(U32(0x42fe0000), reg.EAX)
	VMOVD(reg.EAX, reg.X11)
	VXORPS(reg.X10, reg.X10, reg.X10)
	VMOVDQU(permPack, reg.Y9)
	Label("block")
	for i := range 4 {
		VMOVUPS(M(Xp, 32*i), Y(i))
	}
	Comment("amax of the block, in every lane of X4")
	VANDPS(reg.Y15, reg.Y0, reg.Y4)
	VANDPS(reg.Y15, reg.Y1, reg.Y5)
	VANDPS(reg.Y15, reg.Y2, reg.Y6)
	VANDPS(reg.Y15, reg.Y3, reg.Y7)
	VMAXPS(reg.Y5, reg.Y4, reg.Y4)
	VMAXPS(reg.Y7, reg.Y6, reg.Y6)
	VMAXPS(reg.Y6, reg.Y4, reg.Y4)
	VEXTRACTF128(U8(1), reg.Y4, reg.X5)
	VMAXPS(reg.X5, reg.X4, reg.X4)
	VPERMILPS(U8(0x4e), reg.X4, reg.X5)
	VMAXPS(reg.X5, reg.X4, reg.X4)
	VPERMILPS(U8(0xb1), reg.X4, reg.X5)
	VMAXPS(reg.X5, reg.X4, reg.X4)
	Comment("d = amax/127; store d rounded to f16 and back; id = d != 0 ? 1/d : 0")
	VDIVSS(reg.X11, reg.X4, reg.X4)
	VCVTPS2PH(U8(0), reg.X4, reg.X5)
	VCVTPH2PS(reg.X5, reg.X5)
	VMOVSS(reg.X5, M(Mp, 0))
	VDIVSS(reg.X4, reg.X12, reg.X6)
	VCMPSS(U8(4), reg.X10, reg.X4, reg.X7)
	VANDPS(reg.X7, reg.X6, reg.X6)
	VBROADCASTSS(reg.X6, reg.Y6)
	q8RoundPack(Q)
	Comment("corr = -off · Σq")
	sumQ32()
	VMOVD(reg.X0, reg.EAX)
	IMULL(reg.R11L, reg.EAX)
	MOVL(reg.EAX, M(Mp, 4))
	ADDQ(U8(128), Xp)
	ADDQ(QS, Q)
	ADDQ(MS, Mp)
	DECQ(N)
	JNZ(LabelRef("block"))
	VZEROUPPER()
	RET()
}

// q8RoundPack ends a Q8 block quantizer: the 32 floats in Y0–Y3 times the
// broadcast inverse scale in Y6, rounded half away from zero (Y12–Y15 hold
// the ±1, sign, abs and 0.5 constants), as int32 in Y0–Y3 and packed to 32
// bytes at q (Y9: the lane-interleave permutation).
func q8RoundPack(q reg.Register) {
	for i := range 4 {
		v, t, f := Y(i), Y(4), Y(5)
		Commentf("quants %d…%d: round half away from zero of x·id", 8*i, 8*i+7)
		VMULPS(reg.Y6, v, v)
		VROUNDPS(U8(0x0b), v, t) // truncate, no precision exception
		VSUBPS(t, v, f)
		VANDPS(reg.Y15, f, f)
		VCMPPS(U8(0x1d), reg.Y13, f, f) // |frac| >= 0.5
		VANDPS(reg.Y14, v, v)
		VORPS(reg.Y12, v, v) // ±1
		VANDPS(f, v, v)
		VADDPS(v, t, v)
		VCVTTPS2DQ(v, v)
	}
	Comment("pack to bytes (exact: every quant is within ±127), undo the lane interleave")
	VPACKSSDW(reg.Y1, reg.Y0, reg.Y4)
	VPACKSSDW(reg.Y3, reg.Y2, reg.Y5)
	VPACKSSWB(reg.Y5, reg.Y4, reg.Y4)
	VPERMD(reg.Y4, reg.Y9, reg.Y4)
	VMOVDQU(reg.Y4, M(q, 0))
}

// sumQ32 leaves the sum of the 32 int32 quants of Y0–Y3 in X0's low lane.
func sumQ32() {
	VPADDD(reg.Y1, reg.Y0, reg.Y0)
	VPADDD(reg.Y3, reg.Y2, reg.Y2)
	VPADDD(reg.Y2, reg.Y0, reg.Y0)
	VEXTRACTI128(U8(1), reg.Y0, reg.X1)
	VPADDD(reg.X1, reg.X0, reg.X0)
	VPSHUFD(U8(0x4e), reg.X0, reg.X1)
	VPADDD(reg.X1, reg.X0, reg.X0)
	VPSHUFD(U8(0xb1), reg.X0, reg.X1)
	VPADDD(reg.X1, reg.X0, reg.X0)
}

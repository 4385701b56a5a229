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

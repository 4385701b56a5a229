package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func genOps() {
	initExpConsts()
	genSiLUMul512()
	genF32ToF16512()
}

func genSiLUMul512() {
	TEXT("siluMulAVX512", NOSPLIT, "func(out *float32, gate *float32, up *float32, n int)")
	Pragma("noescape")
	Doc("siluMulAVX512 sets out[i] = gate[i] / (1 + exp(-gate[i])) · up[i] for i < n",
		"(n a positive multiple of 16), with a polynomial exp accurate to about 2 ulp.")
	O := Load(Param("out"), reg.RDI)
	G := Load(Param("gate"), reg.RSI)
	U := Load(Param("up"), reg.RDX)
	N := Load(Param("n"), reg.RCX)
	VBROADCASTSS(expConsts.one, reg.Z31)
	VPXORD(reg.Z30, reg.Z30, reg.Z30)
	Label("loop")
	for i := range 2 {
		g, e := Z(4*i), Z(4*i+1)
		Commentf("elements %d…%d", 16*i, 16*i+15)
		if i == 1 {
			CMPQ(N, U8(16))
			JE(LabelRef("last"))
		}
		VMOVUPS(M(G, 64*i), g)
		VSUBPS(g, reg.Z30, e) // -g
		vexp(e, Z(4*i+2), Z(4*i+3))
		VADDPS(reg.Z31, e, e)
		VDIVPS(e, g, g)
		VMULPS(M(U, 64*i), g, g)
		VMOVUPS(g, M(O, 64*i))
	}
	ADDQ(U8(128), G)
	ADDQ(U8(128), U)
	ADDQ(U8(128), O)
	SUBQ(U8(32), N)
	JNZ(LabelRef("loop"))
	Label("last")
	VZEROUPPER()
	RET()
}

func genF32ToF16512() {
	TEXT("f32ToF16AVX512", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Pragma("noescape")
	Doc("f32ToF16AVX512 converts n floats (n a positive multiple of 16) to IEEE",
		"half precision, rounding to nearest even (VCVTPS2PH).")
	D := Load(Param("dst"), reg.RDI)
	S := Load(Param("src"), reg.RSI)
	N := Load(Param("n"), reg.RCX)
	Label("loop")
	VMOVUPS(M(S, 0), reg.Z0)
	VCVTPS2PH(U8(0), reg.Z0, M(D, 0))
	ADDQ(U8(64), S)
	ADDQ(U8(32), D)
	SUBQ(U8(16), N)
	JNZ(LabelRef("loop"))
	VZEROUPPER()
	RET()
}

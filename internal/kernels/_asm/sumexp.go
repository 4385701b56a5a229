// Σ exp(x[i] - m) over a float32 vector, accumulated in float64: the
// softmax denominator of a row of logits (the runner-up probabilities of
// pre-drafting).
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// genSumExp512: 32 elements per iteration; each 16-lane exp is widened to
// two 8-lane float64 vectors, added to accumulators Z0…Z3.
func genSumExp512() {
	TEXT("sumExpAVX512", NOSPLIT, "func(x *float32, n int, m float32) float64")
	Pragma("noescape")
	Doc("sumExpAVX512 returns Σ exp(x[i] - m) for i < n (n a positive multiple of 32)",
		"in float64, with the f32 polynomial exp of vexp (about 2 ulp): terms below",
		"exp(-87.3), NaNs included, add about 1e-38 each.")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("n"), reg.RCX)
	VBROADCASTSS(paramAddr("m"), reg.Z31)
	for i := range 4 {
		VXORPD(Z(i), Z(i), Z(i))
	}
	Label("loop")
	for i := range 2 {
		x, n, t := Z(4+3*i), Z(5+3*i), Z(6+3*i)
		VMOVUPS(M(Xp, 64*i), x)
		VSUBPS(reg.Z31, x, x) // x - m
		vexp(x, n, t)
		VEXTRACTF32X8(U8(1), x, Y(5+3*i))
		VCVTPS2PD(Y(4+3*i), t)
		VCVTPS2PD(Y(5+3*i), n)
		VADDPD(t, Z(2*i), Z(2*i))
		VADDPD(n, Z(2*i+1), Z(2*i+1))
	}
	ADDQ(U8(128), Xp)
	SUBQ(U8(32), N)
	JNZ(LabelRef("loop"))
	Comment("(Z0+Z1)+(Z2+Z3), then the 8 lanes")
	VADDPD(reg.Z1, reg.Z0, reg.Z0)
	VADDPD(reg.Z3, reg.Z2, reg.Z2)
	VADDPD(reg.Z2, reg.Z0, reg.Z0)
	VEXTRACTF64X4(U8(1), reg.Z0, reg.Y1)
	VADDPD(reg.Y1, reg.Y0, reg.Y0)
	returnSumY0PD()
}

// genSumExp2 is genSumExp512 on AVX2: 8 elements per iteration, widened to
// two 4-lane float64 vectors added to Y0 and Y1.
func genSumExp2() {
	TEXT("sumExpAVX2", NOSPLIT, "func(x *float32, n int, m float32) float64")
	Pragma("noescape")
	Doc("sumExpAVX2 is sumExpAVX512 on AVX2, for n a positive multiple of 8.")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("n"), reg.RCX)
	VBROADCASTSS(paramAddr("m"), reg.Y15)
	VXORPD(reg.Y0, reg.Y0, reg.Y0)
	VXORPD(reg.Y1, reg.Y1, reg.Y1)
	Label("loop")
	VMOVUPS(M(Xp, 0), reg.Y4)
	VSUBPS(reg.Y15, reg.Y4, reg.Y4) // x - m
	vexp2(reg.Y4, reg.Y5, reg.Y6, reg.Y7)
	VEXTRACTF128(U8(1), reg.Y4, reg.X5)
	VCVTPS2PD(reg.X4, reg.Y6)
	VCVTPS2PD(reg.X5, reg.Y7)
	VADDPD(reg.Y6, reg.Y0, reg.Y0)
	VADDPD(reg.Y7, reg.Y1, reg.Y1)
	ADDQ(U8(32), Xp)
	SUBQ(U8(8), N)
	JNZ(LabelRef("loop"))
	Comment("Y0+Y1, then the 4 lanes")
	VADDPD(reg.Y1, reg.Y0, reg.Y0)
	returnSumY0PD()
}

// paramAddr is the stack address of the named argument.
func paramAddr(name string) Mem {
	c, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return c.Addr
}

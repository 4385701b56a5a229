package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func genOps() {
	initExpConsts()
	genSiLUMul512()
	genF32ToF16512()
	genSumExp512() // sumexp.go
	expMax = ConstData("exp_max", U32(math.Float32bits(100)))
	genSiLUMul2()
	genF32ToF162()
	genSumExp2()
	genSumSquares2()
	genScaleMul2()
	genRoPE2()
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

// expMax clamps the argument of vexp2 from above: exp(100) is +Inf in f32,
// and 2^n of the clamped input is still representable as two factors.
var expMax Mem

// vexp2 is vexp on AVX2 (no embedded broadcasts, no VSCALEFPS): x = exp(x),
// with n, t, c temporaries. 2^n is applied as two exact power-of-two
// factors, so large inputs overflow to +Inf as with VSCALEFPS.
func vexp2(x, n, t, c reg.VecPhysical) {
	VBROADCASTSS(expConsts.min, c)
	VMAXPS(c, x, x)
	VBROADCASTSS(expMax, c)
	VMINPS(c, x, x)
	VBROADCASTSS(expConsts.log2e, c)
	VMULPS(c, x, n)
	VROUNDPS(U8(0), n, n) // n = round(x·log2e)
	VBROADCASTSS(expConsts.c1, c)
	VFNMADD231PS(c, n, x) // r = x - n·c1
	VBROADCASTSS(expConsts.c2, c)
	VFNMADD231PS(c, n, x) //   - n·c2
	VBROADCASTSS(expConsts.p[0], t)
	for _, p := range expConsts.p[1:] {
		VBROADCASTSS(p, c)
		VFMADD213PS(c, x, t) // t = t·r + p
	}
	VBROADCASTSS(expConsts.one, c)
	VFMADD213PS(c, x, t) // t = t·r + 1
	VFMADD213PS(c, x, t) // t = t·r + 1
	Comment("x = t · 2^(n>>1) · 2^(n - n>>1); c holds 1.0, whose bits are 127<<23")
	VCVTPS2DQ(n, n)
	VPSRAD(U8(1), n, x)
	VPSUBD(x, n, n)
	VPSLLD(U8(23), x, x)
	VPADDD(c, x, x)
	VPSLLD(U8(23), n, n)
	VPADDD(c, n, n)
	VMULPS(x, t, t)
	VMULPS(n, t, x)
}

func genSiLUMul2() {
	TEXT("siluMulAVX2", NOSPLIT, "func(out *float32, gate *float32, up *float32, n int)")
	Pragma("noescape")
	Doc("siluMulAVX2 is siluMulAVX512 on AVX2, for n a positive multiple of 8.")
	O := Load(Param("out"), reg.RDI)
	G := Load(Param("gate"), reg.RSI)
	U := Load(Param("up"), reg.RDX)
	N := Load(Param("n"), reg.RCX)
	VXORPS(reg.Y15, reg.Y15, reg.Y15)
	Label("loop")
	for i := range 2 {
		g, e := Y(5*i), Y(5*i+1)
		Commentf("elements %d…%d", 8*i, 8*i+7)
		if i == 1 {
			CMPQ(N, U8(8))
			JE(LabelRef("last"))
		}
		VMOVUPS(M(G, 32*i), g)
		VSUBPS(g, reg.Y15, e) // -g
		vexp2(e, Y(5*i+2), Y(5*i+3), Y(5*i+4))
		VADDPS(Y(5*i+4), e, e) // Y(5i+4) holds 1.0 after vexp2
		VDIVPS(e, g, g)
		VMULPS(M(U, 32*i), g, g)
		VMOVUPS(g, M(O, 32*i))
	}
	ADDQ(U8(64), G)
	ADDQ(U8(64), U)
	ADDQ(U8(64), O)
	SUBQ(U8(16), N)
	JNZ(LabelRef("loop"))
	Label("last")
	VZEROUPPER()
	RET()
}

func genF32ToF162() {
	TEXT("f32ToF16AVX2", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Pragma("noescape")
	Doc("f32ToF16AVX2 is f32ToF16AVX512 on AVX2+F16C, for n a positive multiple of 8.")
	D := Load(Param("dst"), reg.RDI)
	S := Load(Param("src"), reg.RSI)
	N := Load(Param("n"), reg.RCX)
	Label("loop")
	VMOVUPS(M(S, 0), reg.Y0)
	VCVTPS2PH(U8(0), reg.Y0, M(D, 0))
	ADDQ(U8(32), S)
	ADDQ(U8(16), D)
	SUBQ(U8(8), N)
	JNZ(LabelRef("loop"))
	VZEROUPPER()
	RET()
}

func genSumSquares2() {
	TEXT("sumSquaresAVX2", NOSPLIT, "func(x *float32, n int) float64")
	Pragma("noescape")
	Doc("sumSquaresAVX2 is sumSquares16Generic on AVX2 (n a positive multiple of 16),",
		"with the same partial sums in the same order, so the same float64 bits.")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("n"), reg.RCX)
	for i := range 4 {
		VXORPD(Y(i), Y(i), Y(i))
	}
	Label("loop")
	for i := range 4 {
		VCVTPS2PD(M(Xp, 16*i), Y(4+i))
		VFMADD231PD(Y(4+i), Y(4+i), Y(i)) // exact product: 24-bit × 24-bit fits float64
	}
	ADDQ(U8(64), Xp)
	SUBQ(U8(16), N)
	JNZ(LabelRef("loop"))
	Comment("((p0+p1)+(p2+p3)) per lane l, then (l0+l2)+(l1+l3)")
	VADDPD(reg.Y1, reg.Y0, reg.Y0)
	VADDPD(reg.Y3, reg.Y2, reg.Y2)
	VADDPD(reg.Y2, reg.Y0, reg.Y0)
	returnSumY0PD()
}

func genScaleMul2() {
	TEXT("scaleMulAVX2", NOSPLIT, "func(out *float32, x *float32, w *float32, scale float32, n int)")
	Pragma("noescape")
	Doc("scaleMulAVX2 sets out[i] = x[i] * scale * w[i] (two f32 roundings, as Go",
		"evaluates it) for i < n, n a positive multiple of 8.")
	O := Load(Param("out"), reg.RDI)
	Xp := Load(Param("x"), reg.RSI)
	W := Load(Param("w"), reg.RDX)
	N := Load(Param("n"), reg.RCX)
	Load(Param("scale"), reg.X15)
	VBROADCASTSS(reg.X15, reg.Y15)
	Label("loop")
	VMULPS(M(Xp, 0), reg.Y15, reg.Y0)
	VMULPS(M(W, 0), reg.Y0, reg.Y0)
	VMOVUPS(reg.Y0, M(O, 0))
	ADDQ(U8(32), Xp)
	ADDQ(U8(32), W)
	ADDQ(U8(32), O)
	SUBQ(U8(8), N)
	JNZ(LabelRef("loop"))
	VZEROUPPER()
	RET()
}

func genRoPE2() {
	TEXT("ropeAVX2", NOSPLIT, "func(x *float32, c *float32, s *float32, half int, nHeads int)")
	Pragma("noescape")
	Doc("ropeAVX2 is ropeGeneric on AVX2 (half a positive multiple of 8): each of the",
		"nHeads vectors of x, 2·half floats apart, gets x[i], x[i+half] =",
		"x[i]·c[i] - x[i+half]·s[i], x[i+half]·c[i] + x[i]·s[i], every product",
		"and sum rounded to f32 as Go evaluates it.")
	Xp := Load(Param("x"), reg.RDI)
	C := Load(Param("c"), reg.RSI)
	S := Load(Param("s"), reg.RDX)
	H := Load(Param("half"), reg.R8)
	NH := Load(Param("nHeads"), reg.R9)
	hb := reg.R10 // half in bytes
	MOVQ(H, hb)
	SHLQ(U8(2), hb)
	Label("head")
	XORQ(reg.RAX, reg.RAX) // byte offset within the half
	Label("loop")
	VMOVUPS(Mem{Base: Xp, Index: reg.RAX, Scale: 1}, reg.Y0) // a
	LEAQ(Mem{Base: Xp, Index: hb, Scale: 1}, reg.R11)
	VMOVUPS(Mem{Base: reg.R11, Index: reg.RAX, Scale: 1}, reg.Y1) // b
	VMOVUPS(Mem{Base: C, Index: reg.RAX, Scale: 1}, reg.Y2)
	VMOVUPS(Mem{Base: S, Index: reg.RAX, Scale: 1}, reg.Y3)
	VMULPS(reg.Y2, reg.Y0, reg.Y4) // a·c
	VMULPS(reg.Y3, reg.Y1, reg.Y5) // b·s
	VSUBPS(reg.Y5, reg.Y4, reg.Y4)
	VMULPS(reg.Y2, reg.Y1, reg.Y6) // b·c
	VMULPS(reg.Y3, reg.Y0, reg.Y7) // a·s
	VADDPS(reg.Y7, reg.Y6, reg.Y6)
	VMOVUPS(reg.Y4, Mem{Base: Xp, Index: reg.RAX, Scale: 1})
	VMOVUPS(reg.Y6, Mem{Base: reg.R11, Index: reg.RAX, Scale: 1})
	ADDQ(U8(32), reg.RAX)
	CMPQ(reg.RAX, hb)
	JL(LabelRef("loop"))
	LEAQ(Mem{Base: Xp, Index: hb, Scale: 2}, Xp)
	DECQ(NH)
	JNZ(LabelRef("head"))
	VZEROUPPER()
	RET()
}

// returnSumY0PD returns the sum of Y0's four float64 lanes as the function's
// float64 result, in the order (l0+l2)+(l1+l3), and returns.
func returnSumY0PD() {
	VEXTRACTF128(U8(1), reg.Y0, reg.X1)
	VADDPD(reg.X1, reg.X0, reg.X0)
	VPERMILPD(U8(1), reg.X0, reg.X1)
	VADDSD(reg.X1, reg.X0, reg.X0)
	Store(reg.X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// Argmax over a float32 vector.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ---------------------------------------------------------------------------
// Argmax, AVX-512.

func genArgmax512() {
	TEXT("argmaxAVX512", NOSPLIT, "func(x *float32, n int) (best float32, idx int)")
	Pragma("noescape")
	Doc("argmaxAVX512 returns the largest of x[:n] (n a positive multiple of 16)",
		"and its lowest index; NaNs are never chosen (best = -Inf, idx = 0 if all are).")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("n"), reg.RCX)
	// Z0 running max per lane, Z1 its index, Z2 current indices, Z3 16s.
	MOVL(U32(0xff800000), reg.EAX)
	VPBROADCASTD(reg.EAX, reg.Z0)
	VPXORD(reg.Z1, reg.Z1, reg.Z1)
	MOVL(U32(16), reg.EAX)
	VPBROADCASTD(reg.EAX, reg.Z3)
	// Z2 = 0, 1, …, 15
	MOVQ(U64(0x0000000100000000), reg.RAX)
	MOVQ(reg.RAX, reg.X2)
	MOVQ(U64(0x0000000200000002), reg.RAX)
	MOVQ(reg.RAX, reg.X4)
	VPBROADCASTQ(reg.X4, reg.Z4)
	VPBROADCASTQ(reg.X2, reg.Z2)
	MOVL(U32(0xcccc), reg.EAX) // lanes 2,3 of every 4
	KMOVW(reg.EAX, reg.K1)
	VPADDD(reg.Z4, reg.Z2, reg.K1, reg.Z2)
	VPSLLD(U8(1), reg.Z4, reg.Z4) // 4s
	MOVL(U32(0xf0f0), reg.EAX)
	KMOVW(reg.EAX, reg.K1)
	VPADDD(reg.Z4, reg.Z2, reg.K1, reg.Z2)
	VPSLLD(U8(1), reg.Z4, reg.Z4) // 8s
	MOVL(U32(0xff00), reg.EAX)
	KMOVW(reg.EAX, reg.K1)
	VPADDD(reg.Z4, reg.Z2, reg.K1, reg.Z2)
	Label("loop")
	VMOVUPS(M(Xp, 0), reg.Z5)
	VCMPPS(U8(0x1e), reg.Z0, reg.Z5, reg.K2) // x > max (ordered: NaN never wins)
	VMOVAPS(reg.Z5, reg.K2, reg.Z0)
	VMOVDQA32(reg.Z2, reg.K2, reg.Z1)
	VPADDD(reg.Z3, reg.Z2, reg.Z2)
	ADDQ(U8(64), Xp)
	SUBQ(U8(16), N)
	JNZ(LabelRef("loop"))
	Comment("reduce: the max value, then the lowest index among lanes holding it")
	VEXTRACTF32X8(U8(1), reg.Z0, reg.Y5)
	VMAXPS(reg.Y5, reg.Y0, reg.Y5)
	VEXTRACTF128(U8(1), reg.Y5, reg.X6)
	VMAXPS(reg.X6, reg.X5, reg.X5)
	VPERMILPS(U8(0x4e), reg.X5, reg.X6)
	VMAXPS(reg.X6, reg.X5, reg.X5)
	VPERMILPS(U8(0xb1), reg.X5, reg.X6)
	VMAXPS(reg.X6, reg.X5, reg.X5)
	VBROADCASTSS(reg.X5, reg.Z5)
	VCMPPS(U8(0), reg.Z5, reg.Z0, reg.K2) // lanes equal to the max
	MOVL(U32(0x7fffffff), reg.EAX)
	VPBROADCASTD(reg.EAX, reg.Z6)
	VMOVDQA32(reg.Z1, reg.K2, reg.Z6)
	VEXTRACTI32X8(U8(1), reg.Z6, reg.Y7)
	VPMINUD(reg.Y7, reg.Y6, reg.Y6)
	VEXTRACTI128(U8(1), reg.Y6, reg.X7)
	VPMINUD(reg.X7, reg.X6, reg.X6)
	VPSHUFD(U8(0x4e), reg.X6, reg.X7)
	VPMINUD(reg.X7, reg.X6, reg.X6)
	VPSHUFD(U8(0xb1), reg.X6, reg.X7)
	VPMINUD(reg.X7, reg.X6, reg.X6)
	VMOVD(reg.X6, reg.EAX)
	Comment("all lanes -Inf or NaN: no lane matched, index 0")
	CMPL(reg.EAX, U32(0x7fffffff))
	MOVL(U32(0), reg.EDX)
	CMOVLEQ(reg.EDX, reg.EAX)
	Store(reg.X5, Return("best"))
	Store(reg.RAX, Return("idx"))
	VZEROUPPER()
	RET()
}

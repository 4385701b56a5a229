// F32 / F16 / BF16 matmul kernels: FMA over packed weight tiles (AVX-512
// and AVX2).
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ---------------------------------------------------------------------------
// F32 / F16 / BF16 × f32 activations, AVX-512 FMA.

// fKStride is the packed bytes of one k of a 32-row tile (see packTile in ../matmul_amd64.go).
var fKStride = map[string]int{"bf16": 64, "f16": 64, "f32": 128}

func genF512(nb int, t string) {
	name := fmt.Sprintf("%sAVX512x%d", t, nb)
	TEXT(name, NOSPLIT, "func(w *byte, x *float32, xstride int, nk int, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a 32-row × %d-activation tile of y = x·Wᵀ for", name, nb),
		fmt.Sprintf("%s weights packed by packTile: for b < nb, r < 32,", t),
		"",
		"\ty[b*ystride/4+r] = Σ_k W[r][k] · x[b*xstride/4+k]   (k < 8·nk, sequential FMA in f32)",
		"",
		"Meanwhile it prefetches pfn bytes at pf (the next tile), 8 columns' worth per 8 columns.")
	W := Load(Param("w"), reg.RSI)
	PF := Load(Param("pf"), reg.RDX)
	PFN := Load(Param("pfn"), reg.R8)
	X0 := Load(Param("x"), reg.RDI)
	S := Load(Param("xstride"), reg.R9)
	N := Load(Param("nk"), reg.RCX)
	bases := []reg.Register{X0}
	for i, r := range []reg.Register{reg.R11, reg.R12, reg.R13} {
		if 3*(i+1) < nb {
			LEAQ(Mem{Base: bases[i], Index: S, Scale: 2}, r)
			ADDQ(S, r)
			bases = append(bases, r)
		}
	}
	acc := func(g, b int) reg.VecPhysical { return Z(g*nb + b) }
	Comment("Z0-Z23: accumulators (group g, row b) = Z[g*nb+b]; Z24-Z27 widened weights; Z28/Z29 x broadcasts")
	for g := range 2 {
		for b := range nb {
			VPXORD(acc(g, b), acc(g, b), acc(g, b))
		}
	}
	if t == "bf16" {
		MOVL(U32(0xffff0000), reg.EAX)
		VPBROADCASTD(reg.EAX, reg.Z30)
	}
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R10, tmp: reg.RAX, lines: 8 * fKStride[t] / 64, n: 8}
	pfs.init()
	Label("kloop")
	switch t {
	case "bf16":
		pfs.n = 4
		for kp := range 4 {
			Commentf("k = 2·%d (low halves) and 2·%d+1 (high halves)", kp, kp)
			pfs.at(kp)
			VMOVDQU32(M(W, 128*kp), reg.Z26)
			VMOVDQU32(M(W, 128*kp+64), reg.Z27)
			VPSLLD(U8(16), reg.Z26, reg.Z24)
			VPSLLD(U8(16), reg.Z27, reg.Z25)
			VPANDD(reg.Z30, reg.Z26, reg.Z26)
			VPANDD(reg.Z30, reg.Z27, reg.Z27)
			for b := range nb {
				VBROADCASTSS(xRowAddr(bases, S, b, 4*(2*kp)), reg.Z28)
				VFMADD231PS(reg.Z28, reg.Z24, acc(0, b))
				VFMADD231PS(reg.Z28, reg.Z25, acc(1, b))
			}
			for b := range nb {
				VBROADCASTSS(xRowAddr(bases, S, b, 4*(2*kp+1)), reg.Z29)
				VFMADD231PS(reg.Z29, reg.Z26, acc(0, b))
				VFMADD231PS(reg.Z29, reg.Z27, acc(1, b))
			}
		}
	case "f16", "f32":
		for k := range 8 {
			Commentf("k = %d", k)
			pfs.at(k)
			if t == "f16" {
				VCVTPH2PS(M(W, 64*k), reg.Z24)
				VCVTPH2PS(M(W, 64*k+32), reg.Z25)
			} else {
				VMOVUPS(M(W, 128*k), reg.Z24)
				VMOVUPS(M(W, 128*k+64), reg.Z25)
			}
			for b := range nb {
				VBROADCASTSS(xRowAddr(bases, S, b, 4*k), reg.Z28)
				VFMADD231PS(reg.Z28, reg.Z24, acc(0, b))
				VFMADD231PS(reg.Z28, reg.Z25, acc(1, b))
			}
		}
	}
	ADDQ(U32(8*fKStride[t]), W)
	for _, r := range bases {
		ADDQ(U8(32), r)
	}
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("kloop"))

	storeY(nb, 64, acc)
}

func genF2(nb int, t string) {
	name := fmt.Sprintf("%sAVX2x%d", t, nb)
	TEXT(name, NOSPLIT, "func(w *byte, x *float32, xstride int, nk int, y *float32, ystride int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is %sAVX512x%d for the one 16-row group of the packed tile at w:", name, t, nb),
		"y gets 16 floats per activation row.")
	W := Load(Param("w"), reg.RSI)
	X0 := Load(Param("x"), reg.RDI)
	S := Load(Param("xstride"), reg.R9)
	N := Load(Param("nk"), reg.RCX)
	bases := []reg.Register{X0}
	if nb > 3 {
		LEAQ(Mem{Base: X0, Index: S, Scale: 2}, reg.R11)
		ADDQ(S, reg.R11)
		bases = append(bases, reg.R11)
	}
	acc := func(h, b int) reg.VecPhysical { return Y(h*nb + b) }
	for h := range 2 {
		for b := range nb {
			VPXOR(acc(h, b), acc(h, b), acc(h, b))
		}
	}
	if t == "bf16" {
		MOVL(U32(0xffff0000), reg.EAX)
		VMOVD(reg.EAX, reg.X14)
		VPBROADCASTD(reg.X14, reg.Y14)
	}
	Label("kloop")
	switch t {
	case "bf16":
		for kp := range 4 {
			VMOVDQU(M(W, 128*kp), reg.Y10)
			VMOVDQU(M(W, 128*kp+32), reg.Y11)
			VPSLLD(U8(16), reg.Y10, reg.Y8)
			VPSLLD(U8(16), reg.Y11, reg.Y9)
			VPAND(reg.Y14, reg.Y10, reg.Y10)
			VPAND(reg.Y14, reg.Y11, reg.Y11)
			for b := range nb {
				VBROADCASTSS(xRowAddr(bases, S, b, 4*(2*kp)), reg.Y12)
				VFMADD231PS(reg.Y12, reg.Y8, acc(0, b))
				VFMADD231PS(reg.Y12, reg.Y9, acc(1, b))
			}
			for b := range nb {
				VBROADCASTSS(xRowAddr(bases, S, b, 4*(2*kp+1)), reg.Y13)
				VFMADD231PS(reg.Y13, reg.Y10, acc(0, b))
				VFMADD231PS(reg.Y13, reg.Y11, acc(1, b))
			}
		}
	case "f16", "f32":
		for k := range 8 {
			if t == "f16" {
				VCVTPH2PS(M(W, 64*k), reg.Y8)
				VCVTPH2PS(M(W, 64*k+16), reg.Y9)
			} else {
				VMOVUPS(M(W, 128*k), reg.Y8)
				VMOVUPS(M(W, 128*k+32), reg.Y9)
			}
			for b := range nb {
				VBROADCASTSS(xRowAddr(bases, S, b, 4*k), reg.Y12)
				VFMADD231PS(reg.Y12, reg.Y8, acc(0, b))
				VFMADD231PS(reg.Y12, reg.Y9, acc(1, b))
			}
		}
	}
	ADDQ(U32(8*fKStride[t]), W)
	for _, r := range bases {
		ADDQ(U8(32), r)
	}
	DECQ(N)
	JNZ(LabelRef("kloop"))
	storeY(nb, 32, acc)
}

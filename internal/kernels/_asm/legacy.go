package main

// Q4_1 / Q5_0 / Q5_1 tile kernels in the 16-row layout of
// ../legacy_amd64.go: AVX2 (VPMADDUBSW/VPMADDWD, one 8-row half per call)
// and AVX-512 VNNI (VPDPBUSD, the whole 16-row group per call), against
// 1…lMaxNB2 or 1…lMaxNB512 activation rows. Not the K-quants (kquant.go)
// nor Q4_0/Q8_0 (matmul_int8.go).

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Register blocking limits (mirrored in legacy_amd64.go).
const (
	lMaxNB2   = 5  // AVX2: 2 int registers per row + 6 for the weights and broadcasts
	lMaxNB512 = 12 // AVX-512: 1 int + 1 float register per row + 8
	lXBytes   = 40 // tiled activation bytes per row and block: 32 quants, d_x f32, c
)

// lType is the layout of one legacy type's 16-row group and block (see
// ../legacy_amd64.go): block bytes, offsets of the mins, 5th bits and quants.
type lType struct {
	name, tname   string
	bb            int
	mOff, qhOff   int // -1: none
	qsOff         int
	hasMin, has5  bool
	corr          bool // Q5_0: the integer sum starts at c = −16·Σq_x
	describeValue string
}

var lTypes = []lType{
	{"q41", "Q4_1", 320, 32, -1, 64, true, false, false, "u = the nibble"},
	{"q50", "Q5_0", 352, -1, 32, 96, false, true, true, "u = q+16"},
	{"q51", "Q5_1", 384, 32, 64, 128, true, true, false, "u = the 5-bit quant"},
}

func genLegacyTiles() {
	ones := ymmConst("lones", 0x00010001)
	m0f := ymmConst("lmask0f", 0x0f0f0f0f)
	m10 := ymmConst("lmask10", 0x10101010)
	for _, lt := range lTypes {
		for nb := 1; nb <= lMaxNB2; nb++ {
			genLegacy2(lt, nb, ones, m0f, m10)
		}
	}
	for _, lt := range lTypes {
		for nb := 1; nb <= lMaxNB512; nb++ {
			genLegacy512(lt, nb)
		}
	}
	genQuantL2()
}

// genQuantL2 is genQuant2 (quant.go) for the legacy tile kernels' meta: the
// same quants and d, then c = −16·Σq (Q5_0) or Q8_1's s = f16(Σq·amax/127).
func genQuantL2() {
	perm := GLOBL("lperm_pack", RODATA|NOPTR)
	for i, v := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
		DATA(4*i, U32(v))
	}
	TEXT("quantQ8LAVX2", NOSPLIT, "func(x *float32, nblk int, q *byte, stride int, moff int, q81 int)")
	Pragma("noescape")
	Doc("quantQ8LAVX2 quantizes nblk blocks of 32 floats of x to Q8_0 exactly as",
		"quantQ8_0 does (d = amax/127 rounded to f16, q = round-half-away(x·(127/amax))).",
		"Block i writes its 32 quants to q[i*stride:] and at q[i*stride+moff:] the float32",
		"d, then the int32 −16·Σq (q81 == 0) or the float32 f16(Σq·(amax/127)) (q81 != 0, Q8_1's s).")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Q := Load(Param("q"), reg.RDI)
	QS := Load(Param("stride"), reg.R9)
	MO := Load(Param("moff"), reg.R10)
	Q81 := Load(Param("q81"), reg.R11)
	bcast := func(v uint32, y reg.VecPhysical) {
		MOVL(U32(v), reg.EAX)
		VMOVD(reg.EAX, y.AsX())
		VPBROADCASTD(y.AsX(), y)
	}
	Comment("Y15 |x| mask, Y14 sign mask, Y13 0.5, Y12 1.0, X11 127.0, X10 zero, Y9 the pack permutation, X8 amax/127")
	bcast(0x7fffffff, reg.Y15)
	bcast(0x80000000, reg.Y14)
	bcast(0x3f000000, reg.Y13)
	bcast(0x3f800000, reg.Y12)
	MOVL(U32(0x42fe0000), reg.EAX)
	VMOVD(reg.EAX, reg.X11)
	VXORPS(reg.X10, reg.X10, reg.X10)
	VMOVDQU(perm, reg.Y9)
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
	VDIVSS(reg.X11, reg.X4, reg.X8)
	VCVTPS2PH(U8(0), reg.X8, reg.X5)
	VCVTPH2PS(reg.X5, reg.X5)
	VMOVSS(reg.X5, Mem{Base: Q, Index: MO, Scale: 1})
	VDIVSS(reg.X8, reg.X12, reg.X6)
	VCMPSS(U8(4), reg.X10, reg.X8, reg.X7)
	VANDPS(reg.X7, reg.X6, reg.X6)
	VBROADCASTSS(reg.X6, reg.Y6)
	q8RoundPack(Q)
	Comment("Σq")
	sumQ32()
	CMPQ(Q81, U8(0))
	JNE(LabelRef("q81"))
	Comment("c = −16·Σq")
	VMOVD(reg.X0, reg.EAX)
	SHLL(U8(4), reg.EAX)
	NEGL(reg.EAX)
	MOVL(reg.EAX, Mem{Base: Q, Index: MO, Scale: 1, Disp: 4})
	JMP(LabelRef("next"))
	Label("q81")
	Comment("s = f16(float(Σq)·(amax/127)), widened")
	VCVTDQ2PS(reg.X0, reg.X0)
	VMULSS(reg.X8, reg.X0, reg.X0)
	VCVTPS2PH(U8(0), reg.X0, reg.X0)
	VCVTPH2PS(reg.X0, reg.X0)
	VMOVSS(reg.X0, Mem{Base: Q, Index: MO, Scale: 1, Disp: 4})
	Label("next")
	ADDQ(U8(128), Xp)
	ADDQ(QS, Q)
	DECQ(N)
	JNZ(LabelRef("block"))
	VZEROUPPER()
	RET()
}

func legacyDoc(lt lType, name string, rows, nb int, args string) {
	term := "y[b*ystride/4+r] = Σ_blk (d_w[r]·d_x[b])·float32(Σ_j u[r][j]·q[b][j] + c[b])"
	if lt.hasMin {
		term = "y[b*ystride/4+r] = Σ_blk (d_w[r]·d_x[b])·float32(Σ_j u[r][j]·q[b][j]) + m_w[r]·s_x[b]"
	}
	Doc(fmt.Sprintf("%s computes %d rows × %d activation rows of y = x·Wᵀ for %s", name, rows, nb, lt.tname),
		fmt.Sprintf("weights in the 16-row layout of legacy_amd64.go (%s; blocks %d bytes", args, lt.bb),
		fmt.Sprintf("apart, %s) and activations tiled for %d rows (%d bytes per block at x:", lt.describeValue, nb, lXBytes*nb),
		"the rows' 32 quants each, then per row d_x f32 and c): for b < nb and each row r,",
		"",
		"\t"+term,
		"",
		"with c = −16·Σq_x (Q5_0) or s_x = f16(d·Σq_x) (Q4_1, Q5_1), the integer sum exact",
		"and the sum over blocks in order, one fused multiply-add per term, from 0.",
		"Meanwhile it prefetches pfn bytes at pf (the next group), a block's worth per block.")
}

// genLegacy2 is the AVX2 kernel of one 8-row half h of a 16-row group: ws
// points at the half's scales (group + 16h), wq at group + 32h (its 5th
// bits and quants are 32h bytes into each 64-byte piece). u ≤ 31 and |q| ≤
// 127, so a VPMADDUBSW pair is ≤ 7874 and two steps (4 pairs) sum exactly in
// int16 before VPMADDWD widens them (Q4_1, u ≤ 15: all four steps).
func genLegacy2(lt lType, nb int, ones, m0f, m10 Mem) {
	name := fmt.Sprintf("%stAVX2x%d", lt.name, nb)
	TEXT(name, NOSPLIT, "func(ws *byte, wq *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	legacyDoc(lt, name, 8, nb, "ws at the half's scales, wq 32·h bytes into the group")
	WS := Load(Param("ws"), reg.RSI)
	WQ := Load(Param("wq"), reg.RDX)
	N := Load(Param("nblk"), reg.RCX)
	Xp := Load(Param("x"), reg.RDI)
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.R8, lines: (lt.bb + 63) / 64, n: 4}
	pfs.init()
	// Q4_1 (u ≤ 15): the 8 pairs of a block (≤ 30480) sum exactly in int16,
	// widened once in place; the f32 accumulators then fit in registers.
	fold := !lt.has5
	p16 := func(b int) reg.VecPhysical { return Y(b) }
	i32 := func(b int) reg.VecPhysical { return Y(nb + b) }
	facc := func(b int) reg.VecPhysical { return Y(2*nb + b) }
	if fold {
		i32 = p16
		facc = func(b int) reg.VecPhysical { return Y(nb + b) }
	}
	lo, hi, t, xl, xh, tp := reg.Y10, reg.Y11, reg.Y12, reg.Y13, reg.Y14, reg.Y15
	regF := nb <= 3 || fold
	// f32 accumulators: in registers for nb ≤ 3 (Q4_1: always), else on the stack.
	var stack Mem
	if !regF {
		stack = AllocLocal(32 * nb)
	}
	fmem := func(b int) Mem { return stack.Offset(32 * b) }
	Comment("Y[b]: int16 sums of two steps (Q4_1: of the block, then widened), Y[nb+b]: int32",
		"block sums (Q4_1: f32 accumulators) of row b; Y10/Y11 unpacked weights of a step,",
		"Y12 5th bits, Y13/Y14 activation broadcasts, Y15 product.")
	if regF {
		for b := range nb {
			VPXOR(facc(b), facc(b), facc(b))
		}
	} else {
		VPXOR(tp, tp, tp)
		for b := range nb {
			VMOVUPS(tp, fmem(b))
		}
	}
	Label("block")
	for m := range 4 {
		Commentf("step %d: weights 4·%d+t (lo) and 16+4·%d+t (hi) of each row lane", m, m, m)
		pfs.at(m)
		VMOVDQU(M(WQ, lt.qsOff+64*m), hi)
		VPAND(m0f, hi, lo)
		VPSRLW(U8(4), hi, hi)
		VPAND(m0f, hi, hi)
		if lt.has5 {
			VMOVDQU(M(WQ, lt.qhOff), t)
			VPSLLW(U8(4-m), t, t)
			VPAND(m10, t, t)
			VPOR(t, lo, lo)
			VMOVDQU(M(WQ, lt.qhOff), t)
			if m > 0 {
				VPSRLW(U8(m), t, t)
			}
			VPAND(m10, t, t)
			VPOR(t, hi, hi)
		}
		for b := range nb {
			VPBROADCASTD(M(Xp, 32*b+4*m), xl)
			VPBROADCASTD(M(Xp, 32*b+16+4*m), xh)
			if m == 0 || (m == 2 && !fold) {
				VPMADDUBSW(xl, lo, p16(b))
			} else {
				VPMADDUBSW(xl, lo, tp)
				VPADDW(tp, p16(b), p16(b))
			}
			VPMADDUBSW(xh, hi, tp)
			VPADDW(tp, p16(b), p16(b))
			switch {
			case fold && m == 3:
				VPMADDWD(ones, p16(b), p16(b))
			case fold:
			case m == 1:
				VPMADDWD(ones, p16(b), i32(b))
			case m == 3:
				VPMADDWD(ones, p16(b), p16(b))
				VPADDD(p16(b), i32(b), i32(b))
			}
		}
	}
	Comment("acc += (d_w·d_x)·float(sum [+ c]) [+ m_w·s_x]")
	VCVTPH2PS(M(WS, 0), lo)
	if lt.hasMin {
		VCVTPH2PS(M(WS, lt.mOff), hi)
	}
	for b := range nb {
		meta := 32*nb + 8*b
		if lt.corr {
			VPBROADCASTD(M(Xp, meta+4), tp)
			VPADDD(tp, i32(b), i32(b))
		}
		VCVTDQ2PS(i32(b), i32(b))
		VBROADCASTSS(M(Xp, meta), xl)
		VMULPS(xl, lo, tp)
		if regF {
			VFMADD231PS(tp, i32(b), facc(b))
			if lt.hasMin {
				VBROADCASTSS(M(Xp, meta+4), xl)
				VFMADD231PS(xl, hi, facc(b))
			}
		} else {
			VFMADD213PS(fmem(b), tp, i32(b))
			if lt.hasMin {
				VBROADCASTSS(M(Xp, meta+4), xl)
				VFMADD231PS(xl, hi, i32(b))
			}
			VMOVUPS(i32(b), fmem(b))
		}
	}
	pfs.advance()
	ADDQ(U32(lt.bb), WS)
	ADDQ(U32(lt.bb), WQ)
	ADDQ(U32(lXBytes*nb), Xp)
	DECQ(N)
	JNZ(LabelRef("block"))

	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range nb {
		v := tp
		if regF {
			v = facc(b)
		} else {
			VMOVUPS(fmem(b), tp)
		}
		VMOVUPS(v, M(Yp, 0))
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	VZEROUPPER()
	RET()
}

// genLegacy512 is the AVX-512 VNNI kernel of a whole 16-row group (one zmm
// lane per row): VPDPBUSD multiplies the unsigned weights by the signed
// activation quants into int32 directly.
func genLegacy512(lt lType, nb int) {
	name := fmt.Sprintf("%stAVX512x%d", lt.name, nb)
	TEXT(name, NOSPLIT, "func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	legacyDoc(lt, name, 16, nb, "w at the group")
	W := Load(Param("w"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Xp := Load(Param("x"), reg.RDI)
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.R8, lines: (lt.bb + 63) / 64, n: 4}
	pfs.init()
	i32 := func(b int) reg.VecPhysical { return Z(b) }
	facc := func(b int) reg.VecPhysical { return Z(12 + b) }
	lo, hi, t, c0f, c10, dw := reg.Z24, reg.Z25, reg.Z26, reg.Z29, reg.Z30, reg.Z31
	Comment("Z[b]: int32 block sums, Z[12+b]: f32 accumulators (row b); Z24/Z25 unpacked",
		"weights of a step, Z26 5th bits (then the mins), Z29 0x0f bytes, Z30 0x10 bytes,",
		"Z31 the scales. The activations are broadcast from memory by VPDPBUSD itself.")
	for b := range nb {
		VPXORD(facc(b), facc(b), facc(b))
	}
	MOVL(U32(0x0f0f0f0f), reg.EAX)
	VPBROADCASTD(reg.EAX, c0f)
	MOVL(U32(0x10101010), reg.EAX)
	VPBROADCASTD(reg.EAX, c10)
	Label("block")
	for b := range nb {
		if lt.corr {
			VPBROADCASTD(M(Xp, 32*nb+8*b+4), i32(b))
		} else {
			VPXORD(i32(b), i32(b), i32(b))
		}
	}
	for m := range 4 {
		Commentf("step %d: weights 4·%d+t (lo) and 16+4·%d+t (hi) of each row lane", m, m, m)
		pfs.at(m)
		VPANDD(M(W, lt.qsOff+64*m), c0f, lo)
		VPSRLW(U8(4), M(W, lt.qsOff+64*m), hi)
		VPANDD(c0f, hi, hi)
		if lt.has5 {
			// lo |= (qh << (4−m)) & 0x10; hi |= (qh >> m) & 0x10 (VPTERNLOGD 0xF8: A | B&C).
			VPSLLW(U8(4-m), M(W, lt.qhOff), t)
			VPTERNLOGD(U8(0xf8), c10, t, lo)
			if m == 0 {
				VPTERNLOGD(U8(0xf8), M(W, lt.qhOff), c10, hi)
			} else {
				VPSRLW(U8(m), M(W, lt.qhOff), t)
				VPTERNLOGD(U8(0xf8), c10, t, hi)
			}
		}
		for b := range nb {
			vpdpbusdBcst(M(Xp, 32*b+4*m), lo, i32(b))
			vpdpbusdBcst(M(Xp, 32*b+16+4*m), hi, i32(b))
		}
	}
	Comment("acc += (d_w·d_x)·float(sum) [+ m_w·s_x]")
	VCVTPH2PS(M(W, 0), dw)
	if lt.hasMin {
		VCVTPH2PS(M(W, lt.mOff), t)
	}
	for b := range nb {
		meta := 32*nb + 8*b
		VCVTDQ2PS(i32(b), i32(b))
		VMULPS_BCST(M(Xp, meta), dw, lo)
		VFMADD231PS(lo, i32(b), facc(b))
		if lt.hasMin {
			VFMADD231PS_BCST(M(Xp, meta+4), t, facc(b))
		}
	}
	pfs.advance()
	ADDQ(U32(lt.bb), W)
	ADDQ(U32(lXBytes*nb), Xp)
	DECQ(N)
	JNZ(LabelRef("block"))

	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range nb {
		VMOVUPS(facc(b), M(Yp, 0))
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	VZEROUPPER()
	RET()
}

// vpdpbusdBcst emits VPDPBUSD.BCST m32, u8, acc: vpdpbusd with the signed
// bytes the 4 at m32 broadcast to every lane (one micro-fused instruction
// instead of a broadcast and a VPDPBUSD).
func vpdpbusdBcst(m32 Mem, u8, acc reg.Register) {
	Instruction(&ir.Instruction{
		Opcode:   "VPDPBUSD",
		Suffixes: []string{"BCST"},
		Operands: []Op{m32, u8, acc},
		Inputs:   []Op{m32, u8, acc},
		Outputs:  []Op{acc},
		ISA:      []string{"AVX512_VNNI"},
	})
}

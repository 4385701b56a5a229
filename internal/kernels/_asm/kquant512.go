package main

// AVX-512 VNNI K-quant tile kernels: Q4_K, Q5_K and Q6_K on the 16-row tiles
// of ../kquant_amd64.go (the same bytes the AVX2 kernels of kquant.go read),
// a whole 16-row group per call (one zmm lane per row) against 1…kzMaxNB
// activation rows. VPDPBUSD multiplies the unsigned quants by the signed
// activation quants (broadcast from memory by the instruction itself) into
// int32 sub-block sums; the per-row sub-block scales are then applied in
// int32, so the integers and the f32 operations (their order included) are
// those of the AVX2 kernels: both paths agree bit for bit. Q2_K/Q3_K have
// no AVX-512 kernels (their AVX2 row kernels serve AVX-512 machines).

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

const (
	kzMaxNB = 10  // activation rows per call: an int32 and an f32 accumulator each, 12 working registers (mirrored in kquant_amd64.go)
	k6zX    = 336 // Q6_K tiled activation bytes per row and super-block: 256 quants, then d_x f32 at +0 and 16 int32 c_j = −32·bsum_j at +16 of 80 meta bytes
)

func genKQuant512() {
	for nb := 1; nb <= kzMaxNB; nb++ {
		genQ4KTile512(nb, false)
	}
	for nb := 1; nb <= kzMaxNB; nb++ {
		genQ4KTile512(nb, true)
	}
	for nb := 1; nb <= kzMaxNB; nb++ {
		genQ6KTile512(nb)
	}
}

// vnniOp emits a VNNI instruction (VPDPBUSD, VPDPWSSD) src, b, acc; with
// bcst src is a 32-bit memory operand broadcast to every lane.
func vnniOp(op string, bcst bool, src Op, b, acc reg.Register) {
	var suf []string
	if bcst {
		suf = []string{"BCST"}
	}
	Instruction(&ir.Instruction{
		Opcode:   op,
		Suffixes: suf,
		Operands: []Op{src, b, acc},
		Inputs:   []Op{src, b, acc},
		Outputs:  []Op{acc},
		ISA:      []string{"AVX512_VNNI"},
	})
}

// kzScales loads the 16 rows' byte scales of one sub-block, 8 at lo (rows
// 0-7) and 8 at hi (rows 8-15), into the dword lanes of z (sign- or
// zero-extended) through its xmm.
func kzScales(lo, hi Mem, z reg.VecPhysical, signed bool) {
	x := z.AsX()
	VMOVQ(lo, x)
	VPINSRQ(U8(1), hi, x, x)
	if signed {
		VPMOVSXBD(x, z)
	} else {
		VPMOVZXBD(x, z)
	}
}

// kzStore ends a kernel: it stores each activation row's 16 results
// facc(b) to y + b·ystride, then VZEROUPPER, RET.
func kzStore(nb int, facc func(b int) reg.VecPhysical) {
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

// genQ4KTile512 emits the AVX-512 Q4_K tile kernel, or with q5 the Q5_K one.
// Per sub-block j (32 weights) and activation row b:
//
//	Q4_K: A = Σ over the low-nibble weights (16 products, ≤ 16·15·127 < 2¹⁵),
//	      B likewise over the high ones; both fit the low word of their lane,
//	      so isum += VPDPWSSD with the scale as the word pair (sc, 0), once
//	      for A and once for B: no 32-bit multiply.
//	Q5_K: one int32 sum of the 32 products (≤ 32·31·127, too wide for a
//	      word), times the scale by VPMULLD.
//
// The min term Σ_j m_j·bsum_j and the f32 update are the AVX2 kernel's.
func genQ4KTile512(nb int, q5 bool) {
	pre, T, bb := "q4k", "Q4_K", k4tBlock
	if q5 {
		pre, T, bb = "q5k", "Q5_K", k5tBlock
	}
	name := fmt.Sprintf("%stAVX512x%d", pre, nb)
	TEXT(name, NOSPLIT, "func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is %stAVX2x%d (the same sums in the same order, bit for bit) for", name, pre, min(nb, kMaxNB)),
		fmt.Sprintf("%d activation rows, with AVX-512 VNNI: 16 rows × %d activation rows of y = x·Wᵀ for", nb, nb),
		fmt.Sprintf("one 16-row group of a %s tile (nblk super-blocks of %d bytes at w) and Q8_K", T, bb),
		fmt.Sprintf("activations tiled for %d rows (%d bytes per super-block at x), from 0:", nb, k4tX*nb),
		"",
		"\ty[b*ystride/4+r] = Σ (d[r]·d_x[b])·Σ_j sc[r][j]·(q·x)_j − (dmin[r]·d_x[b])·Σ_j m[r][j]·bsum[b][j]",
		"",
		"Meanwhile it prefetches pfn bytes at pf (the next group).")
	W := Load(Param("w"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Xp := Load(Param("x"), reg.RDI)
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: (bb + 63) / 64, n: 32}
	pfs.init()
	lo := [4]reg.VecPhysical{reg.Z0, reg.Z1, reg.Z2, reg.Z3}
	hi := [4]reg.VecPhysical{reg.Z4, reg.Z5, reg.Z6, reg.Z7}
	sc, accA, accB, m0f := reg.Z8, reg.Z9, reg.Z10, reg.Z11
	m10 := accB // Q5_K: one accumulator, Z10 holds 0x10 bytes
	isum := func(b int) reg.VecPhysical { return Z(12 + b) }
	facc := func(b int) reg.VecPhysical { return Z(12 + kzMaxNB + b) }
	Comment("Z0-Z3/Z4-Z7 low/high-nibble quants of a sub-block's 4 steps, Z8 its scales (dwords),",
		"Z9/Z10 sub-block sums (Q5_K: Z9 the sum, Z10 0x10 bytes), Z11 0x0f bytes,",
		fmt.Sprintf("Z12+b int32 super-block sums, Z%d+b f32 accumulators of activation row b.", 12+kzMaxNB))
	for b := range nb {
		VPXORD(facc(b), facc(b), facc(b))
	}
	MOVL(U32(0x0f0f0f0f), reg.EAX)
	VPBROADCASTD(reg.EAX, m0f)
	if q5 {
		MOVL(U32(0x10101010), reg.EAX)
		VPBROADCASTD(reg.EAX, m10)
	}
	Label("block")
	for b := range nb {
		VPXORD(isum(b), isum(b), isum(b))
	}
	for j := range 8 {
		Commentf("sub-block %d: step m holds weights 4m+t (low nibbles) and 16+4m+t (high) of each row lane", j)
		for m := range 4 {
			pfs.at(4*j + m)
			q := M(W, k4tQ+256*j+64*m)
			VPANDD(q, m0f, lo[m])
			VPSRLW(U8(4), q, hi[m])
			VPANDD(m0f, hi[m], hi[m])
			if q5 {
				// lo |= (qh << (4−m)) & 0x10; hi |= (qh >> m) & 0x10 (VPTERNLOGD 0xF8: A | B&C).
				qh, t := M(W, k5tH+64*j), accA
				VPSLLW(U8(4-m), qh, t)
				VPTERNLOGD(U8(0xf8), m10, t, lo[m])
				if m == 0 {
					VPTERNLOGD(U8(0xf8), qh, m10, hi[m])
				} else {
					VPSRLW(U8(m), qh, t)
					VPTERNLOGD(U8(0xf8), m10, t, hi[m])
				}
			}
		}
		kzScales(M(W, k4tSc+8*j), M(W, k4tSc+64+8*j), sc, false)
		for b := range nb {
			xq := func(disp int) Mem { return M(Xp, 256*b+32*j+disp) }
			VPXORD(accA, accA, accA)
			if q5 {
				for m := range 4 {
					vnniOp("VPDPBUSD", true, xq(4*m), lo[m], accA)
					vnniOp("VPDPBUSD", true, xq(16+4*m), hi[m], accA)
				}
				VPMULLD(sc, accA, accA)
				VPADDD(accA, isum(b), isum(b))
				continue
			}
			VPXORD(accB, accB, accB)
			for m := range 4 {
				vnniOp("VPDPBUSD", true, xq(4*m), lo[m], accA)
				vnniOp("VPDPBUSD", true, xq(16+4*m), hi[m], accB)
			}
			vnniOp("VPDPWSSD", false, sc, accA, isum(b))
			vnniOp("VPDPWSSD", false, sc, accB, isum(b))
		}
	}
	Comment("facc += (d·d_x)·float(isum) − (dmin·d_x)·float(Σ_j m_j·bsum_j), mins as word pairs (m[2k], m[2k+1])")
	mins := lo
	d, dm, msum, t := hi[0], hi[1], hi[2], hi[3]
	for k := range 4 {
		VPMOVZXBW(M(W, k4tMin+16*k), mins[k].AsY())
		VPMOVZXBW(M(W, k4tMin+64+16*k), t.AsY())
		VINSERTI64X4(U8(1), t.AsY(), mins[k], mins[k])
	}
	VCVTPH2PS(M(W, k4tD), d)
	VCVTPH2PS(M(W, k4tDmin), dm)
	meta := 256 * nb
	for b := range nb {
		VPXORD(msum, msum, msum)
		for k := range 4 {
			vnniOp("VPDPWSSD", true, M(Xp, meta+32*b+16+4*k), mins[k], msum)
		}
		VMULPS_BCST(M(Xp, meta+32*b), d, t)
		VCVTDQ2PS(isum(b), isum(b))
		VFMADD231PS(t, isum(b), facc(b))
		VMULPS_BCST(M(Xp, meta+32*b), dm, t)
		VCVTDQ2PS(msum, msum)
		VFNMADD231PS(t, msum, facc(b))
	}
	ADDQ(U32(bb), W)
	ADDQ(U32(k4tX*nb), Xp)
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("block"))
	kzStore(nb, facc)
}

// genQ6KTile512 emits the AVX-512 Q6_K tile kernel. Per 16-weight sub-block
// j and activation row b the int32 sum starts at c_j = −32·bsum_j (from the
// activation meta) and adds the 16 products of the unsigned quants: it is
// Σ q·x with q = u − 32 the signed quant; VPMULLD by the sign-extended scale
// and an add take it into the super-block sum. The integers are those of
// q6ktAVX2 (which subtracts the same 32·Σ_j sc_j·bsum_j at the end).
func genQ6KTile512(nb int) {
	name := fmt.Sprintf("q6ktAVX512x%d", nb)
	TEXT(name, NOSPLIT, "func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is q6ktAVX2x%d (the same sums in the same order, bit for bit) for", name, min(nb, k6tMaxNB)),
		fmt.Sprintf("%d activation rows, with AVX-512 VNNI: 16 rows × %d activation rows of y = x·Wᵀ for", nb, nb),
		fmt.Sprintf("one 16-row group of a Q6_K tile (nblk super-blocks of %d bytes at w) and Q8_K", k6tBlock),
		fmt.Sprintf("activations tiled for %d rows (%d bytes per super-block at x: the rows' 256 quants", nb, k6zX*nb),
		"each, then per row d_x f32 at +0 and the 16 c_j = −32·bsum_j int32 at +16 of its 80 meta",
		"bytes), from 0:",
		"",
		"\ty[b*ystride/4+r] = Σ (d[r]·d_x[b])·Σ_j sc[r][j]·((u·x)_j + c_j)",
		"",
		"with u = q+32 the unsigned quants. Meanwhile it prefetches pfn bytes at pf (the next group).")
	W := Load(Param("w"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Xp := Load(Param("x"), reg.RDI)
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: (k6tBlock + 63) / 64, n: 32}
	pfs.init()
	lo := [2]reg.VecPhysical{reg.Z0, reg.Z1}
	hi := [2]reg.VecPhysical{reg.Z2, reg.Z3}
	sc, t, m0f, m30 := reg.Z4, reg.Z5, reg.Z6, reg.Z7
	acc := [2]reg.VecPhysical{reg.Z8, reg.Z9}
	d, dx := reg.Z10, reg.Z11
	isum := func(b int) reg.VecPhysical { return Z(12 + b) }
	facc := func(b int) reg.VecPhysical { return Z(12 + kzMaxNB + b) }
	Comment("Z0/Z2, Z1/Z3 unsigned quants (low/high side) of a sub-block's 2 steps, Z4 its scales",
		"(sign-extended dwords), Z5 scratch, Z6 0x0f bytes, Z7 0x30 bytes, Z8/Z9 sub-block sums,",
		fmt.Sprintf("Z12+b int32 super-block sums, Z%d+b f32 accumulators of activation row b.", 12+kzMaxNB))
	for b := range nb {
		VPXORD(facc(b), facc(b), facc(b))
	}
	MOVL(U32(0x0f0f0f0f), reg.EAX)
	VPBROADCASTD(reg.EAX, m0f)
	MOVL(U32(0x30303030), reg.EAX)
	VPBROADCASTD(reg.EAX, m30)
	meta := 256 * nb
	Label("block")
	for j := range 16 {
		Commentf("sub-block %d: step s holds weights 16·%d+4s+t (low nibbles) and 16·%d+8+4s+t (high)", j, j, j)
		for s := range 2 {
			pfs.at(2*j + s)
			q := M(W, k6tQ+128*j+64*s)
			VPANDD(q, m0f, lo[s])
			VPSRLW(U8(4), q, hi[s])
			VPANDD(m0f, hi[s], hi[s])
			// The 2-bit field at bit p of each byte of the high-bit word,
			// moved to bits 4-5 (VPTERNLOGD 0xF8: A | B&C).
			qh := M(W, k6tH+64*j)
			for i, dst := range []reg.VecPhysical{lo[s], hi[s]} {
				switch p := 4*s + 2*i; {
				case p < 4:
					VPSLLW(U8(4-p), qh, t)
					VPTERNLOGD(U8(0xf8), m30, t, dst)
				case p > 4:
					VPSRLW(U8(p-4), qh, t)
					VPTERNLOGD(U8(0xf8), m30, t, dst)
				default:
					VPTERNLOGD(U8(0xf8), qh, m30, dst)
				}
			}
		}
		kzScales(M(W, k6tSc+8*j), M(W, k6tSc+128+8*j), sc, true)
		for b := range nb {
			a := acc[b%2]
			VPBROADCASTD(M(Xp, meta+80*b+16+4*j), a)
			for s := range 2 {
				vnniOp("VPDPBUSD", true, M(Xp, 256*b+16*j+4*s), lo[s], a)
				vnniOp("VPDPBUSD", true, M(Xp, 256*b+16*j+8+4*s), hi[s], a)
			}
			if j == 0 {
				VPMULLD(sc, a, isum(b))
			} else {
				VPMULLD(sc, a, a)
				VPADDD(a, isum(b), isum(b))
			}
		}
	}
	Comment("facc += (d·d_x)·float(isum)")
	VCVTPH2PS(M(W, k6tD), d)
	for b := range nb {
		VMULPS_BCST(M(Xp, meta+80*b), d, dx)
		VCVTDQ2PS(isum(b), isum(b))
		VFMADD231PS(dx, isum(b), facc(b))
	}
	ADDQ(U32(k6tBlock), W)
	ADDQ(U32(k6zX*nb), Xp)
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("block"))
	kzStore(nb, facc)
}

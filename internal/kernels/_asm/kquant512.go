package main

// AVX-512 VNNI K-quant tile kernels: Q4_K, Q5_K and Q6_K on the 16-row tiles
// of ../kquant_amd64.go (the same bytes the AVX2 kernels of kquant.go read),
// a whole 16-row group per call (one zmm lane per row) against 1…kzMaxNB
// activation rows. VPDPBUSD multiplies the unsigned quants by the signed
// activation quants (broadcast from memory by the instruction itself) into
// int32 sums; the per-row sub-block scales are then applied in int32
// (VPDPWSSD where two sums fit a word each, else VPMULLD), so the integers and the f32 operations (their order included) are
// those of the AVX2 kernels: both paths agree bit for bit. Q2_K/Q3_K have
// no AVX-512 kernels (their AVX2 row kernels serve AVX-512 machines).

import (
	"fmt"

	"github.com/mmcloughlin/avo/attr"
	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

const (
	kzMaxNB = 16  // activation rows per call: an int32 accumulator each, 12 working registers (mirrored in kquant_amd64.go)
	kzRegNB = 10  // up to this many rows the f32 accumulators are registers too, else on the stack
	k6zX    = 400 // Q6_K tiled activation bytes per row and super-block: 256 quants, then d_x f32 at +0 and 32 int32 c_js at +16 of 144 meta bytes
)

func genKQuant512() {
	// kzDupLo: VPSHUFB control giving each dword its low word twice.
	dup := GLOBL("kzDupLo", RODATA|NOPTR)
	for i := range 64 {
		DATA(i, U8(i%16/4*4+i%2))
	}
	for nb := 1; nb <= kzMaxNB; nb++ {
		genQ4KTile512(nb, false, dup)
	}
	for nb := 1; nb <= kzMaxNB; nb++ {
		genQ4KTile512(nb, true, dup)
	}
	for nb := 1; nb <= kzMaxNB; nb++ {
		genQ6KTile512(nb, dup)
	}
	genQuantQ8K512()
}

// kzPairMask sets K1 to the high words of every dword (bytes 2 and 3):
// VPSHUFB kzDupLo under it puts a sum's low word into another's high word.
func kzPairMask() {
	MOVQ(U64(0xcccccccccccccccc), reg.RAX)
	KMOVQ(reg.RAX, reg.K1)
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

// kzFacc is the f32 accumulators of a tile kernel's nb activation rows:
// Z(12+kzRegNB+b) for nb ≤ kzRegNB, else 64 bytes each on the stack (they
// change once per super-block).
type kzFacc struct {
	nb    int
	stack Mem
}

func newKzFacc(nb int) kzFacc {
	f := kzFacc{nb: nb}
	if nb > kzRegNB {
		f.stack = AllocLocal(64 * nb)
	}
	return f
}

func (f kzFacc) inReg() bool { return f.nb <= kzRegNB }

// kzTextFlags is NOSPLIT for kernels whose accumulators are registers; the
// others' stack frames exceed what a NOSPLIT function may take, so they get
// the stack-growth check.
func kzTextFlags(nb int) attr.Attribute {
	if nb <= kzRegNB {
		return NOSPLIT
	}
	return 0
}

// zero clears the accumulators (tmp: a scratch register).
func (f kzFacc) zero(tmp reg.VecPhysical) {
	if !f.inReg() {
		VPXORD(tmp, tmp, tmp)
	}
	for b := range f.nb {
		if f.inReg() {
			VPXORD(Z(12+kzRegNB+b), Z(12+kzRegNB+b), Z(12+kzRegNB+b))
		} else {
			VMOVUPS(tmp, f.stack.Offset(64*b))
		}
	}
}

// get is accumulator b in a register: its own, or tmp loaded from the stack.
func (f kzFacc) get(b int, tmp reg.VecPhysical) reg.VecPhysical {
	if f.inReg() {
		return Z(12 + kzRegNB + b)
	}
	VMOVUPS(f.stack.Offset(64*b), tmp)
	return tmp
}

// put stores accumulator b back from v (got from get).
func (f kzFacc) put(b int, v reg.VecPhysical) {
	if !f.inReg() {
		VMOVUPS(v, f.stack.Offset(64*b))
	}
}

// store ends a kernel: it stores each activation row's 16 results to
// y + b·ystride (tmp: scratch), then VZEROUPPER, RET.
func (f kzFacc) store(tmp reg.VecPhysical) {
	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range f.nb {
		VMOVUPS(f.get(b, tmp), M(Yp, 0))
		if b+1 < f.nb {
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
//	      B likewise over the high ones; both fit a word, so VPSHUFB (under
//	      K1) puts B's low word into A's high word and one VPDPWSSD with the
//	      scale as the word pair (sc, sc) adds sc·(A + B): no 32-bit multiply.
//	Q5_K: one int32 sum of the 32 products (≤ 32·31·127, too wide for a
//	      word), times the scale by VPMULLD.
//
// The min term Σ_j m_j·bsum_j and the f32 update are the AVX2 kernel's.
func genQ4KTile512(nb int, q5 bool, dup Mem) {
	pre, T, bb := "q4k", "Q4_K", k4tBlock
	if q5 {
		pre, T, bb = "q5k", "Q5_K", k5tBlock
	}
	name := fmt.Sprintf("%stAVX512x%d", pre, nb)
	TEXT(name, kzTextFlags(nb), "func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes with AVX-512 VNNI 16 rows × %d activation rows of y = x·Wᵀ for", name, nb),
		fmt.Sprintf("one 16-row group of a %s tile (nblk super-blocks of %d bytes at w) and Q8_K", T, bb),
		fmt.Sprintf("activations tiled for %d rows (%d bytes per super-block at x: the rows' 256 quants", nb, k4tX*nb),
		"each, then per row d_x f32 at +0 and the 8 per-32 quant sums int16 at +16 of its 32",
		fmt.Sprintf("meta bytes), the sums of %stAVX2 in the same order, bit for bit, from 0:", pre),
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
	facc := newKzFacc(nb)
	Comment("Z0-Z3/Z4-Z7 low/high-nibble quants of a sub-block's 4 steps, Z8 its scales (Q4_K word pairs, Q5_K dwords),",
		"Z9/Z10 sub-block sums (Q5_K: Z9 the sum, Z10 0x10 bytes), Z11 0x0f bytes,",
		fmt.Sprintf("Z12+b int32 super-block sums, Z%d+b (nb ≤ %d; else the stack) f32 accumulators of activation row b.", 12+kzRegNB, kzRegNB))
	facc.zero(accA)
	MOVL(U32(0x0f0f0f0f), reg.EAX)
	VPBROADCASTD(reg.EAX, m0f)
	if q5 {
		MOVL(U32(0x10101010), reg.EAX)
		VPBROADCASTD(reg.EAX, m10)
	} else {
		kzPairMask()
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
		if !q5 {
			VPSHUFB(dup, sc, sc) // (sc, sc)
		}
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
			VPSHUFB(dup, accB, reg.K1, accA) // (A, B) as words
			vnniOp("VPDPWSSD", false, sc, accA, isum(b))
		}
	}
	Comment("facc += (d·d_x)·float(isum) − (dmin·d_x)·float(Σ_j m_j·bsum_j), mins as word pairs (m[2k], m[2k+1])")
	mins := lo
	d, dm, msum, t, fa := hi[0], hi[1], hi[2], hi[3], sc
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
		f := facc.get(b, fa)
		VFMADD231PS(t, isum(b), f)
		VMULPS_BCST(M(Xp, meta+32*b), dm, t)
		VCVTDQ2PS(msum, msum)
		VFNMADD231PS(t, msum, f)
		facc.put(b, f)
	}
	ADDQ(U32(bb), W)
	ADDQ(U32(k4tX*nb), Xp)
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("block"))
	facc.store(accA)
}

// genQ6KTile512 emits the AVX-512 Q6_K tile kernel. Per 16-weight sub-block
// j, step s and activation row b an int32 sum starts at c_js = −32·(the sum
// of the step's 8 activation quants, from the activation meta) and adds the
// step's 8 products of the unsigned quants: it is Σ q·x with q = u − 32 the
// signed quant, |Σ q·x| ≤ 8·32·127 < 2¹⁵. VPSHUFB (under K1) puts step 1's
// word into step 0's high word and one VPDPWSSD with the scale as the word
// pair (sc, sc) adds sc·(A + B) to the super-block sum. The integers are
// those of q6ktAVX2 (which subtracts the same 32·Σ_j sc_j·bsum_j at the end).
func genQ6KTile512(nb int, dup Mem) {
	name := fmt.Sprintf("q6ktAVX512x%d", nb)
	TEXT(name, kzTextFlags(nb), "func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes with AVX-512 VNNI 16 rows × %d activation rows of y = x·Wᵀ for", name, nb),
		fmt.Sprintf("one 16-row group of a Q6_K tile (nblk super-blocks of %d bytes at w) and Q8_K", k6tBlock),
		fmt.Sprintf("activations tiled for %d rows (%d bytes per super-block at x: the rows' 256 quants", nb, k6zX*nb),
		"each, then per row d_x f32 at +0 and at +16 of its 144 meta bytes, for sub-block j",
		"and step s, c_js = −32·Σ x over weights 16j+4s+t and 16j+8+4s+t (t < 4), int32), the",
		"sums of q6ktAVX2 in the same order, bit for bit, from 0:",
		"",
		"\ty[b*ystride/4+r] = Σ (d[r]·d_x[b])·Σ_j sc[r][j]·((u·x)_j + c_j0 + c_j1)",
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
	facc := newKzFacc(nb)
	Comment("Z0/Z2, Z1/Z3 unsigned quants (low/high side) of a sub-block's 2 steps, Z4 its scales",
		"(word pairs), Z5 scratch, Z6 0x0f bytes, Z7 0x30 bytes, Z8/Z9 the steps' sums,",
		fmt.Sprintf("Z12+b int32 super-block sums, Z%d+b (nb ≤ %d; else the stack) f32 accumulators of activation row b.", 12+kzRegNB, kzRegNB))
	facc.zero(t)
	MOVL(U32(0x0f0f0f0f), reg.EAX)
	VPBROADCASTD(reg.EAX, m0f)
	MOVL(U32(0x30303030), reg.EAX)
	VPBROADCASTD(reg.EAX, m30)
	kzPairMask()
	meta := 256 * nb
	Label("block")
	for b := range nb {
		VPXORD(isum(b), isum(b), isum(b))
	}
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
		VPSHUFB(dup, sc, sc) // (sc, sc)
		for b := range nb {
			for s := range 2 {
				VPBROADCASTD(M(Xp, meta+144*b+16+8*j+4*s), acc[s])
				vnniOp("VPDPBUSD", true, M(Xp, 256*b+16*j+4*s), lo[s], acc[s])
				vnniOp("VPDPBUSD", true, M(Xp, 256*b+16*j+8+4*s), hi[s], acc[s])
			}
			VPSHUFB(dup, acc[1], reg.K1, acc[0]) // (A, B) as words
			vnniOp("VPDPWSSD", false, sc, acc[0], isum(b))
		}
	}
	Comment("facc += (d·d_x)·float(isum)")
	VCVTPH2PS(M(W, k6tD), d)
	for b := range nb {
		VMULPS_BCST(M(Xp, meta+144*b), d, dx)
		VCVTDQ2PS(isum(b), isum(b))
		f := facc.get(b, t)
		VFMADD231PS(dx, isum(b), f)
		facc.put(b, f)
	}
	ADDQ(U32(k6tBlock), W)
	ADDQ(U32(k6zX*nb), Xp)
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("block"))
	facc.store(t)
}

// genQuantQ8K512 emits quantQ8KAVX512, the Q8_K quantizer of the AVX-512
// tile kernels: quantQ8K's quants and d, written straight into the tiled
// activation layout with the sums the kernels read.
func genQuantQ8K512() {
	// qkIdx: VPERMI2D indices. 0/1: the even and odd dwords of two
	// registers (pair sums); 2/3: dwords 4j+s and 4j+2+s (j < 8, s < 2),
	// Q6_K's step sums.
	var idx [4]Mem
	for k := range 4 {
		idx[k] = GLOBL(fmt.Sprintf("qkIdx%d", k), RODATA|NOPTR)
		for i := range 16 {
			v := 2*i + k
			if k >= 2 {
				v = 4*(i/2) + i%2 + 2*(k-2)
			}
			DATA(4*i, U32(v))
		}
	}
	TEXT("quantQ8KAVX512", NOSPLIT, "func(x *float32, nblk int, q *byte, stride int, moff int, c8 int)")
	Pragma("noescape")
	Doc("quantQ8KAVX512 quantizes nblk blocks of 256 floats of x to Q8_K exactly as quantQ8K",
		"does (mx the first value of largest magnitude, iscale = −127/mx, q = min(127,",
		"round-half-even(iscale·x)), d = 1/iscale; all zero for a zero block). Block i writes",
		"its 256 quants to q[i*stride:] and at q[i*stride+moff:] the float32 d, then at +16",
		"the 8 per-32 quant sums as int16 (c8 == 0, the Q4_K/Q5_K tiles) or for j < 16,",
		"s < 2 the int32 c_js = −32·Σ q over quants 16j+4s+t and 16j+8+4s+t, t < 4 (c8 != 0,",
		"the Q6_K AVX-512 tiles).")
	Xp := Load(Param("x"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Q := Load(Param("q"), reg.RDI)
	QS := Load(Param("stride"), reg.R9)
	MO := Load(Param("moff"), reg.R10)
	C8 := Load(Param("c8"), reg.R11)
	meta := func(disp int) Mem { return Mem{Base: Q, Index: MO, Scale: 1, Disp: disp} }
	absm, i127, ones, zero := reg.Z31, reg.Z30, reg.Z29, reg.Z28
	Comment("Z0-Z15 the block, Z31 |x| mask, Z30 int 127, Z29 0x01 bytes, Z28 zero, X27 −127.0, X26 1.0")
	MOVL(U32(0x7fffffff), reg.EAX)
	VPBROADCASTD(reg.EAX, absm)
	MOVL(U32(127), reg.EAX)
	VPBROADCASTD(reg.EAX, i127)
	MOVL(U32(0x01010101), reg.EAX)
	VPBROADCASTD(reg.EAX, ones)
	VPXORD(zero, zero, zero)
	MOVL(U32(0xc2fe0000), reg.EAX) // −127.0
	VMOVD(reg.EAX, reg.X27)
	MOVL(U32(0x3f800000), reg.EAX) // 1.0
	VMOVD(reg.EAX, reg.X26)
	Label("block")
	for r := range 16 {
		VMOVUPS(M(Xp, 64*r), Z(r))
	}
	Comment("amax in every lane of Z16")
	for r := range 16 {
		if r < 4 {
			VANDPS(absm, Z(r), Z(16+r))
		} else {
			VANDPS(absm, Z(r), reg.Z20)
			VMAXPS(reg.Z20, Z(16+r%4), Z(16+r%4))
		}
	}
	VMAXPS(reg.Z17, reg.Z16, reg.Z16)
	VMAXPS(reg.Z19, reg.Z18, reg.Z18)
	VMAXPS(reg.Z18, reg.Z16, reg.Z16)
	VSHUFF32X4(U8(0x4e), reg.Z16, reg.Z16, reg.Z17)
	VMAXPS(reg.Z17, reg.Z16, reg.Z16)
	VSHUFF32X4(U8(0xb1), reg.Z16, reg.Z16, reg.Z17)
	VMAXPS(reg.Z17, reg.Z16, reg.Z16)
	VPERMILPS(U8(0x4e), reg.Z16, reg.Z17)
	VMAXPS(reg.Z17, reg.Z16, reg.Z16)
	VPERMILPS(U8(0xb1), reg.Z16, reg.Z17)
	VMAXPS(reg.Z17, reg.Z16, reg.Z16)
	VUCOMISS(zero.AsX(), reg.X16)
	JE(LabelRef("zero"))
	Comment("mx: the first value whose magnitude is amax")
	MOVQ(Xp, reg.R8)
	Label("find")
	VANDPS(M(reg.R8, 0), absm, reg.Z17)
	VCMPPS(U8(0), reg.Z16, reg.Z17, reg.K1)
	KMOVW(reg.K1, reg.EAX)
	TESTL(reg.EAX, reg.EAX)
	JNZ(LabelRef("found"))
	ADDQ(U8(64), reg.R8)
	JMP(LabelRef("find"))
	Label("found")
	TZCNTL(reg.EAX, reg.EAX)
	VMOVSS(Mem{Base: reg.R8, Index: reg.RAX, Scale: 4}, reg.X17)
	Comment("iscale = −127/mx, d = 1/iscale")
	VDIVSS(reg.X17, reg.X27, reg.X18)
	VDIVSS(reg.X18, reg.X26, reg.X19)
	VMOVSS(reg.X19, meta(0))
	VBROADCASTSS(reg.X18, reg.Z18)
	Comment("q = min(127, round-half-even(iscale·x)), packed to bytes: Z20-Z23")
	for r := range 16 {
		VMULPS(reg.Z18, Z(r), Z(r))
		VCVTPS2DQ(Z(r), Z(r))
		VPMINSD(i127, Z(r), Z(r))
	}
	for g := range 4 {
		dst := Z(20 + g)
		VPMOVDB(Z(4*g), dst.AsX())
		for t := 1; t < 4; t++ {
			VPMOVDB(Z(4*g+t), reg.X24)
			VINSERTI32X4(U8(t), reg.X24, dst, dst)
		}
		VMOVDQU64(dst, M(Q, 64*g))
	}
	Comment("S4: the sums of each 4 quants, Z0-Z3")
	for g := range 4 {
		VPXORD(Z(g), Z(g), Z(g))
		vnniOp("VPDPBUSD", false, Z(20+g), ones, Z(g))
	}
	// pairs sets dst to the sums of the dwords idx[a] and idx[b] pick
	// from the 32 of lo, hi.
	pairs := func(lo, hi reg.VecPhysical, a, b int, dst reg.VecPhysical) {
		VMOVDQU32(idx[a], reg.Z24)
		VPERMI2D(hi, lo, reg.Z24)
		VMOVDQU32(idx[b], dst)
		VPERMI2D(hi, lo, dst)
		VPADDD(reg.Z24, dst, dst)
	}
	CMPQ(C8, U8(0))
	JNE(LabelRef("c8"))
	Comment("per-32 sums: pairs of pairs of pairs of S4, as int16")
	pairs(reg.Z0, reg.Z1, 0, 1, reg.Z4)
	pairs(reg.Z2, reg.Z3, 0, 1, reg.Z5)
	pairs(reg.Z4, reg.Z5, 0, 1, reg.Z6)
	pairs(reg.Z6, reg.Z6, 0, 1, reg.Z7)
	VPMOVDW(reg.Y7, meta(16))
	JMP(LabelRef("next"))
	Label("c8")
	Comment("c_js = −32·(S4[4j+s] + S4[4j+2+s])")
	pairs(reg.Z0, reg.Z1, 2, 3, reg.Z4)
	pairs(reg.Z2, reg.Z3, 2, 3, reg.Z5)
	VPSLLD(U8(5), reg.Z4, reg.Z4)
	VPSLLD(U8(5), reg.Z5, reg.Z5)
	VPSUBD(reg.Z4, zero, reg.Z4)
	VPSUBD(reg.Z5, zero, reg.Z5)
	VMOVDQU32(reg.Z4, meta(16))
	VMOVDQU32(reg.Z5, meta(80))
	JMP(LabelRef("next"))
	Label("zero")
	Comment("a zero block: quants, d and sums 0")
	for g := range 4 {
		VMOVDQU64(zero, M(Q, 64*g))
	}
	MOVL(U32(0), meta(0))
	CMPQ(C8, U8(0))
	JNE(LabelRef("zc8"))
	VMOVDQU32(zero.AsX(), meta(16))
	JMP(LabelRef("next"))
	Label("zc8")
	VMOVDQU32(zero, meta(16))
	VMOVDQU32(zero, meta(80))
	Label("next")
	ADDQ(U32(1024), Xp)
	ADDQ(QS, Q)
	DECQ(N)
	JNZ(LabelRef("block"))
	VZEROUPPER()
	RET()
}

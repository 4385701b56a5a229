package main

// AVX2 K-quant kernels (VPMADDUBSW/VPMADDWD) in the kernel layouts of
// ../kquant_amd64.go: Q4_K/Q5_K/Q6_K on 16-row tiles, Q2_K/Q3_K one weight
// row at a time, against 1…4 activation rows. The AVX-512 VNNI kernels of
// the Q4_K/Q5_K/Q6_K tiles are in kquant512.go; Q2_K/Q3_K have none (AVX-512
// machines run the AVX2 row kernels). (Q4_1/Q5_0/Q5_1 have their tile
// kernels in legacy.go.)

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

const kMaxNB = 4 // activation rows per K-quant kernel call (mirrored in kquant_amd64.go)

func genKQuant() {
	// shufK6[j]: word j in the low lane, word 4+j in the high lane.
	var shufK6 [4]Mem
	for j := range 4 {
		shufK6[j] = GLOBL(fmt.Sprintf("shufK6_%d", j), RODATA|NOPTR)
		for i := range 32 {
			w := j
			if i >= 16 {
				w = 4 + j
			}
			DATA(i, U8(2*w+i%2))
		}
	}
	mask30 := ymmConst("mask30", 0x30303030)
	mask01 := ymmConst("mask01", 0x01010101)
	// scK4T: 8 scale bytes (one per row, repeated in each qword) to the word
	// pair (sc, sc) of each row lane.
	scK4T := GLOBL("scK4T", RODATA|NOPTR)
	for i := range 32 {
		v := 0x80
		if i%2 == 0 {
			v = (i%16)/4 + 4*(i/16)
		}
		DATA(i, U8(v))
	}
	mask10t := ymmConst("mask10t", 0x10101010)
	for nb := 1; nb <= kMaxNB; nb++ {
		genQ4KTile(nb, scK4T, false, mask10t)
	}
	for nb := 1; nb <= kMaxNB; nb++ {
		genQ4KTile(nb, scK4T, true, mask10t)
	}
	// scK6T: 8 int8 scales (one per row) to the word pair (sc<<8, sc<<8) of
	// each row lane; pairK6T: 16 (sub-blocks 2k and 2k+1, 8 rows each) to
	// (sc[2k]<<8, sc[2k+1]<<8); an arithmetic shift then sign-extends.
	scK6T := GLOBL("scK6T", RODATA|NOPTR)
	for i := range 32 {
		v := 0x80
		if i%2 == 1 {
			v = (i%16)/4 + 4*(i/16)
		}
		DATA(i, U8(v))
	}
	pairK6T := GLOBL("pairK6T", RODATA|NOPTR)
	for i := range 32 {
		v := 0x80
		if i%2 == 1 {
			v = (i%16)/4 + 4*(i/16) + 8*(i%4/2)
		}
		DATA(i, U8(v))
	}
	mask0f := ymmConst("mask0f", 0x0f0f0f0f)
	for _, pre := range []bool{false, true} {
		for nb := 1; nb <= k6tMaxNB; nb++ {
			genQ6KTile(nb, scK6T, pairK6T, mask0f, mask30, pre)
		}
	}
	genQ6KUnpack(mask0f, mask30)
	mask03 := ymmConst("mask03", 0x03030303)
	for _, t := range []string{"q3k", "q2k"} {
		for nb := 1; nb <= kMaxNB; nb++ {
			genK(nb, t, append(shufK6[:], mask03, mask01))
		}
	}
	genKQuant512() // kquant512.go
}

// kRegs are the general registers of a K-quant kernel: row b of the
// activations is at X + b·XS (b < 3) or X3 (b = 3), likewise XD/XD3 for the
// block scales and XB/XB3 for the block sums.
type kRegs struct {
	W, N, X, XS, X3, XD, DS, XD3, XB, BS, XB3 reg.Register
}

// setRow3 points X3, XD3 and XB3 at activation row 3 of X, XD and XB
// (strides XS, DS and BS): a scaled index reaches rows 1 and 2 only.
func (k kRegs) setRow3() {
	LEAQ(Mem{Base: k.X, Index: k.XS, Scale: 2}, k.X3)
	ADDQ(k.XS, k.X3)
	LEAQ(Mem{Base: k.XD, Index: k.DS, Scale: 2}, k.XD3)
	ADDQ(k.DS, k.XD3)
	LEAQ(Mem{Base: k.XB, Index: k.BS, Scale: 2}, k.XB3)
	ADDQ(k.BS, k.XB3)
}

func (k kRegs) row(base, stride, base3 reg.Register, b, disp int) Mem {
	if b == 3 {
		return M(base3, disp)
	}
	m := M(base, disp)
	if b > 0 {
		m.Index, m.Scale = stride, uint8(b)
	}
	return m
}

// genK emits the Q3_K or Q2_K row kernel (the block body is genK23).
func genK(nb int, t string, consts []Mem) {
	name := fmt.Sprintf("%sAVX2x%d", t, nb)
	TEXT(name, NOSPLIT, "func(w *byte, nrow int, nblk int, x *int8, xstride int, xd *float32, dstride int, xb *int16, bstride int, y *float32, ystride int)")
	Pragma("noescape")
	var doc []string
	switch t {
	case "q3k":
		doc = []string{fmt.Sprintf("%s sets y[b·ystride/4] to the dot of one Q3_K weight row (nblk kernel-layout", name),
			"blocks of 114 bytes: qs[64], hmask[32], the 16 scales as int8 in Q6_K order, d f16;",
			fmt.Sprintf("see kquant_amd64.go) with Q8_K activation row b, for b < %d: its quants at", nb),
			"x + b·xstride, block scales at xd + b·dstride, the 16 per-16 quant sums in the",
			"scales' order at xb + b·bstride; strides in bytes. Per block it adds",
			"d·d_x·(Σ_j sc_j·(q·x)_j − 4·Σ_j sc_j·bsum_j) with q the unsigned 3-bit quants,",
			"in 8 float lanes summed at the end."}
	case "q2k":
		doc = []string{fmt.Sprintf("%s is q3kAVX2x%d for a Q2_K weight row (100-byte kernel-layout", name, nb),
			"blocks: qs[64], the 16 scales and the 16 mins as bytes in Q6_K order, d, dmin f16):",
			"per block it adds d_x·(d·Σ_j sc_j·(q·x)_j − dmin·Σ_j m_j·bsum_j)."}
	}
	Doc(append(doc, "It does so for nrow consecutive weight rows (w's rows follow each other), row",
		"r's outputs 4·r bytes after y's: the same sums as one call per row.")...)
	k := kRegs{W: reg.RSI, N: reg.RCX, X: reg.RDI, XS: reg.R9, X3: reg.R13, XD: reg.R8, DS: reg.R10, XD3: reg.RDX,
		XB: reg.R11, BS: reg.R12, XB3: reg.RBX}
	yl, nl := AllocLocal(8), AllocLocal(8) // output pointer of the current row, rows left
	Load(Param("w"), k.W)
	Load(Param("y"), reg.RAX)
	MOVQ(reg.RAX, yl)
	Load(Param("nrow"), reg.RAX)
	MOVQ(reg.RAX, nl)
	Label("row")
	Load(Param("nblk"), k.N)
	Load(Param("x"), k.X)
	Load(Param("xstride"), k.XS)
	Load(Param("xd"), k.XD)
	Load(Param("dstride"), k.DS)
	Load(Param("xb"), k.XB)
	Load(Param("bstride"), k.BS)
	k.setRow3()
	acc := func(b int) reg.VecPhysical { return Y(b) }
	facc := func(b int) reg.VecPhysical { return Y(4 + b) }
	for b := range nb {
		VPXOR(facc(b), facc(b), facc(b))
	}
	MOVL(U32(0x0f0f0f0f), reg.EAX)
	VMOVD(reg.EAX, reg.X15)
	VPBROADCASTD(reg.X15, reg.Y15) // Y15: 0x0f bytes
	Label("block")
	for b := range nb {
		VPXOR(acc(b), acc(b), acc(b))
	}
	xq := func(b, disp int) Mem { return k.row(k.X, k.XS, k.X3, b, disp) }
	xd := func(b int) Mem { return k.row(k.XD, k.DS, k.XD3, b, 0) }
	xb := func(b int) Mem { return k.row(k.XB, k.BS, k.XB3, b, 0) }
	genK23(t, nb, k, consts, xq, xd, xb)
	ADDQ(U32(256), k.X)
	ADDQ(U32(256), k.X3)
	ADDQ(U8(4), k.XD)
	ADDQ(U8(4), k.XD3)
	DECQ(k.N)
	JNZ(LabelRef("block"))
	Yp := reg.RAX
	MOVQ(yl, Yp)
	YS := Load(Param("ystride"), reg.R9)
	for b := range nb {
		f := facc(b)
		fx := X(4 + b)
		VEXTRACTF128(U8(1), f, reg.X8)
		VADDPS(reg.X8, fx, fx)
		VMOVHLPS(fx, reg.X8, reg.X8)
		VADDPS(reg.X8, fx, fx)
		VMOVSHDUP(fx, reg.X8)
		VADDSS(reg.X8, fx, fx)
		VMOVSS(fx, M(Yp, 0))
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	ADDQ(U8(4), yl) // w is at the next row already
	DECQ(nl)
	JNZ(LabelRef("row"))
	VZEROUPPER()
	RET()
}

// genK23 emits the block body of the Q3_K and Q2_K kernels: 2-bit quants in
// 32-byte rows (row j of half h: bits 2j of qs[32h…32h+31]), Q3_K's third bit
// from hmask (bit 4h+j), scales shuffled as Q6_K's.
func genK23(t string, nb int, k kRegs, consts []Mem, xq func(b, disp int) Mem, xd, xb func(b int) Mem) {
	acc := func(b int) reg.VecPhysical { return Y(b) }
	facc := func(b int) reg.VecPhysical { return Y(4 + b) }
	sc, bb := 96, 114
	if t == "q2k" {
		sc, bb = 64, 100
	}
	for h := range 2 {
		VMOVDQU(M(k.W, 32*h), reg.Y12) // qs of this half
		if t == "q3k" {
			VMOVDQU(M(k.W, 64), reg.Y13) // hmask
		}
		if t == "q3k" {
			VPMOVSXBW(M(k.W, sc+8*h), reg.X14)
		} else {
			VPMOVZXBW(M(k.W, sc+8*h), reg.X14)
		}
		VINSERTI128(U8(1), reg.X14, reg.Y14, reg.Y14)
		for j := range 4 {
			Commentf("weights %d…%d", 128*h+32*j, 128*h+32*j+31)
			if j > 0 {
				VPSRLW(U8(2*j), reg.Y12, reg.Y10)
				VPAND(consts[4], reg.Y10, reg.Y10)
			} else {
				VPAND(consts[4], reg.Y12, reg.Y10)
			}
			if t == "q3k" {
				if sh := 4*h + j; sh > 0 {
					VPSRLW(U8(sh), reg.Y13, reg.Y9)
					VPAND(consts[5], reg.Y9, reg.Y9)
				} else {
					VPAND(consts[5], reg.Y13, reg.Y9)
				}
				VPSLLW(U8(2), reg.Y9, reg.Y9)
				VPOR(reg.Y9, reg.Y10, reg.Y10)
			}
			VPSHUFB(consts[j], reg.Y14, reg.Y9)
			for b := range nb {
				VPMADDUBSW(xq(b, 128*h+32*j), reg.Y10, reg.Y8)
				VPMADDWD(reg.Y9, reg.Y8, reg.Y8)
				VPADDD(reg.Y8, acc(b), acc(b))
			}
		}
	}
	if t == "q3k" {
		VPMOVSXBW(M(k.W, sc), reg.Y14) // all 16 scales as words
		MOVWLZX(M(k.W, 112), reg.EAX)
		VMOVD(reg.EAX, reg.X10)
		VCVTPH2PS(reg.X10, reg.X10)
		for b := range nb {
			VPMADDWD(xb(b), reg.Y14, reg.Y9)
			VPSLLD(U8(2), reg.Y9, reg.Y9)
			VPSUBD(reg.Y9, acc(b), acc(b))
			VMULSS(xd(b), reg.X10, reg.X11)
			VBROADCASTSS(reg.X11, reg.Y11)
			VCVTDQ2PS(acc(b), acc(b))
			VFMADD231PS(reg.Y11, acc(b), facc(b))
		}
	} else {
		VPMOVZXBW(M(k.W, 80), reg.Y14) // all 16 mins as words
		VMOVD(M(k.W, 96), reg.X10)
		VCVTPH2PS(reg.X10, reg.X10) // [d, dmin, 0, 0]
		VBROADCASTSS(reg.X10, reg.Y12)
		VMOVSHDUP(reg.X10, reg.X13)
		VBROADCASTSS(reg.X13, reg.Y13)
		for b := range nb {
			VCVTDQ2PS(acc(b), acc(b))
			VMULPS(reg.Y12, acc(b), acc(b))
			VPMADDWD(xb(b), reg.Y14, reg.Y9)
			VCVTDQ2PS(reg.Y9, reg.Y9)
			VFNMADD231PS(reg.Y13, reg.Y9, acc(b))
			VBROADCASTSS(xd(b), reg.Y11)
			VFMADD231PS(reg.Y11, acc(b), facc(b))
		}
	}
	ADDQ(U32(bb), k.W)
	ADDQ(U32(32), k.XB)
	ADDQ(U32(32), k.XB3)
}

// Q4_K tile kernel: 16 weight rows (two 8-row halves across the ymm lanes)
// of the tile layout of ../kquant_amd64.go (k4tBlock bytes per super-block)
// against 1…4 Q8_K activation rows in the tiled activation layout (k4tX
// bytes per row and super-block). As the Q4_0 kernel (genQ2), a register
// holds 4 nibble bytes of each of 8 rows: weights 4m…4m+3 of a sub-block in
// the low nibbles and 16+4m…16+4m+3 in the high nibbles; the 4 activation
// bytes are broadcast, the 8 products pairs of a sub-block are summed in
// int16 (8 · 2·15·127 < 2¹⁵) and widened once by VPMADDWD with the rows'
// sub-block scale in both words of each lane (≤ 8 · 2·30480·63 < 2³¹ per
// super-block).
const (
	k4tBlock = 2368 // 16 rows × 148 bytes
	k4tD     = 0    // 16 f16 d, row order
	k4tDmin  = 32   // 16 f16 dmin
	k4tSc    = 64   // half h, sub-block j: 8 scale bytes (rows) at 64h + 8j
	k4tMin   = 192  // half h, pair k: 8 rows × (m[2k], m[2k+1]) bytes at 64h + 16k
	k4tQ     = 320  // sub-block j, step m, half h: 8 rows × 4 nibble bytes at 256j + 64m + 32h
	k4tX     = 288  // per activation row and super-block: 256 quants, then 32 bytes of meta
	k5tBlock = 2880 // Q5_K: 16 rows × 180 bytes
	k5tH     = 2368 // Q5_K: the 5th bits after the Q4_K tile
)

// genQ4KTile emits the Q4_K tile kernel, or with q5 the Q5_K one: the Q4_K
// tile followed by the 5th bits, per sub-block j and half h 8 rows × 4 bytes
// at k5tH + 64j + 32h (bit m of byte t: weight 32j+4m+t, bit 4+m: weight
// 32j+16+4m+t). A Q5_K product pair is ≤ 2·31·127, so the sums are widened
// every 2 steps (4 pairs) instead of once per sub-block.
func genQ4KTile(nb int, scShuf Mem, q5 bool, m10 Mem) {
	pre, T, bb := "q4k", "Q4_K", k4tBlock
	if q5 {
		pre, T, bb = "q5k", "Q5_K", k5tBlock
	}
	name := fmt.Sprintf("%stAVX2x%d", pre, nb)
	TEXT(name, NOSPLIT, "func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes 16 rows × %d activation rows of y = x·Wᵀ for one 16-row", name, nb),
		fmt.Sprintf("group of a %s tile (nblk super-blocks of %d bytes at w, see kquant_amd64.go)", T, bb),
		fmt.Sprintf("and Q8_K activations tiled for %d rows (%d bytes per super-block at x: the rows'", nb, k4tX*nb),
		"256 quants each, then per row d_x f32 at +0 and the 8 per-32 quant sums int16 at +16",
		"of its 32 meta bytes): for b < nb, r < 16, with the sums over super-blocks in order,",
		"",
		"\ty[b*ystride/4+r] += (d[r]·d_x[b])·Σ_j sc[r][j]·(q·x)_j − (dmin[r]·d_x[b])·Σ_j m[r][j]·bsum[b][j]",
		"",
		"starting from 0 (one fused multiply-add per term). Meanwhile it prefetches pfn",
		"bytes at pf (the next group).")
	W := Load(Param("w"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Xp := Load(Param("x"), reg.RDI)
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)
	isumReg, faccReg := nb <= 2, nb == 1
	acc := func(h, b int) reg.VecPhysical { return Y(h*nb + b) } // int16 sub-block sums
	isum := func(h, b int) reg.VecPhysical { return Y(2*nb + h*nb + b) }
	facc := func(h, b int) reg.VecPhysical { return Y(4*nb + h*nb + b) }
	var istack, fstack Mem
	if !isumReg {
		istack = AllocLocal(2 * nb * 32)
	}
	if !faccReg {
		fstack = AllocLocal(2 * nb * 32)
	}
	imem := func(h, b int) Mem { return istack.Offset(32 * (h*nb + b)) }
	fmem := func(h, b int) Mem { return fstack.Offset(32 * (h*nb + b)) }
	mask, tp, xl, xh := reg.Y15, reg.Y14, reg.Y13, reg.Y12
	lo := [2]reg.VecPhysical{reg.Y11, reg.Y10}
	hi := [2]reg.VecPhysical{reg.Y9, reg.Y8}
	Comment("int16 sub-block sums (half h, row b) Y[h*nb+b]; int32 super-block sums Y[2nb+h*nb+b]",
		"(or on the stack); f32 accumulators Y[4nb+h*nb+b] (or on the stack); Y8-Y11 nibbles",
		"of the two halves, Y12/Y13 activation broadcasts, Y14 product, Y15 0x0f bytes.")
	if faccReg {
		for h := range 2 {
			for b := range nb {
				VPXOR(facc(h, b), facc(h, b), facc(h, b))
			}
		}
	} else {
		VPXOR(tp, tp, tp)
		for h := range 2 {
			for b := range nb {
				VMOVUPS(tp, fmem(h, b))
			}
		}
	}
	MOVL(U32(0x0f0f0f0f), reg.EAX)
	VMOVD(reg.EAX, mask.AsX())
	VPBROADCASTD(mask.AsX(), mask)
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: (bb + 63) / 64, n: 32}
	pfs.init()
	// widen adds the int16 sums of sub-block j, times its scales, to the
	// int32 sums; first: the first time in a super-block.
	widen := func(j int, first bool) {
		for h := range 2 {
			s := lo[h]
			VPBROADCASTQ(M(W, k4tSc+64*h+8*j), s)
			VPSHUFB(scShuf, s, s)
			for b := range nb {
				switch {
				case isumReg && first:
					VPMADDWD(s, acc(h, b), isum(h, b))
				case isumReg:
					VPMADDWD(s, acc(h, b), acc(h, b))
					VPADDD(acc(h, b), isum(h, b), isum(h, b))
				default:
					VPMADDWD(s, acc(h, b), acc(h, b))
					if !first {
						VPADDD(imem(h, b), acc(h, b), acc(h, b))
					}
					VMOVDQU(acc(h, b), imem(h, b))
				}
			}
		}
	}
	Label("block")
	for j := range 8 {
		for m := range 4 {
			Commentf("sub-block %d: weights 4·%d … 4·%d+3 (low nibbles) and 16+4·%d … 16+4·%d+3 (high)", j, m, m, m, m)
			pfs.at(4*j + m)
			for h := range 2 {
				VMOVDQU(M(W, k4tQ+256*j+64*m+32*h), hi[h])
				VPAND(mask, hi[h], lo[h])
				VPSRLW(U8(4), hi[h], hi[h])
				VPAND(mask, hi[h], hi[h])
				if q5 {
					qh := M(W, k5tH+64*j+32*h)
					VMOVDQU(qh, tp)
					VPSLLW(U8(4-m), tp, tp)
					VPAND(m10, tp, tp)
					VPOR(tp, lo[h], lo[h])
					VMOVDQU(qh, tp)
					if m > 0 {
						VPSRLW(U8(m), tp, tp)
					}
					VPAND(m10, tp, tp)
					VPOR(tp, hi[h], hi[h])
				}
			}
			for b := range nb {
				VPBROADCASTD(M(Xp, 256*b+32*j+4*m), xl)
				VPBROADCASTD(M(Xp, 256*b+32*j+16+4*m), xh)
				for h := range 2 {
					if m == 0 || q5 && m == 2 {
						VPMADDUBSW(xl, lo[h], acc(h, b))
					} else {
						VPMADDUBSW(xl, lo[h], tp)
						VPADDW(tp, acc(h, b), acc(h, b))
					}
					VPMADDUBSW(xh, hi[h], tp)
					VPADDW(tp, acc(h, b), acc(h, b))
				}
			}
			if q5 && m == 1 {
				Commentf("sub-block %d, steps 0-1: widen by the scales, (sc, sc) in each row lane", j)
				widen(j, j == 0)
			}
		}
		Commentf("sub-block %d: widen by the scales, (sc, sc) in each row lane", j)
		widen(j, j == 0 && !q5)
	}
	Comment("facc += (d·d_x)·float(isum) − (dmin·d_x)·float(Σ_j m_j·bsum_j)")
	free := []reg.VecPhysical{reg.Y8, reg.Y9, reg.Y10, reg.Y11, reg.Y12, reg.Y13, reg.Y14}
	for h := range 2 {
		for b := range nb {
			free = append(free, acc(h, b))
		}
	}
	if nb == 1 {
		free = append(free, reg.Y6, reg.Y7) // unused by one row
	}
	mins, d, dm, msum, t, t1, fa, fi := free[:4], free[4], free[5], free[6], free[7], free[8], free[9], free[10]
	meta := 256 * nb
	for h := range 2 {
		for k := range 4 {
			VPMOVZXBW(M(W, k4tMin+64*h+16*k), mins[k])
		}
		VCVTPH2PS(M(W, k4tD+16*h), d)
		VCVTPH2PS(M(W, k4tDmin+16*h), dm)
		for b := range nb {
			VPBROADCASTD(M(Xp, meta+32*b+16), msum)
			VPMADDWD(mins[0], msum, msum)
			for k := 1; k < 4; k++ {
				VPBROADCASTD(M(Xp, meta+32*b+16+4*k), t)
				VPMADDWD(mins[k], t, t)
				VPADDD(t, msum, msum)
			}
			VCVTDQ2PS(msum, msum)
			VBROADCASTSS(M(Xp, meta+32*b), t)
			VMULPS(t, d, t1)
			if isumReg {
				fi = isum(h, b)
				VCVTDQ2PS(fi, fi)
			} else {
				VCVTDQ2PS(imem(h, b), fi)
			}
			if faccReg {
				fa = facc(h, b)
			} else {
				VMOVUPS(fmem(h, b), fa)
			}
			VFMADD231PS(t1, fi, fa)
			VMULPS(t, dm, t1)
			VFNMADD231PS(t1, msum, fa)
			if !faccReg {
				VMOVUPS(fa, fmem(h, b))
			}
		}
	}
	ADDQ(U32(bb), W)
	ADDQ(U32(k4tX*nb), Xp)
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("block"))

	storeY(nb, 32, func(h, b int) reg.VecPhysical {
		if faccReg {
			return facc(h, b)
		}
		VMOVUPS(fmem(h, b), tp)
		return tp
	})
}

// Q6_K tile kernel: as the Q4_K one, 16 weight rows in two 8-row halves,
// with 16-weight sub-blocks: step s (0, 1) of sub-block j holds weights
// 16j+4s+t in the low nibbles and 16j+8+4s+t in the high ones, their two
// high bits come from one 32-byte register per sub-block and half (field
// 4s+2·side of byte t). Quants are unsigned (q+32 ≤ 63): a step's two
// product pairs sum to ≤ 2·2·63·127 < 2¹⁵ and are widened at once by
// VPMADDWD with the sub-block scale (sign-extended) in both words; the
// offset, −32·Σ_j sc_j·bsum_j, is taken once per super-block from the
// activation sums.
const (
	k6tMaxNB = 3    // activation rows per call: 2·nb int32 sums and 10 working registers
	k6tBlock = 3360 // 16 rows × 210 bytes
	k6tD     = 0    // 16 f16 d
	k6tSc    = 32   // half h, sub-block j: 8 int8 scales (rows) at 128h + 8j
	k6tQ     = 288  // sub-block j, step s, half h: 8 rows × 4 nibble bytes at 128j + 64s + 32h
	k6tH     = 2336 // sub-block j, half h: 8 rows × 4 bytes of 2-bit fields at 64j + 32h
	k6tX     = 304  // per activation row and super-block: 256 quants, then 48 bytes of meta
	k6uBlock = 4096 // unpacked quants of a group's super-block (q6kUnpackAVX2)
)

// q6kBits emits the unpacking of step s of sub-block j, half h, of a Q6_K
// tile at W into the unsigned 6-bit quants lo (weights 16j+4s+t) and hi
// (16j+8+4s+t), with t1 as scratch.
func q6kBits(W reg.Register, j, s, h int, lo, hi, t1 reg.VecPhysical, m0f, m30 Mem) {
	VMOVDQU(M(W, k6tQ+128*j+64*s+32*h), hi)
	VPAND(m0f, hi, lo)
	VPSRLW(U8(4), hi, hi)
	VPAND(m0f, hi, hi)
	// The 2-bit field at bit p of each byte of the sub-block's high-bit
	// register, moved to bits 4-5 (AVX2 shifts take no memory operand).
	for i, dst := range []reg.VecPhysical{lo, hi} {
		p := 4*s + 2*i
		VMOVDQU(M(W, k6tH+64*j+32*h), t1)
		switch {
		case p < 4:
			VPSLLW(U8(4-p), t1, t1)
		case p > 4:
			VPSRLW(U8(p-4), t1, t1)
		}
		VPAND(m30, t1, t1)
		VPOR(t1, dst, dst)
	}
}

// genQ6KUnpack emits q6kUnpackAVX2, which writes a Q6_K tile group's quants
// as bytes for the q6ku kernels (batches of more than one call per group).
func genQ6KUnpack(m0f, m30 Mem) {
	TEXT("q6kUnpackAVX2", NOSPLIT, "func(w *byte, nblk int, u *byte)")
	Pragma("noescape")
	Doc("q6kUnpackAVX2 writes the unsigned 6-bit quants (q+32) of the nblk super-blocks",
		fmt.Sprintf("of one 16-row group of a Q6_K tile at w to u, %d bytes per super-block:", k6uBlock),
		"for sub-block j, step s and half h, at 256j + 128s + 64h, 8 rows × 4 bytes of",
		"weights 16j+4s+t, then 8 rows × 4 bytes of weights 16j+8+4s+t (t < 4).")
	W := Load(Param("w"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	U := Load(Param("u"), reg.RDI)
	Label("block")
	for j := range 16 {
		for s := range 2 {
			for h := range 2 {
				q6kBits(W, j, s, h, reg.Y0, reg.Y1, reg.Y2, m0f, m30)
				VMOVDQU(reg.Y0, M(U, 256*j+128*s+64*h))
				VMOVDQU(reg.Y1, M(U, 256*j+128*s+64*h+32))
			}
		}
	}
	ADDQ(U32(k6tBlock), W)
	ADDQ(U32(k6uBlock), U)
	DECQ(N)
	JNZ(LabelRef("block"))
	VZEROUPPER()
	RET()
}

// genQ6KTile emits the Q6_K tile kernel; with pre, the variant that reads
// the quants unpacked by q6kUnpackAVX2 (scales and d still from the tile).
func genQ6KTile(nb int, scShuf, pairShuf, m0f, m30 Mem, pre bool) {
	name := fmt.Sprintf("q6ktAVX2x%d", nb)
	sig := "func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)"
	if pre {
		name = fmt.Sprintf("q6kuAVX2x%d", nb)
		sig = "func(w *byte, nblk int, x *byte, y *float32, ystride int, u *byte)"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	if pre {
		Doc(fmt.Sprintf("%s is q6ktAVX2x%d with the quants read from u as q6kUnpackAVX2 wrote them.", name, nb))
	} else {
		Doc(fmt.Sprintf("%s computes 16 rows × %d activation rows of y = x·Wᵀ for one 16-row", name, nb),
			fmt.Sprintf("group of a Q6_K tile (nblk super-blocks of %d bytes at w, see kquant_amd64.go)", k6tBlock),
			fmt.Sprintf("and Q8_K activations tiled for %d rows (%d bytes per super-block at x: the rows'", nb, k6tX*nb),
			"256 quants each, then per row d_x f32 at +0 and the 16 per-16 quant sums int16 at +16",
			"of its 48 meta bytes): for b < nb, r < 16, with the sums over super-blocks in order,",
			"",
			"\ty[b*ystride/4+r] += (d[r]·d_x[b])·(Σ_j sc[r][j]·(u·x)_j − 32·Σ_j sc[r][j]·bsum[b][j])",
			"",
			"with u = q+32 the unsigned quants, starting from 0 (one fused multiply-add",
			"per super-block). Meanwhile it prefetches pfn bytes at pf (the next group).")
	}
	W := Load(Param("w"), reg.RSI)
	N := Load(Param("nblk"), reg.RCX)
	Xp := Load(Param("x"), reg.RDI)
	var pfs spreadPrefetch
	var U reg.Register
	if pre {
		U = Load(Param("u"), reg.R11)
	} else {
		PF := Load(Param("pf"), reg.R11)
		PFN := Load(Param("pfn"), reg.R12)
		pfs = spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: (k6tBlock + 63) / 64, n: 32}
		pfs.init()
	}
	isum := func(h, b int) reg.VecPhysical { return Y(h*nb + b) }
	fstack := AllocLocal(2 * nb * 32)
	fmem := func(h, b int) Mem { return fstack.Offset(32 * (h*nb + b)) }
	lo := [2]reg.VecPhysical{reg.Y6, reg.Y7}
	hi := [2]reg.VecPhysical{reg.Y8, reg.Y9}
	xl, xh, t1, t2 := reg.Y10, reg.Y11, reg.Y12, reg.Y13
	sc := [2]reg.VecPhysical{reg.Y14, reg.Y15}
	Comment("int32 super-block sums (half h, row b) Y[h*nb+b]; f32 accumulators on the stack;",
		"Y6-Y9 quants of the two halves, Y10/Y11 activation broadcasts, Y12/Y13 products,",
		"Y14/Y15 the halves' sub-block scales.")
	VPXOR(t1, t1, t1)
	for h := range 2 {
		for b := range nb {
			VMOVUPS(t1, fmem(h, b))
		}
	}
	Label("block")
	for j := range 16 {
		for s := range 2 {
			Commentf("sub-block %d, step %d: weights 16·%d+4·%d … +3 (low nibbles) and 16·%d+8+4·%d … +3 (high)", j, s, j, s, j, s)
			if !pre {
				pfs.at(2*j + s)
			}
			for h := range 2 {
				if pre {
					VMOVDQU(M(U, 256*j+128*s+64*h), lo[h])
					VMOVDQU(M(U, 256*j+128*s+64*h+32), hi[h])
				} else {
					q6kBits(W, j, s, h, lo[h], hi[h], t1, m0f, m30)
				}
				if s == 0 {
					VPBROADCASTQ(M(W, k6tSc+128*h+8*j), sc[h])
					VPSHUFB(scShuf, sc[h], sc[h])
					VPSRAW(U8(8), sc[h], sc[h])
				}
			}
			for b := range nb {
				VPBROADCASTD(M(Xp, 256*b+16*j+4*s), xl)
				VPBROADCASTD(M(Xp, 256*b+16*j+8+4*s), xh)
				for h := range 2 {
					VPMADDUBSW(xl, lo[h], t1)
					VPMADDUBSW(xh, hi[h], t2)
					VPADDW(t2, t1, t1)
					if j == 0 && s == 0 {
						VPMADDWD(sc[h], t1, isum(h, b))
					} else {
						VPMADDWD(sc[h], t1, t1)
						VPADDD(t1, isum(h, b), isum(h, b))
					}
				}
			}
		}
	}
	meta := 256 * nb
	Comment("isum −= 32·Σ_j sc_j·bsum_j, with the scale pairs (sc[2k], sc[2k+1]) of each row lane")
	pairs := []reg.VecPhysical{reg.Y6, reg.Y7, reg.Y8, reg.Y9, reg.Y10, reg.Y11, reg.Y12, reg.Y13}
	for h := range 2 {
		for k := range 8 {
			VBROADCASTI128(M(W, k6tSc+128*h+16*k), pairs[k])
			VPSHUFB(pairShuf, pairs[k], pairs[k])
			VPSRAW(U8(8), pairs[k], pairs[k])
		}
		for b := range nb {
			a, t := reg.Y14, reg.Y15
			VPBROADCASTD(M(Xp, meta+48*b+16), a)
			VPMADDWD(pairs[0], a, a)
			for k := 1; k < 8; k++ {
				VPBROADCASTD(M(Xp, meta+48*b+16+4*k), t)
				VPMADDWD(pairs[k], t, t)
				VPADDD(t, a, a)
			}
			VPSLLD(U8(5), a, a)
			VPSUBD(a, isum(h, b), isum(h, b))
		}
	}
	Comment("facc += (d·d_x)·float(isum)")
	for h := range 2 {
		d, t, fa := reg.Y6, reg.Y7, reg.Y8
		VCVTPH2PS(M(W, k6tD+16*h), d)
		for b := range nb {
			VBROADCASTSS(M(Xp, meta+48*b), t)
			VMULPS(t, d, t)
			VCVTDQ2PS(isum(h, b), isum(h, b))
			VMOVUPS(fmem(h, b), fa)
			VFMADD231PS(t, isum(h, b), fa)
			VMOVUPS(fa, fmem(h, b))
		}
	}
	ADDQ(U32(k6tBlock), W)
	ADDQ(U32(k6tX*nb), Xp)
	if pre {
		ADDQ(U32(k6uBlock), U)
	} else {
		pfs.advance()
	}
	DECQ(N)
	JNZ(LabelRef("block"))

	storeY(nb, 32, func(h, b int) reg.VecPhysical {
		VMOVUPS(fmem(h, b), t1)
		return t1
	})
}

// Command _asm generates the amd64 assembly of package kernels with avo.
//
//	go run . -kind matmul    -out ../matmul_amd64.s    -stubs ../matmul_stubs_amd64.go    -pkg kernels
//	go run . -kind attention -out ../attention_amd64.s -stubs ../attention_stubs_amd64.go -pkg kernels
//	go run . -kind ops       -out ../ops_amd64.s       -stubs ../ops_stubs_amd64.go       -pkg kernels
//	go run . -kind kquant    -out ../kquant_amd64.s    -stubs ../kquant_stubs_amd64.go    -pkg kernels
//
// Every kernel is written with physical registers so the register blocking
// is visible in the output. Packed weight layouts are described in
// ../pack_amd64.go; the Go doc comment of each generated stub states what the
// kernel computes. avo v0.5.0 lacks the AVX512_VNNI mnemonics; they are
// emitted through vpdpbusd below, which the Go assembler itself accepts.
package main

import (
	"flag"
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/buildtags"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

var (
	kind   = flag.String("kind", "matmul", "file to generate: matmul or attention")
	pfKind = flag.String("pfkind", "t0", "prefetch instruction: t0, t1 or t2")
)

// prefetch emits, while *pfn > 0, prefetches of the next `lines` cache lines
// at pf, and advances pf. Kernels use it to pull the next weight tile (or
// cache block) into the caches while they compute on the current one.
func prefetch(pf, pfn reg.Register, lines int, label string) {
	CMPQ(pfn, U8(0))
	JLE(LabelRef(label))
	for i := range lines {
		switch *pfKind {
		case "t0":
			PREFETCHT0(M(pf, 64*i))
		case "t1":
			PREFETCHT1(M(pf, 64*i))
		default:
			PREFETCHT2(M(pf, 64*i))
		}
	}
	ADDQ(U32(64*lines), pf)
	SUBQ(U32(64*lines), pfn)
	Label(label)
}

// spreadPrefetch emits prefetches of lines cache lines at pf, spread over
// the steps of a loop body: step i of n gets its share. pfAdvance then
// moves pf on by the lines while *pfn > 0 (otherwise the same, cached,
// lines are prefetched again), so the body needs no branch.
type spreadPrefetch struct {
	pf, pfn, step, tmp reg.Register
	lines, n           int
}

func (p spreadPrefetch) at(i int) {
	for l := p.lines * i / p.n; l < p.lines*(i+1)/p.n; l++ {
		switch *pfKind {
		case "t0":
			PREFETCHT0(M(p.pf, 64*l))
		case "t1":
			PREFETCHT1(M(p.pf, 64*l))
		default:
			PREFETCHT2(M(p.pf, 64*l))
		}
	}
}

func (p spreadPrefetch) init() { MOVL(U32(64*p.lines), p.step.(reg.GPPhysical).As32()) }

func (p spreadPrefetch) advance() {
	XORL(p.tmp.(reg.GPPhysical).As32(), p.tmp.(reg.GPPhysical).As32())
	CMPQ(p.pfn, U8(0))
	CMOVQGT(p.step, p.tmp)
	ADDQ(p.tmp, p.pf)
	SUBQ(p.tmp, p.pfn)
}

func main() {
	flag.Parse()
	Constraint(buildtags.Not("purego").ToConstraint())
	switch *kind {
	case "matmul":
		for nb := 1; nb <= qMaxNB; nb++ {
			genQ512(nb, false)
		}
		for nb := 1; nb <= qMaxNB; nb++ {
			genQ512(nb, true)
		}
		for _, t := range []string{"bf16", "f16", "f32"} {
			for nb := 1; nb <= fMaxNB; nb++ {
				genF512(nb, t)
			}
		}
		genQuant512()
		genQ2(false)
		genQ2(true)
		for _, t := range []string{"bf16", "f16", "f32"} {
			for nb := 1; nb <= f2MaxNB; nb++ {
				genF2(nb, t)
			}
		}
		genArgmax512()
	case "attention":
		genAttention()
	case "ops":
		genOps()
	case "kquant":
		genKQuant() // kquant.go
	default:
		panic("unknown -kind " + *kind)
	}
	Generate()
}

// Register blocking limits (mirrored in matmul_amd64.go).
const (
	qMaxNB  = 6  // activation rows per Q8_0/Q4_0 AVX-512 kernel call: 2×6 int + 2×6 float accumulators
	fMaxNB  = 12 // activation rows per F32/F16/BF16 AVX-512 kernel call: 2×12 accumulators
	f2MaxNB = 4  // activation rows per AVX2 float kernel call: 2×4 accumulators
)

func Z(i int) reg.VecPhysical {
	return []reg.VecPhysical{reg.Z0, reg.Z1, reg.Z2, reg.Z3, reg.Z4, reg.Z5, reg.Z6, reg.Z7,
		reg.Z8, reg.Z9, reg.Z10, reg.Z11, reg.Z12, reg.Z13, reg.Z14, reg.Z15,
		reg.Z16, reg.Z17, reg.Z18, reg.Z19, reg.Z20, reg.Z21, reg.Z22, reg.Z23,
		reg.Z24, reg.Z25, reg.Z26, reg.Z27, reg.Z28, reg.Z29, reg.Z30, reg.Z31}[i]
}

func Y(i int) reg.VecPhysical {
	return []reg.VecPhysical{reg.Y0, reg.Y1, reg.Y2, reg.Y3, reg.Y4, reg.Y5, reg.Y6, reg.Y7,
		reg.Y8, reg.Y9, reg.Y10, reg.Y11, reg.Y12, reg.Y13, reg.Y14, reg.Y15}[i]
}

func X(i int) reg.VecPhysical {
	return []reg.VecPhysical{reg.X0, reg.X1, reg.X2, reg.X3, reg.X4, reg.X5, reg.X6, reg.X7,
		reg.X8, reg.X9, reg.X10, reg.X11, reg.X12, reg.X13, reg.X14, reg.X15}[i]
}

func M(base reg.Register, disp int) Mem { return Mem{Base: base, Disp: disp} }

// vpdpbusd emits VPDPBUSD s8, u8, acc: each int32 lane of acc += the dot of
// its 4 unsigned bytes of u8 with the 4 signed bytes of s8 (AVX512_VNNI).
func vpdpbusd(s8, u8 Op, acc reg.Register) {
	Instruction(&ir.Instruction{
		Opcode:   "VPDPBUSD",
		Operands: []Op{s8, u8, acc},
		Inputs:   []Op{s8, u8, acc},
		Outputs:  []Op{acc},
		ISA:      []string{"AVX512_VNNI"},
	})
}

// xRowAddr is the address of activation row b of a register block, at
// byte offset disp: rows are xstride apart, reached from bases[b/3] (row 3i)
// plus 0, 1 or 2 strides so that 12 rows need only 4 base registers.
func xRowAddr(bases []reg.Register, stride reg.Register, b, disp int) Mem {
	m := Mem{Base: bases[b/3], Disp: disp}
	if b%3 != 0 {
		m.Index = stride
		m.Scale = uint8(b % 3)
	}
	return m
}

// ---------------------------------------------------------------------------
// Q8_0 / Q4_0 × Q8_0-quantized activations, AVX-512 VNNI.

func genQ512(nb int, q4 bool) {
	t, blockBytes := "q8", 64+8*128
	if q4 {
		t, blockBytes = "q4", 64+4*128
	}
	name := fmt.Sprintf("%sAVX512x%d", t, nb)
	TEXT(name, NOSPLIT, "func(w *byte, x *byte, xm *byte, nblk int, xstride int, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a 32-row × %d-activation tile of y = x·Wᵀ for", name, nb),
		fmt.Sprintf("%s weights packed by packQ (%d bytes per 32×32 block) and activations", map[bool]string{false: "Q8_0", true: "Q4_0"}[q4], blockBytes),
		"quantized by quantQ8 (blocked layout): for b < nb, r < 32,",
		"",
		"\ty[b*ystride/4+r] = Σ_blk float32(Σ_j u[r][j]·q[b][j] + corr[b]) · (d_w[r] · d_x[b])",
		"",
		"where u is the stored unsigned weight code (q+128 for Q8_0, the nibble for Q4_0)",
		"and corr = -offset·Σq undoes the offset; the sum over blk is sequential FMA.",
		"Meanwhile it prefetches pfn bytes at pf (the next tile), a block's worth per block.")
	W := Load(Param("w"), reg.RSI)
	Xp := Load(Param("x"), reg.RDI)
	XM := Load(Param("xm"), reg.R8)
	N := Load(Param("nblk"), reg.RCX)
	XS := Load(Param("xstride"), reg.R9)
	MOVQ(XS, reg.R10)
	SHRQ(U8(2), reg.R10) // meta stride: 8 bytes per row versus 32 quants
	PF := Load(Param("pf"), reg.R11)
	PFN := Load(Param("pfn"), reg.R12)

	facc := func(g, b int) reg.VecPhysical { return Z(g*nb + b) }
	iacc := func(g, b int) reg.VecPhysical { return Z(12 + g*nb + b) }
	Comment("Z0-Z11: f32 accumulators (group g, row b) = Z[g*nb+b]; Z12-Z23: int32 block sums likewise")
	for g := range 2 {
		for b := range nb {
			VPXORD(facc(g, b), facc(g, b), facc(g, b))
		}
	}
	// Q8: Z24/Z25 weights of groups 0/1, Z26/Z27 their scales, Z28 scale product, Z29 activation broadcast.
	// Q4: Z24/Z25 low nibbles, Z26/Z27 high nibbles, Z28/Z29 scales, Z30 activation broadcast, Z31 0x0f mask.
	dw := [2]reg.VecPhysical{reg.Z26, reg.Z27}
	if q4 {
		dw = [2]reg.VecPhysical{reg.Z28, reg.Z29}
		MOVL(U32(0x0f0f0f0f), reg.EAX)
		VPBROADCASTD(reg.EAX, reg.Z31)
	}
	pfs := spreadPrefetch{pf: PF, pfn: PFN, step: reg.R13, tmp: reg.RAX, lines: (blockBytes + 63) / 64, n: 8}
	pfs.init()
	Label("block")
	VCVTPH2PS(M(W, 0), dw[0])
	VCVTPH2PS(M(W, 32), dw[1])
	Comment("start each block sum at corr = -offset·Σq_x")
	for b := range nb {
		VPBROADCASTD(M(XM, 8*b+4), iacc(0, b))
		VMOVDQA32(iacc(0, b), iacc(1, b))
	}
	if !q4 {
		for s := range 8 {
			Commentf("k = 4·%d … 4·%d+3 of the block", s, s)
			pfs.at(s)
			VMOVDQU32(M(W, 64+128*s), reg.Z24)
			VMOVDQU32(M(W, 64+128*s+64), reg.Z25)
			for b := range nb {
				VPBROADCASTD(M(Xp, 32*b+4*s), reg.Z29)
				vpdpbusd(reg.Z29, reg.Z24, iacc(0, b))
				vpdpbusd(reg.Z29, reg.Z25, iacc(1, b))
			}
		}
	} else {
		pfs.n = 4
		for m := range 4 {
			Commentf("k = 4·%d … 4·%d+3 (low nibbles) and 4·%d … 4·%d+3 (high nibbles)", m, m, m+4, m+4)
			pfs.at(m)
			VMOVDQU32(M(W, 64+128*m), reg.Z24)
			VMOVDQU32(M(W, 64+128*m+64), reg.Z25)
			VPSRLW(U8(4), reg.Z24, reg.Z26)
			VPSRLW(U8(4), reg.Z25, reg.Z27)
			VPANDD(reg.Z31, reg.Z24, reg.Z24)
			VPANDD(reg.Z31, reg.Z25, reg.Z25)
			VPANDD(reg.Z31, reg.Z26, reg.Z26)
			VPANDD(reg.Z31, reg.Z27, reg.Z27)
			for b := range nb {
				VPBROADCASTD(M(Xp, 32*b+4*m), reg.Z30)
				vpdpbusd(reg.Z30, reg.Z24, iacc(0, b))
				vpdpbusd(reg.Z30, reg.Z25, iacc(1, b))
				VPBROADCASTD(M(Xp, 32*b+4*(m+4)), reg.Z30)
				vpdpbusd(reg.Z30, reg.Z26, iacc(0, b))
				vpdpbusd(reg.Z30, reg.Z27, iacc(1, b))
			}
		}
	}
	Comment("acc += float(sum) · (d_w · d_x)")
	tmp := reg.Z28
	if q4 {
		tmp = reg.Z24
	}
	for b := range nb {
		for g := range 2 {
			VCVTDQ2PS(iacc(g, b), iacc(g, b))
			VMULPS_BCST(M(XM, 8*b), dw[g], tmp)
			VFMADD231PS(tmp, iacc(g, b), facc(g, b))
		}
	}
	ADDQ(U32(blockBytes), W)
	ADDQ(XS, Xp)
	ADDQ(reg.R10, XM)
	pfs.advance()
	DECQ(N)
	JNZ(LabelRef("block"))

	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range nb {
		VMOVUPS(facc(0, b), M(Yp, 0))
		VMOVUPS(facc(1, b), M(Yp, 64))
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	VZEROUPPER()
	RET()
}

// ---------------------------------------------------------------------------
// F32 / F16 / BF16 × f32 activations, AVX-512 FMA.

// fKStride is the packed bytes of one k of a 32-row tile (see packF).
var fKStride = map[string]int{"bf16": 64, "f16": 64, "f32": 128}

func genF512(nb int, t string) {
	name := fmt.Sprintf("%sAVX512x%d", t, nb)
	TEXT(name, NOSPLIT, "func(w *byte, x *float32, xstride int, nk int, y *float32, ystride int, pf *byte, pfn int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a 32-row × %d-activation tile of y = x·Wᵀ for", name, nb),
		fmt.Sprintf("%s weights packed by packF: for b < nb, r < 32,", t),
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

	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range nb {
		VMOVUPS(acc(0, b), M(Yp, 0))
		VMOVUPS(acc(1, b), M(Yp, 64))
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	VZEROUPPER()
	RET()
}

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

// ---------------------------------------------------------------------------
// AVX2 fallbacks: one 16-row group per call.

func genQ2(q4 bool) {
	t, blockBytes := "q8", 64+8*128
	if q4 {
		t, blockBytes = "q4", 64+4*128
	}
	name := t + "AVX2"
	TEXT(name, NOSPLIT, "func(ws *byte, wq *byte, x *byte, xm *byte, nblk int, xstride int, y *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is the AVX2 %s kernel for one 16-row group of a packed tile and one", name, map[bool]string{false: "Q8_0", true: "Q4_0"}[q4]),
		"activation row: ws points at the group's scales, wq at its first quants",
		fmt.Sprintf("(blocks are %d bytes apart); x/xm at the row's quants/meta. y gets 16 floats.", blockBytes))
	if !q4 {
		Comment("VPMADDUBSW saturates at 2·255·127, so Q8_0 uses |w|·sign(x, w) instead of the offset.")
	}
	WS := Load(Param("ws"), reg.RSI)
	WQ := Load(Param("wq"), reg.RDX)
	Xp := Load(Param("x"), reg.RDI)
	XM := Load(Param("xm"), reg.R8)
	N := Load(Param("nblk"), reg.RCX)
	XS := Load(Param("xstride"), reg.R9)
	MOVQ(XS, reg.R10)
	SHRQ(U8(2), reg.R10)
	// Y0/Y1 f32 accumulators (rows 0-7, 8-15), Y2/Y3 int32 sums, Y14 int16 ones, Y15 byte constant.
	VPXOR(reg.Y0, reg.Y0, reg.Y0)
	VPXOR(reg.Y1, reg.Y1, reg.Y1)
	MOVL(U32(0x00010001), reg.EAX)
	VMOVD(reg.EAX, reg.X14)
	VPBROADCASTD(reg.X14, reg.Y14)
	if q4 {
		MOVL(U32(0x0f0f0f0f), reg.EAX)
	} else {
		MOVL(U32(0x80808080), reg.EAX)
	}
	VMOVD(reg.EAX, reg.X15)
	VPBROADCASTD(reg.X15, reg.Y15)
	Label("block")
	if q4 {
		VPBROADCASTD(M(XM, 4), reg.Y2)
		VMOVDQA(reg.Y2, reg.Y3)
		for m := range 4 {
			VPBROADCASTD(M(Xp, 4*m), reg.Y6)
			VPBROADCASTD(M(Xp, 4*(m+4)), reg.Y7)
			for h := range 2 {
				acc := Y(2 + h)
				VMOVDQU(M(WQ, 128*m+32*h), reg.Y4)
				VPAND(reg.Y15, reg.Y4, reg.Y5)
				VPMADDUBSW(reg.Y6, reg.Y5, reg.Y5)
				VPMADDWD(reg.Y14, reg.Y5, reg.Y5)
				VPADDD(reg.Y5, acc, acc)
				VPSRLW(U8(4), reg.Y4, reg.Y4)
				VPAND(reg.Y15, reg.Y4, reg.Y4)
				VPMADDUBSW(reg.Y7, reg.Y4, reg.Y4)
				VPMADDWD(reg.Y14, reg.Y4, reg.Y4)
				VPADDD(reg.Y4, acc, acc)
			}
		}
	} else {
		VPXOR(reg.Y2, reg.Y2, reg.Y2)
		VPXOR(reg.Y3, reg.Y3, reg.Y3)
		for s := range 8 {
			VPBROADCASTD(M(Xp, 4*s), reg.Y6)
			for h := range 2 {
				acc := Y(2 + h)
				VMOVDQU(M(WQ, 128*s+32*h), reg.Y4)
				VPXOR(reg.Y15, reg.Y4, reg.Y4) // signed w
				VPABSB(reg.Y4, reg.Y5)
				VPSIGNB(reg.Y4, reg.Y6, reg.Y7)
				VPMADDUBSW(reg.Y7, reg.Y5, reg.Y5)
				VPMADDWD(reg.Y14, reg.Y5, reg.Y5)
				VPADDD(reg.Y5, acc, acc)
			}
		}
	}
	VCVTPH2PS(M(WS, 0), reg.Y10)
	VCVTPH2PS(M(WS, 16), reg.Y11)
	VBROADCASTSS(M(XM, 0), reg.Y12)
	VMULPS(reg.Y12, reg.Y10, reg.Y10)
	VMULPS(reg.Y12, reg.Y11, reg.Y11)
	VCVTDQ2PS(reg.Y2, reg.Y2)
	VCVTDQ2PS(reg.Y3, reg.Y3)
	VFMADD231PS(reg.Y10, reg.Y2, reg.Y0)
	VFMADD231PS(reg.Y11, reg.Y3, reg.Y1)
	ADDQ(U32(blockBytes), WS)
	ADDQ(U32(blockBytes), WQ)
	ADDQ(XS, Xp)
	ADDQ(reg.R10, XM)
	DECQ(N)
	JNZ(LabelRef("block"))
	Yp := Load(Param("y"), reg.RAX)
	VMOVUPS(reg.Y0, M(Yp, 0))
	VMOVUPS(reg.Y1, M(Yp, 32))
	VZEROUPPER()
	RET()
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
	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range nb {
		VMOVUPS(acc(0, b), M(Yp, 0))
		VMOVUPS(acc(1, b), M(Yp, 32))
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	VZEROUPPER()
	RET()
}

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

// Command _asm generates the amd64 assembly of package kernels with avo.
//
//	go run . -kind matmul    -out ../matmul_amd64.s    -stubs ../matmul_stubs_amd64.go    -pkg kernels
//	go run . -kind attention -out ../attention_amd64.s -stubs ../attention_stubs_amd64.go -pkg kernels
//	go run . -kind ops       -out ../ops_amd64.s       -stubs ../ops_stubs_amd64.go       -pkg kernels
//	go run . -kind kquant    -out ../kquant_amd64.s    -stubs ../kquant_stubs_amd64.go    -pkg kernels
//	go run . -kind legacy    -out ../legacy_amd64.s    -stubs ../legacy_stubs_amd64.go    -pkg kernels
//
// Every kernel is written with physical registers so the register blocking
// is visible in the output. Packed weight layouts are described in
// ../matmul_amd64.go; the Go doc comment of each generated stub states what the
// kernel computes. avo v0.5.0 lacks the AVX512_VNNI mnemonics; they are
// emitted through vpdpbusd below, which the Go assembler itself accepts.
package main

import (
	"flag"
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

// prefetchL2 is prefetch with PREFETCHT2 whatever -pfkind says: the q8_0
// attention kernels stream their next blocks into L2 only (measured on the
// Xeon: ~17 % less CPU per q8_0 decode layer at 4,096 positions than
// PREFETCHT0, presumably because fewer L1 fill buffers are tied up).
func prefetchL2(pf, pfn reg.Register, lines int, label string) {
	save := *pfKind
	*pfKind = "t2"
	prefetch(pf, pfn, lines, label)
	*pfKind = save
}

// storeY ends a kernel: for each of nb activation rows b it stores the two
// 8- or 16-float halves h of the row's result, val(h, b) (which may first load
// them into a register), to y + b·ystride + h·halfBytes; then VZEROUPPER, RET.
func storeY(nb, halfBytes int, val func(h, b int) reg.VecPhysical) {
	Yp := Load(Param("y"), reg.RAX)
	YS := Load(Param("ystride"), reg.RBX)
	for b := range nb {
		for h := range 2 {
			VMOVUPS(val(h, b), M(Yp, halfBytes*h))
		}
		if b+1 < nb {
			ADDQ(YS, Yp)
		}
	}
	VZEROUPPER()
	RET()
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
		onesW = ymmConst("ones_w", 0x00010001)
		for _, q4 := range []bool{false, true} {
			for nb := 1; nb <= q2MaxNB; nb++ {
				genQ2(nb, q4)
			}
		}
		genQR32(false)
		genQR32(true)
		for nb := q2PMinNB; nb <= q2PMaxNB; nb++ {
			genQ2P(nb)
		}
		for _, t := range []string{"bf16", "f16", "f32"} {
			for nb := 1; nb <= f2MaxNB; nb++ {
				genF2(nb, t)
			}
		}
		genArgmax512()
		genQuant2()
		genArgmax2()
	case "attention":
		genAttention()
	case "ops":
		genOps()
	case "kquant":
		genKQuant() // kquant.go
	case "legacy":
		genLegacyTiles() // legacy.go
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

package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ---------------------------------------------------------------------------
// Attention scores over a q8_0 cache as integer block dots (the kernels
// q8ScoresAVX512 and q8ScoresAVX2; the plain-Go specification is q8Score in
// attention.go). The query rows of a pass come quantized to q8_0 blocks;
// per call the 16 cached keys' blocks are transposed so that each vector
// holds 4 bytes of one block at every position (one lane per position), and
// one integer multiply-add per 4 bytes serves all 16 positions of a row.
// The int32 block dots are exact in any order; the float part follows
// q8Score exactly: per block float(dot)·(d_k·d_q) added to the row's score
// in block order, then one multiply by scale.
//
// Shared layout (Go's q8Query): row h's int8 q of block b at q + 512h + 32b,
// its |q| at q + 512h + 256 + 32b, its d (f32) at m + 64h + 8b and the
// AVX-512 correction -128·Σq (int32) at m + 64h + 8b + 4; the scores of row
// h go to s + 64h (AVX-512) or, position-major, s[8p+h] (AVX2, via sh + 64h).
// Meanwhile they prefetch the next call's keys at kn into L2 (9 lines per
// block of the 16 rows: 16·34 bytes are 8.5 lines; see prefetchL2).

// q8ScoreRegs are the general registers of both score kernels.
var q8ScoreRegs = struct {
	bases                    []reg.Register // rows 0, 3, 6, 9, 12, 15 of the current block
	qq, qd, kn, s, h, rs, nb reg.Register
	dk                       reg.Register
}{
	bases: []reg.Register{reg.RAX, reg.RBX, reg.RCX, reg.RDX, reg.RSI, reg.RDI},
	qq:    reg.R8, qd: reg.R9, kn: reg.R10, s: reg.R11, h: reg.R12, rs: reg.R13, nb: reg.R14, dk: reg.R15,
}

// q8ScoresStart emits the common start of the score kernels: RS = the row
// stride, the key scales of all blocks of the 16 rows gathered into dk
// ((blocks, 16) f16), the bases set to the 16 rows, and the scores of the g
// rows zeroed in the buffer of parameter sums, which goes to register s
// (zero is a zeroed vector register of the kernel's width, size its bytes).
func q8ScoresStart(sums string, zero reg.VecPhysical, size int) {
	r := q8ScoreRegs
	const blk = 34
	Load(Param("nb"), r.rs)
	IMUL3Q(U8(blk), r.rs, r.rs)
	setBases := func() {
		Load(Param("k"), r.bases[0])
		for i := 1; i < len(r.bases); i++ {
			LEAQ(Mem{Base: r.bases[i-1], Index: r.rs, Scale: 2}, r.bases[i])
			ADDQ(r.rs, r.bases[i])
		}
	}
	setBases()
	Comment("Gather the f16 scales of every block of the 16 keys: dk[16b+p].")
	Load(Param("dk"), r.dk)
	Load(Param("nb"), r.nb)
	Label("gather")
	for p := range 16 {
		MOVWLZX(xRowAddr(r.bases, r.rs, p, 0), r.h.(reg.GPPhysical).As32())
		MOVW(r.h.(reg.GPPhysical).As16(), M(r.dk, 2*p))
	}
	for _, b := range r.bases {
		ADDQ(U8(blk), b)
	}
	ADDQ(U8(32), r.dk)
	DECQ(r.nb)
	JNZ(LabelRef("gather"))
	setBases()
	Load(Param("dk"), r.dk)
	Load(Param("nb"), r.nb)
	Load(Param(sums), r.s)
	Load(Param("q"), r.qq)
	Load(Param("m"), r.qd)
	Load(Param("kn"), r.kn)
	rowsDown("zero", func() {
		for o := 0; o < 64; o += size {
			VMOVUPS(zero, Mem{Base: r.s, Index: r.h, Scale: 1, Disp: o})
		}
	})
}

// rowsDown emits a loop over the rows, last first, with H = 64h.
func rowsDown(label string, body func()) {
	h := q8ScoreRegs.h
	Load(Param("rows"), h)
	SHLQ(U8(6), h)
	Label(label)
	SUBQ(U8(64), h)
	body()
	TESTQ(h, h)
	JNZ(LabelRef(label))
}

// genQ8ScoresAVX512 emits q8ScoresAVX512: keys made unsigned by +128 (XOR
// 0x80) for VPDPBUSD against the signed query bytes, corrected by
// -128·Σq per block (the accumulator's start value).
func genQ8ScoresAVX512() {
	r := q8ScoreRegs
	TEXT("q8ScoresAVX512", NOSPLIT, "func(s *float32, k *byte, nb int, rows int, q *byte, m *uint32, scale float32, dk *uint16, kn *byte)")
	Pragma("noescape")
	Doc("q8ScoresAVX512 sets s[16h+p] = q8Score(query row h, key p) for h < rows ≤ 8 and",
		"the 16 key rows p at k, each nb ≤ 8 ggml block_q8_0 (34 bytes); the query",
		"rows are laid out as in q8Query (q, m); dk is scratch of 16·nb f16.",
		"It prefetches the 16 rows of keys at kn.")
	VPXORD(reg.Z17, reg.Z17, reg.Z17)
	q8ScoresStart("s", reg.Z17, 64)
	VPBROADCASTD(ConstData("q8_bias", U32(0x80808080)), reg.Z31)

	Label("block")
	for i := range 9 {
		PREFETCHT2(M(r.kn, 64*i))
	}
	ADDQ(U32(64*9), r.kn)
	Comment("A_j = [key j | key j+4], A_{4+j} = [key 8+j | key 12+j] of this block, +128.")
	for j := range 8 {
		lo := j%4 + 8*(j/4)
		VMOVDQU(xRowAddr(r.bases, r.rs, lo, 2), Z(j).AsY())
		VINSERTI64X4(U8(1), xRowAddr(r.bases, r.rs, lo+4, 2), Z(j), Z(j))
		VPXORD(reg.Z31, Z(j), Z(j))
	}
	Comment("Transpose: T_i = bytes 4i…4i+3 of the block at positions 0…15 (Z8+i).")
	for g := range 2 {
		a := func(i int) reg.VecPhysical { return Z(4*g + i) }
		u := func(i int) reg.VecPhysical { return Z(8 + 4*g + i) }
		VPUNPCKLDQ(a(1), a(0), u(0))
		VPUNPCKHDQ(a(1), a(0), u(1))
		VPUNPCKLDQ(a(3), a(2), u(2))
		VPUNPCKHDQ(a(3), a(2), u(3))
		VPUNPCKLQDQ(u(2), u(0), a(0)) // dwords 0 | 4
		VPUNPCKHQDQ(u(2), u(0), a(1)) // 1 | 5
		VPUNPCKLQDQ(u(3), u(1), a(2)) // 2 | 6
		VPUNPCKHQDQ(u(3), u(1), a(3)) // 3 | 7
	}
	for i := range 4 {
		VSHUFI32X4(U8(0x88), Z(4+i), Z(i), Z(8+i))
		VSHUFI32X4(U8(0xDD), Z(4+i), Z(i), Z(12+i))
	}
	VCVTPH2PS(M(r.dk, 0), reg.Z16)
	rowsDown("row", func() {
		q := func(i int) Mem { return Mem{Base: r.qq, Index: r.h, Scale: 8, Disp: 4 * i} }
		VPBROADCASTD(Mem{Base: r.qd, Index: r.h, Scale: 1, Disp: 4}, reg.Z17) // -128·Σq
		VPXORD(reg.Z18, reg.Z18, reg.Z18)
		for i := range 8 {
			vpdpbusdBcst(q(i), Z(8+i), []reg.Register{reg.Z17, reg.Z18}[i%2])
		}
		VPADDD(reg.Z18, reg.Z17, reg.Z17)
		VCVTDQ2PS(reg.Z17, reg.Z17)
		VMULPS_BCST(Mem{Base: r.qd, Index: r.h, Scale: 1}, reg.Z16, reg.Z18) // d_k·d_q
		VMULPS(reg.Z18, reg.Z17, reg.Z17)
		VADDPS(Mem{Base: r.s, Index: r.h, Scale: 1}, reg.Z17, reg.Z17)
		VMOVUPS(reg.Z17, Mem{Base: r.s, Index: r.h, Scale: 1})
	})
	q8ScoreNextBlock()

	sc, err := Param("scale").Resolve()
	if err != nil {
		panic(err)
	}
	VBROADCASTSS(sc.Addr, reg.Z30)
	rowsDown("scale", func() {
		VMULPS(Mem{Base: r.s, Index: r.h, Scale: 1}, reg.Z30, reg.Z17)
		VMOVUPS(reg.Z17, Mem{Base: r.s, Index: r.h, Scale: 1})
	})
	VZEROUPPER()
	RET()
}

// transpose8 transposes the 8×8 dwords of Y0…Y7 (row j in Yj) into Y8…Y15
// (column i in Y8+i), using Y0…Y7 as temporaries.
func transpose8() {
	for g := range 2 {
		a := func(i int) reg.VecPhysical { return Y(4*g + i) }
		u := func(i int) reg.VecPhysical { return Y(8 + 4*g + i) }
		VPUNPCKLDQ(a(1), a(0), u(0))
		VPUNPCKHDQ(a(1), a(0), u(1))
		VPUNPCKLDQ(a(3), a(2), u(2))
		VPUNPCKHDQ(a(3), a(2), u(3))
		VPUNPCKLQDQ(u(2), u(0), a(0)) // columns 0 | 4 of rows 4g…4g+3
		VPUNPCKHQDQ(u(2), u(0), a(1)) // 1 | 5
		VPUNPCKLQDQ(u(3), u(1), a(2)) // 2 | 6
		VPUNPCKHQDQ(u(3), u(1), a(3)) // 3 | 7
	}
	for i := range 4 {
		VPERM2I128(U8(0x20), Y(4+i), Y(i), Y(8+i))
		VPERM2I128(U8(0x31), Y(4+i), Y(i), Y(12+i))
	}
}

// genQ8ScoresAVX2 emits q8ScoresAVX2: 8 positions per vector, the products
// by VPMADDUBSW of |q| (unsigned) with the keys given q's sign (VPSIGNB),
// then VPMADDWD into int32 (a pair of products fits int16 when the keys are
// in [-127, 127]).
func genQ8ScoresAVX2() {
	r := q8ScoreRegs
	TEXT("q8ScoresAVX2", NOSPLIT, "func(s *float32, k *byte, nb int, rows int, q *byte, m *uint32, scale float32, dk *uint16, sh *float32, kn *byte)")
	Pragma("noescape")
	Doc("q8ScoresAVX2 sets s[8p+h] = q8Score(query row h, key p) for h < rows ≤ 8 and",
		"the 16 key rows p at k, each nb ≤ 8 ggml block_q8_0 (34 bytes) with q in",
		"[-127, 127]; the query rows are laid out as in q8Query (q with |q|, m). It",
		"writes s[8p+h] for h ≥ rows too (arbitrary values). dk is scratch of 16·nb",
		"f16, sh of 16·8 floats. It prefetches the 16 rows of keys at kn.")
	VPXOR(reg.Y4, reg.Y4, reg.Y4)
	q8ScoresStart("sh", reg.Y4, 32)

	Label("block")
	for i := range 9 {
		PREFETCHT2(M(r.kn, 64*i))
	}
	ADDQ(U32(64*9), r.kn)
	for half := range 2 {
		for j := range 8 {
			VMOVDQU(xRowAddr(r.bases, r.rs, 8*half+j, 2), Y(j))
		}
		transpose8()
		VPCMPEQW(reg.Y7, reg.Y7, reg.Y7)
		VPSRLW(U8(15), reg.Y7, reg.Y7) // int16 1s
		VCVTPH2PS(M(r.dk, 16*half), reg.Y6)
		rowsDown(fmt.Sprintf("row%d", half), func() {
			q := func(i, disp int) Mem { return Mem{Base: r.qq, Index: r.h, Scale: 8, Disp: disp + 4*i} }
			VPXOR(reg.Y4, reg.Y4, reg.Y4)
			VPXOR(reg.Y5, reg.Y5, reg.Y5)
			for i := range 8 {
				VPBROADCASTD(q(i, 0), reg.Y0)
				VPBROADCASTD(q(i, 256), reg.Y1)
				VPSIGNB(reg.Y0, Y(8+i), reg.Y2)    // k·sign(q)
				VPMADDUBSW(reg.Y2, reg.Y1, reg.Y2) // |q|·that, pairs summed in int16
				VPMADDWD(reg.Y7, reg.Y2, reg.Y2)
				acc := []reg.VecPhysical{reg.Y4, reg.Y5}[i%2]
				VPADDD(reg.Y2, acc, acc)
			}
			VPADDD(reg.Y5, reg.Y4, reg.Y4)
			VCVTDQ2PS(reg.Y4, reg.Y4)
			VBROADCASTSS(Mem{Base: r.qd, Index: r.h, Scale: 1}, reg.Y0)
			VMULPS(reg.Y0, reg.Y6, reg.Y0) // d_k·d_q
			VMULPS(reg.Y0, reg.Y4, reg.Y4)
			VADDPS(Mem{Base: r.s, Index: r.h, Scale: 1, Disp: 32 * half}, reg.Y4, reg.Y4)
			VMOVUPS(reg.Y4, Mem{Base: r.s, Index: r.h, Scale: 1, Disp: 32 * half})
		})
	}
	q8ScoreNextBlock()

	Comment("s[8p+h] = scale·sh[16h+p], 8 positions at a time.")
	sc, err := Param("scale").Resolve()
	if err != nil {
		panic(err)
	}
	S := Load(Param("s"), reg.RDX)
	for half := range 2 {
		for h := range 8 {
			VMOVUPS(M(r.s, 64*h+32*half), Y(h))
		}
		transpose8()
		VBROADCASTSS(sc.Addr, reg.Y0)
		for p := range 8 {
			VMULPS(reg.Y0, Y(8+p), Y(8+p))
			VMOVUPS(Y(8+p), M(S, 32*(8*half+p)))
		}
	}
	VZEROUPPER()
	RET()
}

// q8ScoreNextBlock advances both score kernels' pointers (the K rows, the
// query's bytes and scales, the K scales) to the next 32-element block and
// loops to "block" while blocks remain.
func q8ScoreNextBlock() {
	r := q8ScoreRegs
	for _, b := range r.bases {
		ADDQ(U8(34), b)
	}
	ADDQ(U8(32), r.qq)
	ADDQ(U8(8), r.qd)
	ADDQ(U8(32), r.dk)
	DECQ(r.nb)
	JNZ(LabelRef("block"))
}

package main

import (
	"fmt"
	"slices"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ---------------------------------------------------------------------------
// AVX-512: the online-softmax block update of up to 8 query rows over 16
// cached positions, each row with its own position limit (mask registers),
// so that the rows of several prefill tokens share each pass over the cache
// as on the AVX2 path. The score dot products of a group of positions × rows
// (≤ 16 of them) are summed across lanes by one transposition tree (4 levels
// of shuffles and adds for 16 sums, instead of a separate 16-lane reduction
// per sum); every sum goes through the same tree whatever its neighbours, so
// a row's result does not depend on which rows share its pass (decode and
// prefill give the same bits).

// genAttnBlock512 emits attend{F16,F32,Q8}AVX512x<nq> (kind "f16", "f32" or
// "q8"). The q8_0 kernels take the scores given, head-major in s
// (q8ScoresAVX512 computed them as integer block dots), and widen each
// cached value to exactly the f32 d·q of the plain-Go twin (VPMOVSXBD,
// VCVTDQ2PS, one VMULPS by the block's scale), stepping through a row one
// 32-element block (two 16-element chunks) at a time.
func genAttnBlock512(nq int, kind string) {
	t, ld, csz, csh := "F32", "f32", 64, uint8(6) // csz: bytes of 16 cached elements, csh its log2
	f16, q8 := kind == "f16", kind == "q8"
	switch kind {
	case "f16":
		t, ld, csz, csh = "F16", "f16", 32, 5
	case "q8":
		t, ld = "Q8", "q8_0"
	}
	const blk = 34 // bytes of one block_q8_0
	name := fmt.Sprintf("attend%sAVX512x%d", t, nq)
	TEXT(name, NOSPLIT, "func(acc *float32, q *float32, ml *float32, nch int, k *byte, v *byte, cnt int, scale float32, s *float32, lim *int32, kn *byte, vn *byte)")
	Pragma("noescape")
	doc := []string{fmt.Sprintf("%s advances the online softmax of %d query rows by cnt (1…16)", name, nq),
		fmt.Sprintf("cached positions: k and v hold cnt rows of 16·nch %s elements.", ld),
		"q and acc are chunk-interleaved: element 16i+j of row h is at [(i*nq+h)*16+j].",
		"ml holds the running max m[h] at ml[h] and the running sum l[h] at ml[8+h]",
		"for h < 8; row h sees only the first lim[h] ≤ cnt positions (lim[h] = 0 for",
		"h ≥ nq); s is scratch of 16·8+8 floats. For each row h, over p < lim[h]:",
		"",
		"\tsc[p] = scale·q_h·k_p;  m' = max(m, max_p sc[p]);  c = exp(m-m');  w[p] = exp(sc[p]-m')",
		"\tl = l·c + Σ_p w[p];  acc_h = acc_h·c + Σ_p w[p]·v_p;  m = m'",
		"",
		"Every row must see at least one position in its first call (m finite).",
		"Meanwhile it prefetches cnt rows of keys and values at kn and vn (the next block)."}
	if q8 {
		doc = slices.Insert(doc, 2, "A row is nch/2 ggml block_q8_0 (34 bytes: f16 scale d, 32 int8 q; element d·q).",
			"The scores sc[p] of row h are given in s[16h+p] (q8ScoresAVX512); k and kn are not read.")
	}
	Doc(doc...)
	RS := reg.R13 // row stride of k and v in bytes
	Load(Param("nch"), RS)
	if q8 {
		IMUL3Q(U8(blk/2), RS, RS)
	} else {
		SHLQ(U8(csh), RS)
	}
	sc, err := Param("scale").Resolve()
	if err != nil {
		panic(err)
	}
	VBROADCASTSS(sc.Addr, reg.Z27)
	load := func(m Mem, z reg.VecPhysical) {
		if f16 {
			VCVTPH2PS(m, z)
		} else {
			VMOVUPS(m, z)
		}
	}
	// q8: loadD sets d to the block scale at m in every lane; loadQ8 sets z
	// to the 16 int8 at m times d.
	loadD := func(m Mem, d reg.VecPhysical) {
		VPBROADCASTW(m, d.AsY())
		VCVTPH2PS(d.AsY(), d)
	}
	loadQ8 := func(m Mem, d, z reg.VecPhysical) {
		VPMOVSXBD(m, z)
		VCVTDQ2PS(z, z)
		VMULPS(d, z, z)
	}
	// chunkAddr is the address of chunk c of a row at m (c < 2 for q8: the
	// two halves of the block at m).
	chunkAddr := func(m Mem, c int) Mem {
		if q8 {
			return m.Offset(2 + 16*c)
		}
		return m.Offset(csz * c)
	}
	pfLines := 2 * csz / 16 // 4 (f16) or 8 (f32) lines per iteration
	if q8 {
		pfLines = 5 // per position in the value loop (34·nch/2 bytes a row)
	}

	// Up to 4 rows (decode) keep the scores head-major, s[16h+p], and take
	// the softmax one row at a time over the 16 positions in the lanes;
	// more rows (prefill passes) keep them position-major, s[nq·p+h], and
	// take it for all rows at once, rows in the lanes. Both give the same
	// bits (the same max, exps and order of the sum Σw).
	headMajor := nq <= 4 || q8
	wOff := func(h int) int { return 4 * h } // weight of row h at the current position
	wStep := 4 * nq
	if headMajor {
		wOff = func(h int) int { return 64 * h }
		wStep = 4
	}
	if !q8 {
		scores512(nq, headMajor, RS, load, csz, pfLines)
	}

	var S reg.Register
	if headMajor {
		S = attn512SoftmaxRows(nq)
	} else {
		S = attn512Softmax(nq)
	}

	Comment("acc_h = acc_h·c_h + Σ_p w[nq·p+h]·v_p, G 16-element chunks at a time.")
	CNT := Load(Param("cnt"), reg.RCX)
	ACC := Load(Param("acc"), reg.RDI)
	V := Load(Param("v"), reg.R11)
	G := attnChunks(nq)
	VN := Load(Param("vn"), reg.R10)
	VREM := reg.RSI
	MOVQ(CNT, VREM)
	IMULQ(RS, VREM)
	valueGroup := func(G int, sfx string) {
		acc := func(c, h int) reg.VecPhysical { return Z(c*nq + h) }
		for c := range G {
			for h := range nq {
				VMOVUPS(M(ACC, 64*(c*nq+h)), acc(c, h))
				VMULPS_BCST(M(S, 4*128+4*h), acc(c, h), acc(c, h))
			}
		}
		MOVQ(V, reg.RBX)
		MOVQ(S, reg.R8)
		MOVQ(CNT, reg.R12)
		Label("vpos" + sfx)
		if q8 {
			prefetchL2(VN, VREM, pfLines, "vpf"+sfx)
		} else {
			prefetch(VN, VREM, pfLines, "vpf"+sfx)
		}
		for h := range nq {
			VBROADCASTSS(M(reg.R8, wOff(h)), Z(16+h))
		}
		for c := range G {
			vz := []reg.VecPhysical{reg.Z30, reg.Z31}[c%2]
			if q8 {
				if c%2 == 0 {
					loadD(M(reg.RBX, blk*(c/2)), reg.Z28)
				}
				loadQ8(chunkAddr(M(reg.RBX, blk*(c/2)), c%2), reg.Z28, vz)
			} else {
				load(M(reg.RBX, csz*c), vz)
			}
			for h := range nq {
				VFMADD231PS(Z(16+h), vz, acc(c, h))
			}
		}
		ADDQ(RS, reg.RBX)
		ADDQ(U8(wStep), reg.R8)
		DECQ(reg.R12)
		JNZ(LabelRef("vpos" + sfx))
		for c := range G {
			for h := range nq {
				VMOVUPS(acc(c, h), M(ACC, 64*(c*nq+h)))
			}
		}
		ADDQ(U32(64*G*nq), ACC)
		if q8 {
			ADDQ(U32(blk*G/2), V)
		} else {
			ADDQ(U32(csz*G), V)
		}
	}
	Load(Param("nch"), reg.R9)
	one := 1 // chunks of the tail loop
	if q8 {
		// Whole blocks only: nch is even, G ≥ 2.
		SHRQ(U8(1), reg.R9)
		G /= 2
		one = 2
	}
	if G > 1 {
		MOVQ(reg.R9, reg.RAX)
		ANDQ(U8(G-1), reg.RAX) // chunks left for the one-at-a-time loop
		SHRQ(U8(log2(G)), reg.R9)
		JZ(LabelRef("vtail"))
		Label("vgroup")
		valueGroup(G*one, "G")
		DECQ(reg.R9)
		JNZ(LabelRef("vgroup"))
		Label("vtail")
		MOVQ(reg.RAX, reg.R9)
		TESTQ(reg.R9, reg.R9)
		JZ(LabelRef("done"))
	}
	Label("vone")
	valueGroup(one, "1")
	DECQ(reg.R9)
	JNZ(LabelRef("vone"))
	Label("done")
	VZEROUPPER()
	RET()
}

// scores512 emits the score loop of an AVX-512 f16/f32 block update:
// s = scale · q_h·k_p, P positions × all rows at a time, head-major
// (s[16h+p]) or position-major (s[nq·p+h]).
func scores512(nq int, headMajor bool, RS reg.Register, load func(Mem, reg.VecPhysical), csz, pfLines int) {
	KN := Load(Param("kn"), reg.R14)
	KREM := reg.R10
	Load(Param("cnt"), KREM)
	IMULQ(RS, KREM)
	Comment("Scores: scale · q_h·k_p, P positions × all rows at a time.")
	K := Load(Param("k"), reg.RCX)
	S := Load(Param("s"), reg.RDX)
	CNT := Load(Param("cnt"), reg.R9)
	Q, NC := reg.R8, reg.R11
	scoreGroup := func(P int, sfx string) {
		acc := func(p, h int) reg.VecPhysical { return Z(p*nq + h) }
		qz := func(h int) reg.VecPhysical { return Z(16 + h) }
		for p := range P {
			for h := range nq {
				VPXORD(acc(p, h), acc(p, h), acc(p, h))
			}
		}
		// Row p of the group is at bases[p/3] + (p%3)·RS.
		bases := []reg.Register{reg.RAX, reg.RBX, reg.R12}[:(P+2)/3]
		for i, r := range bases {
			if i == 0 {
				MOVQ(K, r)
			} else {
				LEAQ(Mem{Base: bases[i-1], Index: RS, Scale: 2}, r)
				ADDQ(RS, r)
			}
		}
		Load(Param("q"), Q)
		Load(Param("nch"), NC)
		Label("chunk" + sfx)
		prefetch(KN, KREM, pfLines, "kpf"+sfx)
		for h := range nq {
			VMOVUPS(M(Q, 64*h), qz(h))
		}
		for p := range P {
			kz := []reg.VecPhysical{reg.Z30, reg.Z31}[p%2]
			load(xRowAddr(bases, RS, p, 0), kz)
			for h := range nq {
				VFMADD231PS(qz(h), kz, acc(p, h))
			}
		}
		for _, r := range bases {
			ADDQ(U8(csz), r)
		}
		ADDQ(U32(64*nq), Q)
		DECQ(NC)
		JNZ(LabelRef("chunk" + sfx))
		var accs []reg.VecPhysical
		for p := range P {
			for h := range nq {
				accs = append(accs, acc(p, h))
			}
		}
		sum, lane := treeSum(accs, reg.Z24, reg.Z25)
		VMULPS(reg.Z27, sum, sum)
		if headMajor {
			// lane h·P+p = the score of (p, h), stored to s[16h+p].
			hl := make([]int, 0, len(lane))
			for h := range nq {
				for p := range P {
					hl = append(hl, lane[p*nq+h])
				}
			}
			VMOVDQU32(permConst(hl), reg.Z26)
			VPERMPS(sum, reg.Z26, reg.Z28)
			for h := range nq {
				MOVL(U32(((1<<P)-1)<<(h*P)), reg.EDI)
				KMOVW(reg.EDI, reg.K2)
				VMOVUPS(reg.Z28, reg.K2, M(S, 64*h-4*P*h))
			}
			ADDQ(U32(4*P), S)
		} else {
			VMOVDQU32(permConst(lane), reg.Z26)
			VPERMPS(sum, reg.Z26, reg.Z28) // lane p·nq+h = the score of (p, h)
			MOVL(U32(1<<(P*nq)-1), reg.EDI)
			KMOVW(reg.EDI, reg.K2)
			VMOVUPS(reg.Z28, reg.K2, M(S, 0))
			ADDQ(U32(4*nq*P), S)
		}
		for range P {
			ADDQ(RS, K)
		}
	}
	P := attn512Positions(nq)
	{
		Label("group")
		CMPQ(CNT, U8(P))
		JL(LabelRef("rest"))
		scoreGroup(P, "P")
		SUBQ(U8(P), CNT)
		JMP(LabelRef("group"))
		Label("rest")
		// Fewer than P positions left: at most one group of each power of two
		// below P.
		for g := 8; g >= 1; g /= 2 {
			if g >= P {
				continue
			}
			skip := fmt.Sprintf("skip%d", g)
			CMPQ(CNT, U8(g))
			JL(LabelRef(skip))
			scoreGroup(g, fmt.Sprintf("g%d", g))
			SUBQ(U8(g), CNT)
			Label(skip)
		}
	}

}

// attn512Positions is how many positions the AVX-512 score loop handles at
// once for nq rows: P·nq ≤ 16 sums (one transposition tree), at most 8
// positions (three base registers).
func attn512Positions(nq int) int { return min(8, 16/nq) }

// attn512Softmax emits the softmax step of an AVX-512 block update: the
// scores are in s position-major (s[nq·p+h]); all rows at once, rows in the
// lanes of one vector per position; position p of row h counts if
// p < lim[h]. The weights w go back to the same places (0 where p ≥ lim[h]),
// the rescale factors c_h to s[128+h]. It returns the register holding s.
func attn512Softmax(nq int) reg.Register {
	Comment("Softmax step of all rows at once, one vector of rows per position;")
	Comment("position p of row h counts if p < lim[h].")
	S := Load(Param("s"), reg.RDX)
	ML := Load(Param("ml"), reg.R8)
	LIM := Load(Param("lim"), reg.RAX)
	VMOVDQU(M(LIM, 0), reg.Y8)          // lim
	VMOVUPS(M(ML, 0), reg.Y9)           // m
	VPCMPEQD(reg.Y11, reg.Y11, reg.Y11) // -1 in every lane
	VBROADCASTSS(expConsts.negInf, reg.Y12)
	MOVL(U32(1<<nq-1), reg.EDI)
	KMOVW(reg.EDI, reg.K3) // lanes of the nq rows
	VMOVAPS(reg.Y9, reg.Y5)
	VPXOR(reg.Y10, reg.Y10, reg.Y10) // p
	for p := range 16 {
		VPCMPGTD(reg.Y10, reg.Y8, reg.K2) // p < lim
		VMOVAPS(reg.Y12, reg.Y3)
		VMOVUPS(M(S, 4*nq*p), reg.K2, reg.Y3)
		VMAXPS(reg.Y3, reg.Y5, reg.Y5)
		VPSUBD(reg.Y11, reg.Y10, reg.Y10)
	}
	VMOVUPS(reg.Y5, M(ML, 0))      // m'
	VSUBPS(reg.Y5, reg.Y9, reg.Y6) // m - m'
	vexp(reg.Y6, reg.Y0, reg.Y1)   // c
	VMOVUPS(reg.Y6, M(S, 4*128))
	VPXOR(reg.Y10, reg.Y10, reg.Y10)
	for p := range 16 {
		VPCMPGTD(reg.Y10, reg.Y8, reg.K2)
		VMOVAPS(reg.Y12, reg.Y3)
		VMOVUPS(M(S, 4*nq*p), reg.K2, reg.Y3)
		VSUBPS(reg.Y5, reg.Y3, reg.Y3)
		vexp(reg.Y3, reg.Y0, reg.Y1)
		VMOVAPS_Z(reg.Y3, reg.K2, reg.Y3)
		VMOVUPS(reg.Y3, reg.K3, M(S, 4*nq*p))
		VPSUBD(reg.Y11, reg.Y10, reg.Y10)
	}
	// Σw over the 16 positions in hreduce's order (as the head-major
	// softmax sums its lanes): a_i = w_i + w_{i+8}, b_i = a_i + a_{i+4},
	// c_i = b_i + b_{i+2}, Σw = c_0 + c_1.
	for i := range 8 {
		VMOVUPS(M(S, 4*nq*i), Y(0))
		VADDPS(M(S, 4*nq*(i+8)), reg.Y0, yHi(i))
	}
	for _, w := range []int{4, 2, 1} {
		for i := range w {
			VADDPS(yHi(i+w), yHi(i), yHi(i))
		}
	}
	VMOVAPS(yHi(0), reg.Y7)
	VMOVUPS(M(ML, 32), reg.Y4)
	VFMADD213PS(reg.Y7, reg.Y6, reg.Y4) // l = l·c + Σw
	VMOVUPS(reg.Y4, M(ML, 32))
	return S
}

// yHi is Y16+i (EVEX-only registers).
func yHi(i int) reg.VecPhysical {
	return []reg.VecPhysical{reg.Y16, reg.Y17, reg.Y18, reg.Y19, reg.Y20, reg.Y21, reg.Y22, reg.Y23}[i]
}

// attn512SoftmaxRows is attn512Softmax for scores kept head-major
// (s[16h+p]): one row at a time, the 16 positions in the lanes, lanes
// ≥ lim[h] masked. The weights go back to s[16h+p], c_h to s[128+h].
func attn512SoftmaxRows(nq int) reg.Register {
	Comment("Softmax step per row over the 16 lanes of s (lanes ≥ lim[h] masked off).")
	S := Load(Param("s"), reg.RDX)
	ML := Load(Param("ml"), reg.R8)
	LIM := Load(Param("lim"), reg.R10)
	for h := range nq {
		MOVL(M(LIM, 4*h), reg.ECX)
		MOVL(U32(1), reg.EAX)
		SHLL(reg.CL, reg.EAX)
		DECL(reg.EAX)
		KMOVW(reg.EAX, reg.K1) // lanes < lim[h]
		VBROADCASTSS(expConsts.negInf, reg.Z20)
		VMOVUPS(M(S, 64*h), reg.K1, reg.Z20) // scores, -Inf from lim[h] on
		VMOVAPS(reg.Z20, reg.Z21)
		hreduce(reg.Z21, reg.Z24, true)
		VBROADCASTSS(reg.X21, reg.Z21)
		VBROADCASTSS(M(ML, 4*h), reg.Z22) // m
		VMAXPS(reg.Z21, reg.Z22, reg.Z21) // m'
		VSUBPS(reg.Z21, reg.Z22, reg.Z22) // m - m'
		VSUBPS(reg.Z21, reg.Z20, reg.Z20) // sc - m'
		vexp(reg.Z22, reg.Z24, reg.Z25)   // c
		vexp(reg.Z20, reg.Z24, reg.Z25)   // w
		VMOVAPS_Z(reg.Z20, reg.K1, reg.Z20)
		VMOVUPS(reg.Z20, M(S, 64*h))
		hreduce(reg.Z20, reg.Z24, false)
		VMOVSS(M(ML, 32+4*h), reg.X23)
		VFMADD213SS(reg.X20, reg.X22, reg.X23) // l = l·c + Σw
		VMOVSS(reg.X23, M(ML, 32+4*h))
		VMOVSS(reg.X21, M(ML, 4*h))
		VMOVSS(reg.X22, M(S, 4*128+4*h))
	}
	return S
}

// hreduce leaves in the low lane of x the max (max=true) or sum of the 16
// lanes of z (x is z's xmm view), using t as a temporary: lane pairs i, i+8,
// then i, i+4, then i, i+2, then i, i+1.
func hreduce(z, t reg.VecPhysical, max bool) {
	op := func(a, b, d Op) {
		if max {
			VMAXPS(a, b, d)
		} else {
			VADDPS(a, b, d)
		}
	}
	y, x := z.AsY(), z.AsX()
	VEXTRACTF32X8(U8(1), z, t.AsY())
	op(t.AsY(), y, y)
	VEXTRACTF32X4(U8(1), y, t.AsX())
	op(t.AsX(), x, x)
	VPERMILPS(U8(0x4e), x, t.AsX())
	op(t.AsX(), x, x)
	VPERMILPS(U8(0xb1), x, t.AsX())
	op(t.AsX(), x, x)
}

// tslot is what one lane of a vector holds during treeSum: part of the sum
// of input vector in (-1: nothing of use), over the input lanes in lanes.
type tslot struct {
	in    int
	lanes uint16
}

// treeSum emits the lane sums of the n ≤ 16 vectors vs into the lanes of
// vs[0] (overwriting vs), using t and u, and returns that register and the
// lane holding each input's sum. Four levels, each pairing neighbouring
// vectors (an odd one with itself) and adding the two halves each keeps:
// 256-bit halves, 128-bit quarters, then pairs and single elements within
// 128 bits. Each input's sum is always ((l0+l8)+(l4+l12)) + … in the same
// order, whatever the other inputs are. The generator tracks every lane
// and panics if a sum were incomplete or mixed.
func treeSum(vs []reg.VecPhysical, t, u reg.VecPhysical) (reg.VecPhysical, []int) {
	type vec struct {
		r reg.VecPhysical
		s [16]tslot
	}
	cur := make([]vec, len(vs))
	for i, r := range vs {
		cur[i].r = r
		for j := range 16 {
			cur[i].s[j] = tslot{i, 1 << j}
		}
	}
	// The four levels: shuffle kind (true: 128-bit chunks, VSHUFF32X4) and
	// the immediates of the two halves.
	levels := []struct {
		chunks bool
		lo, hi uint8
	}{{true, 0x44, 0xEE}, {true, 0x88, 0xDD}, {false, 0x88, 0xDD}, {false, 0x88, 0xDD}}
	shuf := func(chunks bool, imm uint8, a, b [16]tslot) [16]tslot {
		var d [16]tslot
		sel := func(i int) uint8 { return (imm >> (2 * i)) & 3 }
		for c := range 4 {
			for j := range 4 {
				if chunks {
					src := a
					if c >= 2 {
						src = b
					}
					d[4*c+j] = src[4*int(sel(c))+j]
				} else {
					src := a
					if j >= 2 {
						src = b
					}
					d[4*c+j] = src[4*c+int(sel(j))]
				}
			}
		}
		return d
	}
	add := func(a, b [16]tslot) [16]tslot {
		var d [16]tslot
		for j := range 16 {
			if a[j].in >= 0 && a[j].in == b[j].in && a[j].lanes&b[j].lanes == 0 {
				d[j] = tslot{a[j].in, a[j].lanes | b[j].lanes}
			} else {
				d[j] = tslot{-1, 0}
			}
		}
		return d
	}
	for _, lv := range levels {
		var next []vec
		for i := 0; i < len(cur); i += 2 {
			a, b := cur[i], cur[i]
			if i+1 < len(cur) {
				b = cur[i+1]
			}
			if lv.chunks {
				VSHUFF32X4(U8(lv.lo), b.r, a.r, t)
				VSHUFF32X4(U8(lv.hi), b.r, a.r, u)
			} else {
				VSHUFPS(U8(lv.lo), b.r, a.r, t)
				VSHUFPS(U8(lv.hi), b.r, a.r, u)
			}
			VADDPS(u, t, a.r)
			next = append(next, vec{a.r, add(shuf(lv.chunks, lv.lo, a.s, b.s), shuf(lv.chunks, lv.hi, a.s, b.s))})
		}
		cur = next
	}
	if len(cur) != 1 {
		panic("treeSum: more than 16 inputs")
	}
	lane := make([]int, len(vs))
	for i := range lane {
		lane[i] = -1
		for j, s := range cur[0].s {
			if s.in == i && s.lanes == 0xFFFF {
				lane[i] = j
				break
			}
		}
		if lane[i] < 0 {
			panic(fmt.Sprintf("treeSum: no complete sum of input %d", i))
		}
	}
	return cur[0].r, lane
}

var permConsts = map[string]Mem{}

// permConst returns the VPERMPS index vector that moves lane[i] to lane i
// (the remaining lanes take lane 0).
func permConst(lane []int) Mem {
	key := fmt.Sprint(lane)
	if m, ok := permConsts[key]; ok {
		return m
	}
	m := GLOBL(fmt.Sprintf("attn512_perm%d", len(permConsts)), RODATA|NOPTR)
	for i := range 16 {
		v := 0
		if i < len(lane) {
			v = lane[i]
		}
		DATA(4*i, U32(v))
	}
	permConsts[key] = m
	return m
}

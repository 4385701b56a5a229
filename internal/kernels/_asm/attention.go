package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// attnMaxNQ is the largest number of query heads per KV head handled in one
// pass (mirrored in attention_amd64.go).
const attnMaxNQ = 8

func genAttention() {
	initExpConsts()
	for _, kind := range []string{"f16", "f32", "q8"} {
		for nq := 1; nq <= attnMaxNQ; nq++ {
			genAttnBlock512(nq, kind)
		}
	}
	initExp8Consts()
	for _, f16 := range []bool{true, false} {
		for nq := 1; nq <= attnMaxNQ; nq++ {
			genAttnBlock2(nq, f16)
		}
	}
	for nq := 1; nq <= attnMaxNQ; nq++ {
		genAttnBlock2Q8(nq)
	}
	genAttnOut2()
	genQ8ScoresAVX512()
	genQ8ScoresAVX2()
}

// expConsts are Cephes expf: exp(x) = 2^n · (1 + r·(1 + r·P(r))), r = x - n·ln2.
var expConsts struct {
	min, log2e, c1, c2, one, negInf Mem
	p                               [6]Mem
}

func initExpConsts() {
	f := func(name string, v float32) Mem { return ConstData(name, U32(math.Float32bits(v))) }
	expConsts.min = f("exp_min", -87.33654)
	expConsts.log2e = f("exp_log2e", 1.44269504088896341)
	expConsts.c1 = f("exp_c1", 0.693359375)
	expConsts.c2 = f("exp_c2", -2.12194440e-4)
	expConsts.one = f("exp_one", 1)
	expConsts.negInf = f("neg_inf", float32(math.Inf(-1)))
	for i, c := range []float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1} {
		expConsts.p[i] = f(fmt.Sprintf("exp_p%d", i), c)
	}
}

// vexp sets x = exp(x) in every lane, using n and t as temporaries. Inputs
// below -87.3 (including -Inf) are clamped there, giving about 1e-38.
func vexp(x, n, t reg.VecPhysical) {
	VMAXPS_BCST(expConsts.min, x, x)
	VMULPS_BCST(expConsts.log2e, x, n)
	VRNDSCALEPS(U8(0), n, n)              // n = round(x·log2e)
	VFNMADD231PS_BCST(expConsts.c1, n, x) // r = x - n·c1
	VFNMADD231PS_BCST(expConsts.c2, n, x) //   - n·c2
	VBROADCASTSS(expConsts.p[0], t)
	for _, p := range expConsts.p[1:] {
		VFMADD213PS_BCST(p, x, t) // t = t·r + p
	}
	VFMADD213PS_BCST(expConsts.one, x, t) // t = t·r + 1
	VFMADD213PS_BCST(expConsts.one, x, t) // t = t·r + 1
	VSCALEFPS(n, t, x)                    // x = t·2^n
}

// attnChunks is how many 16-element chunks of the head the value loop
// accumulates at once: G·nq ≤ 16 accumulators.
func attnChunks(nq int) int {
	switch {
	case nq <= 2:
		return 8
	case nq <= 4:
		return 4
	}
	return 2
}

func log2(n int) uint8 {
	var l uint8
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}

// ---------------------------------------------------------------------------
// AVX2 + FMA + F16C: the same online-softmax block update on 8-lane
// vectors. There are no mask registers: lanes past a row's valid positions
// are blended to -Inf before the max and cleared after the exp, using the
// per-row counts in lim (this is what lets one call serve the rows of
// several consecutive query tokens under a causal mask).

// exp8 holds the Cephes expf constants as 8-lane vectors (AVX2 FMA has no
// broadcast memory operands), plus the lane indices 0…15 and -Inf.
var exp8 struct {
	min, log2e, c1, c2, one, negInf, iota Mem
	p                                     [6]Mem
}

func initExp8Consts() {
	vec := func(name string, v float32) Mem { return ymmConst(name, math.Float32bits(v)) }
	exp8.min = vec("exp8_min", -87.33654)
	exp8.log2e = vec("exp8_log2e", 1.44269504088896341)
	exp8.c1 = vec("exp8_c1", 0.693359375)
	exp8.c2 = vec("exp8_c2", -2.12194440e-4)
	exp8.one = vec("exp8_one", 1)
	exp8.negInf = vec("exp8_neg_inf", float32(math.Inf(-1)))
	for i, c := range []float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1} {
		exp8.p[i] = vec(fmt.Sprintf("exp8_p%d", i), c)
	}
	exp8.iota = GLOBL("attn_lane_iota", RODATA|NOPTR)
	for i := range 16 {
		DATA(4*i, U32(i))
	}
}

// vexp8 sets x = exp(x) in every lane (as vexp), using n and t as
// temporaries; 2^n is built in the exponent bits.
func vexp8(x, n, t reg.VecPhysical) {
	VMAXPS(exp8.min, x, x)
	VMULPS(exp8.log2e, x, n)
	VROUNDPS(U8(0), n, n)       // n = round(x·log2e)
	VFNMADD231PS(exp8.c1, n, x) // r = x - n·c1
	VFNMADD231PS(exp8.c2, n, x) //   - n·c2
	VMOVUPS(exp8.p[0], t)
	for _, p := range exp8.p[1:] {
		VFMADD213PS(p, x, t) // t = t·r + p
	}
	VFMADD213PS(exp8.one, x, t) // t = t·r + 1
	VFMADD213PS(exp8.one, x, t) // t = t·r + 1
	VCVTPS2DQ(n, n)
	VPSLLD(U8(23), n, n)
	VPADDD(exp8.one, n, n) // bits of 2^n (n ≥ -126 after the clamp)
	VMULPS(n, t, x)
}

// genAttnBlock2 emits the AVX2 online-softmax update of nq query rows over
// one block of cnt ≤ 16 cached positions. Rows are taken in groups of up to
// 4: the score loop keeps P keys of a chunk in registers and each row's
// query chunk once, so every load feeds several FMAs; the softmax runs on
// all 8 rows at once, one vector per position (scores are stored
// position-major); the value loop keeps each position's row weights in
// registers over G chunks of the head.
func genAttnBlock2(nq int, f16 bool) {
	t, ld, csz, csh := "F32", "f32", 32, uint8(5) // csz: bytes of 8 cached elements, csh its log2
	if f16 {
		t, ld, csz, csh = "F16", "f16", 16, 4
	}
	name := fmt.Sprintf("attend%sAVX2x%d", t, nq)
	TEXT(name, NOSPLIT, "func(acc *float32, q *float32, ml *float32, nch int, k *byte, v *byte, cnt int, scale float32, s *float32, lim *int32, kn *byte, vn *byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s advances the online softmax of %d query rows by cnt (1…16)", name, nq),
		fmt.Sprintf("cached positions: k and v hold cnt rows of 8·nch %s elements.", ld),
		"q and acc are chunk-interleaved: element 8i+j of row h is at [(i*nq+h)*8+j].",
		"ml holds the running max m[h] at ml[h] and the running sum l[h] at ml[8+h]",
		"for h < 8; row h sees only the first lim[h] ≤ cnt positions (lim[h] = 0 for",
		"h ≥ nq); s is scratch of 16·8+8 floats. For each row h, over p < lim[h]:",
		"",
		"\tsc[p] = scale·q_h·k_p;  m' = max(m, max_p sc[p]);  c = exp(m-m');  w[p] = exp(sc[p]-m')",
		"\tl = l·c + Σ_p w[p];  acc_h = acc_h·c + Σ_p w[p]·v_p;  m = m'",
		"",
		"Every row must see at least one position in its first call (m finite).",
		"Meanwhile it prefetches cnt rows of keys and values at kn and vn (the next block).")
	RS := reg.R13 // row stride of k and v in bytes
	Load(Param("nch"), RS)
	SHLQ(U8(csh), RS)
	sc, err := Param("scale").Resolve()
	if err != nil {
		panic(err)
	}
	load := func(m Mem, y reg.VecPhysical) {
		if f16 {
			VCVTPH2PS(m, y)
		} else {
			VMOVUPS(m, y)
		}
	}
	pfLines := 2 * csz / 16 // 2 (f16) or 4 (f32) lines per iteration
	KN := Load(Param("kn"), reg.R14)
	KREM := reg.R12
	Load(Param("cnt"), KREM)
	IMULQ(RS, KREM)
	VN := Load(Param("vn"), reg.R10)
	VREM := reg.RSI
	Load(Param("cnt"), VREM)
	IMULQ(RS, VREM)

	Comment("Scores: s[8p+h] = scale · q_h·k_p, rows in groups of up to 4, P positions at a time.")
	for h0 := 0; h0 < nq; h0 += 4 {
		R := min(4, nq-h0)
		P := attn2Positions(R)
		K := Load(Param("k"), reg.RCX)
		S := Load(Param("s"), reg.RDX)
		CNT := Load(Param("cnt"), reg.R9)
		scoreGroup := func(P int, sfx string) {
			acc := func(p, h int) reg.VecPhysical { return Y(p*R + h) }
			kreg := func(p int) reg.VecPhysical { return Y(R*P + p) }
			for p := range P {
				for h := range R {
					VXORPS(acc(p, h), acc(p, h), acc(p, h))
				}
			}
			bases := []reg.Register{reg.RAX, reg.RBX}[:(P+2)/3]
			for i, r := range bases {
				if i == 0 {
					MOVQ(K, r)
				} else {
					LEAQ(Mem{Base: bases[i-1], Index: RS, Scale: 2}, r)
					ADDQ(RS, r)
				}
			}
			Load(Param("q"), reg.R8)
			if h0 > 0 {
				ADDQ(U32(32*h0), reg.R8)
			}
			MOVQ(RS, reg.R11)
			SHRQ(U8(csh), reg.R11) // nch
			Label("chunk" + sfx)
			prefetch(KN, KREM, pfLines, "kpf"+sfx)
			for p := range P {
				load(xRowAddr(bases, RS, p, 0), kreg(p))
			}
			for h := range R {
				VMOVUPS(M(reg.R8, 32*h), reg.Y15)
				for p := range P {
					VFMADD231PS(reg.Y15, kreg(p), acc(p, h))
				}
			}
			for _, r := range bases {
				ADDQ(U8(csz), r)
			}
			ADDQ(U32(32*nq), reg.R8)
			DECQ(reg.R11)
			JNZ(LabelRef("chunk" + sfx))
			VBROADCASTSS(sc.Addr, reg.Y15)
			for p := range P {
				reduce4(acc, p, R, kreg(0), Y(R*P+1)) // Y(R*P+1): kreg(1), or free for P = 1
				VMULPS(reg.X15, acc(p, 0).AsX(), acc(p, 0).AsX())
				VMOVUPS(acc(p, 0).AsX(), M(S, 32*p+4*h0))
			}
			ADDQ(U8(32*P), S)
			for range P {
				ADDQ(RS, K)
			}
		}
		g := fmt.Sprintf("r%d", h0)
		// groups loops at label name: while CNT ≥ k (and, with not4, CNT ≠
		// 4) it scores k positions, then goes on at label next.
		groups := func(k int, name, sfx, next string, not4 bool) {
			Label(name + g)
			if not4 {
				CMPQ(CNT, U8(4))
				JE(LabelRef(next + g))
			}
			CMPQ(CNT, U8(k))
			JL(LabelRef(next + g))
			scoreGroup(k, sfx+g)
			SUBQ(U8(k), CNT)
			JMP(LabelRef(name + g))
		}
		if P > 1 {
			if P == 3 {
				// Groups of 3 while that leaves no single position behind
				// (4 left: 2 + 2), then pairs: a one-position group has only
				// R independent accumulators and runs at the FMA latency, not
				// its throughput (16 positions: 3+3+3+3+2+2 instead of 3·5+1).
				groups(3, "group", "P", "pairs", true)
				groups(2, "pairs", "Q", "single", false)
			} else {
				groups(P, "group", "P", "single", false)
			}
			Label("single" + g)
			TESTQ(CNT, CNT)
			JZ(LabelRef("scored" + g))
		} else {
			Label("single" + g)
		}
		scoreGroup(1, "1"+g)
		DECQ(CNT)
		JNZ(LabelRef("single" + g))
		Label("scored" + g)
	}

	S := attn2Softmax()

	Comment("acc_h = acc_h·c_h + Σ_p w[8p+h]·v_p, rows in groups of up to 4, G 8-element chunks at a time.")
	vr := attn2ValueRows(nq)
	for h0 := 0; h0 < nq; h0 += vr {
		R := min(vr, nq-h0)
		G := attn2Chunks(R)
		ACC := Load(Param("acc"), reg.RDI)
		if h0 > 0 {
			ADDQ(U32(32*h0), ACC)
		}
		V := Load(Param("v"), reg.R11)
		CNT := Load(Param("cnt"), reg.RCX)
		valueGroup := func(G int, sfx string) {
			acc := func(c, h int) reg.VecPhysical { return Y(c*R + h) }
			w := func(h int) reg.VecPhysical { return Y(G*R + h) }
			loads := []reg.VecPhysical{reg.Y15}
			if G*R+R+2 <= 16 {
				loads = append(loads, reg.Y14)
			}
			for h := range R {
				VBROADCASTSS(M(S, 32*16+4*(h0+h)), w(h))
			}
			for c := range G {
				for h := range R {
					VMULPS(M(ACC, 32*(c*nq+h)), w(h), acc(c, h))
				}
			}
			MOVQ(V, reg.RBX)
			MOVQ(S, reg.R8)
			MOVQ(CNT, reg.R12)
			Label("vpos" + sfx)
			prefetch(VN, VREM, pfLines, "vpf"+sfx)
			for h := range R {
				VBROADCASTSS(M(reg.R8, 4*(h0+h)), w(h))
			}
			for c := range G {
				vy := loads[c%len(loads)]
				load(M(reg.RBX, csz*c), vy)
				for h := range R {
					VFMADD231PS(w(h), vy, acc(c, h))
				}
			}
			ADDQ(RS, reg.RBX)
			ADDQ(U8(32), reg.R8)
			DECQ(reg.R12)
			JNZ(LabelRef("vpos" + sfx))
			for c := range G {
				for h := range R {
					VMOVUPS(acc(c, h), M(ACC, 32*(c*nq+h)))
				}
			}
			ADDQ(U32(32*G*nq), ACC)
			ADDQ(U32(csz*G), V)
		}
		g := fmt.Sprintf("r%d", h0)
		MOVQ(RS, reg.R9)
		SHRQ(U8(csh), reg.R9) // nch
		if G > 1 {
			MOVQ(reg.R9, reg.RAX)
			ANDQ(U8(G-1), reg.RAX) // chunks left for the one-at-a-time loop
			SHRQ(U8(log2(G)), reg.R9)
			JZ(LabelRef("vtail" + g))
			Label("vgroup" + g)
			valueGroup(G, "G"+g)
			DECQ(reg.R9)
			JNZ(LabelRef("vgroup" + g))
			Label("vtail" + g)
			MOVQ(reg.RAX, reg.R9)
			TESTQ(reg.R9, reg.R9)
			JZ(LabelRef("vdone" + g))
		}
		Label("vone" + g)
		valueGroup(1, "1"+g)
		DECQ(reg.R9)
		JNZ(LabelRef("vone" + g))
		Label("vdone" + g)
	}
	VZEROUPPER()
	RET()
}

// attn2Softmax emits the softmax step of an AVX2 block update (the scores
// are in s, position-major): all 8 rows at once, one vector of rows per
// position; position p of row h counts if p < lim[h]. It returns the
// register holding s (RDX).
func attn2Softmax() reg.Register {
	Comment("Softmax step of all 8 rows at once, one vector of rows per position;")
	Comment("position p of row h counts if p < lim[h].")
	S := Load(Param("s"), reg.RDX)
	ML := Load(Param("ml"), reg.R8)
	LIM := Load(Param("lim"), reg.RAX)
	VMOVDQU(M(LIM, 0), reg.Y8)          // lim
	VMOVUPS(M(ML, 0), reg.Y9)           // m
	VPCMPEQD(reg.Y11, reg.Y11, reg.Y11) // -1 in every lane
	VMOVUPS(exp8.negInf, reg.Y12)
	VMOVAPS(reg.Y9, reg.Y5)
	VPXOR(reg.Y10, reg.Y10, reg.Y10) // p
	for p := range 16 {
		VPCMPGTD(reg.Y10, reg.Y8, reg.Y2) // p < lim
		VBLENDVPS(reg.Y2, M(S, 32*p), reg.Y12, reg.Y3)
		VMAXPS(reg.Y3, reg.Y5, reg.Y5)
		VPSUBD(reg.Y11, reg.Y10, reg.Y10)
	}
	VMOVUPS(reg.Y5, M(ML, 0))      // m'
	VSUBPS(reg.Y5, reg.Y9, reg.Y6) // m - m'
	vexp8(reg.Y6, reg.Y0, reg.Y1)  // c
	VMOVUPS(reg.Y6, M(S, 32*16))
	VXORPS(reg.Y7, reg.Y7, reg.Y7) // Σw
	VPXOR(reg.Y10, reg.Y10, reg.Y10)
	for p := range 16 {
		VPCMPGTD(reg.Y10, reg.Y8, reg.Y2)
		VBLENDVPS(reg.Y2, M(S, 32*p), reg.Y12, reg.Y3)
		VSUBPS(reg.Y5, reg.Y3, reg.Y3)
		vexp8(reg.Y3, reg.Y0, reg.Y1)
		VANDPS(reg.Y2, reg.Y3, reg.Y3)
		VMOVUPS(reg.Y3, M(S, 32*p))
		VADDPS(reg.Y3, reg.Y7, reg.Y7)
		VPSUBD(reg.Y11, reg.Y10, reg.Y10)
	}
	VMOVUPS(M(ML, 32), reg.Y4)
	VFMADD213PS(reg.Y7, reg.Y6, reg.Y4) // l = l·c + Σw
	VMOVUPS(reg.Y4, M(ML, 32))
	return S
}

// reduce4 leaves in the low 4 lanes of acc(p, 0) the sums of the 8 lanes of
// acc(p, h) for h < R ≤ 4 (lane h; lanes ≥ R are left arbitrary), using t
// and u as temporaries.
func reduce4(acc func(p, h int) reg.VecPhysical, p, R int, t, u reg.VecPhysical) {
	a0 := acc(p, 0)
	switch R {
	case 1:
		hadd(a0, a0, a0, t, u)
		hadd(a0, a0, a0, t, u)
	case 2:
		hadd(acc(p, 1), a0, a0, t, u)
		hadd(a0, a0, a0, t, u)
	case 3:
		a2 := acc(p, 2)
		hadd(acc(p, 1), a0, a0, t, u)
		hadd(a2, a2, a2, t, u)
		hadd(a2, a0, a0, t, u)
	default:
		a2 := acc(p, 2)
		hadd(acc(p, 1), a0, a0, t, u)
		hadd(acc(p, 3), a2, a2, t, u)
		hadd(a2, a0, a0, t, u)
	}
	VEXTRACTF128(U8(1), a0, t.AsX())
	VADDPS(t.AsX(), a0.AsX(), a0.AsX())
}

// hadd is VHADDPS(y, x, dst) — per 128-bit lane dst = {x0+x1, x2+x3, y0+y1,
// y2+y3} — as two VSHUFPS (the even and the odd elements) and one VADDPS,
// using t and u: the same sums of the same pairs, so the same bits. On Zen 3
// VHADDPS issues at one per 2 cycles: a four-row reduction takes 6.06 cycles
// that way and 4.23 this way (timed loops), and BenchmarkAttentionPrefill at
// 4,096 tokens 2 % less time (512 tokens: unchanged).
func hadd(y, x, dst, t, u reg.VecPhysical) {
	VSHUFPS(U8(0x88), y, x, t) // x0 x2 y0 y2
	VSHUFPS(U8(0xDD), y, x, u) // x1 x3 y1 y3
	VADDPS(u, t, dst)
}

// attn2Positions is how many positions the AVX2 score loop handles at once
// for a group of R rows: R·P accumulators and P keys in registers (≤ 15).
func attn2Positions(R int) int {
	if R >= 3 {
		return 3
	}
	return 4
}

// attn2Chunks is how many 8-element chunks of the head the AVX2 value loop
// accumulates at once for a group of R rows (G·R accumulators, R weights).
func attn2Chunks(R int) int {
	switch R {
	case 1:
		return 8
	case 2, 3:
		return 4
	}
	return 2
}

// attn2ValueRows is the row group size of the AVX2 value loop.
func attn2ValueRows(nq int) int {
	if nq >= 6 {
		return 3
	}
	return 4
}

// genAttnOut2 emits the end of an AVX2 pass for one row: the weighted sum
// divided by the softmax sum, a correctly rounded VDIVPS per element (the
// same result as the scalar division it replaces).
func genAttnOut2() {
	TEXT("attnOutAVX2", NOSPLIT, "func(out *float32, acc *float32, nch int, accStride int, l float32)")
	Pragma("noescape")
	Doc("attnOutAVX2 sets out[8i+j] = acc[i*accStride/4+j] / l for i < nch, j < 8",
		"(nch ≥ 1; accStride in bytes).")
	O := Load(Param("out"), reg.RDI)
	A := Load(Param("acc"), reg.RSI)
	N := Load(Param("nch"), reg.RCX)
	S := Load(Param("accStride"), reg.RDX)
	l, err := Param("l").Resolve()
	if err != nil {
		panic(err)
	}
	VBROADCASTSS(l.Addr, reg.Y1)
	Label("chunk")
	VMOVUPS(M(A, 0), reg.Y0)
	VDIVPS(reg.Y1, reg.Y0, reg.Y0)
	VMOVUPS(reg.Y0, M(O, 0))
	ADDQ(S, A)
	ADDQ(U8(32), O)
	DECQ(N)
	JNZ(LabelRef("chunk"))
	VZEROUPPER()
	RET()
}

// genAttnBlock2Q8 emits the AVX2 online-softmax update of nq query rows over
// one block of cnt ≤ 16 cached positions of a q8_0 cache: each row of v is
// headDim/32 ggml block_q8_0 (f16 scale d, 32 int8 q). The scores are given
// in s (q8ScoresAVX2 computed them); the softmax is attn2Softmax; values:
// rows in groups of up to 4, one block of the head at a time, each element
// widened once per group to exactly the f32 d·q the plain-Go twin computes
// (VPMOVSXBD, VCVTDQ2PS, one VMULPS by the block's scale).
func genAttnBlock2Q8(nq int) {
	name := fmt.Sprintf("attendQ8AVX2x%d", nq)
	TEXT(name, NOSPLIT, "func(acc *float32, q *float32, ml *float32, nch int, k *byte, v *byte, cnt int, scale float32, s *float32, lim *int32, kn *byte, vn *byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is attendF16AVX2x%d for a q8_0 cache with the scores given:", name, nq),
		"v holds cnt rows of nch/4 ggml block_q8_0 (34 bytes: f16 scale d, 32 int8",
		"q; element d·q); nch (the 8-element chunks of a row) is a multiple of 4;",
		"s[8p+h] holds the score sc[p] of row h (q8ScoresAVX2); k is not read.",
		"For each row h, over p < lim[h]:",
		"",
		"\tm' = max(m, max_p sc[p]);  c = exp(m-m');  w[p] = exp(sc[p]-m')",
		"\tl = l·c + Σ_p w[p];  acc_h = acc_h·c + Σ_p w[p]·v_p;  m = m'",
		"",
		"Every row must see at least one position in its first call (m finite).",
		"Meanwhile it prefetches cnt rows of values at vn (the next block).")
	const blk = 34 // bytes of one block_q8_0
	RS := reg.R13  // row stride of k and v in bytes
	Load(Param("nch"), RS)
	SHRQ(U8(2), RS)
	IMUL3Q(U8(blk), RS, RS)
	// loadD sets d to the block scale at m in every lane; loadQ8 sets y to
	// the 8 int8 at m times d.
	loadD := func(m Mem, d reg.VecPhysical) {
		VPBROADCASTW(m, d.AsX())
		VCVTPH2PS(d.AsX(), d)
	}
	loadQ8 := func(m Mem, d, y reg.VecPhysical) {
		VPMOVSXBD(m, y)
		VCVTDQ2PS(y, y)
		VMULPS(d, y, y)
	}
	VN := Load(Param("vn"), reg.R10)
	VREM := reg.RSI
	Load(Param("cnt"), VREM)
	IMULQ(RS, VREM)

	S := attn2Softmax()

	// Rows in groups of up to 4 (pairs when nq ≤ 2) so that each value is
	// widened once per group: a pair sweeps a block's 4 chunks at once, a
	// group of 3–4 rows its two halves one after the other.
	rg := 2
	if nq > 2 {
		rg = 4
	}
	Comment("acc_h = acc_h·c_h + Σ_p w[8p+h]·v_p, rows in groups of up to 4, C chunks of one block at a time.")
	for h0 := 0; h0 < nq; h0 += rg {
		R := min(rg, nq-h0)
		C := 4 // chunks per sweep over the positions
		if R > 2 {
			C = 2
		}
		acc := func(c, h int) reg.VecPhysical { return Y(c*R + h) }
		w := func(h int) reg.VecPhysical { return Y(C*R + h) }
		d, vz := reg.Y13, []reg.VecPhysical{reg.Y14, reg.Y15}
		ACC := Load(Param("acc"), reg.RDI)
		if h0 > 0 {
			ADDQ(U32(32*h0), ACC)
		}
		V := Load(Param("v"), reg.R11)
		CNT := Load(Param("cnt"), reg.RCX)
		Load(Param("nch"), reg.R9)
		SHRQ(U8(2), reg.R9) // blocks per row
		g := fmt.Sprintf("r%d", h0)
		Label("vblock" + g)
		for c0 := 0; c0 < 4; c0 += C {
			gc := fmt.Sprintf("%sc%d", g, c0)
			for h := range R {
				VBROADCASTSS(M(S, 32*16+4*(h0+h)), w(h))
			}
			for c := range C {
				for h := range R {
					VMULPS(M(ACC, 32*((c0+c)*nq+h)), w(h), acc(c, h))
				}
			}
			MOVQ(V, reg.RBX)
			MOVQ(S, reg.R8)
			MOVQ(CNT, reg.R12)
			Label("vpos" + gc)
			prefetchL2(VN, VREM, 1, "vpf"+gc)
			for h := range R {
				VBROADCASTSS(M(reg.R8, 4*(h0+h)), w(h))
			}
			loadD(M(reg.RBX, 0), d)
			for c := range C {
				y := vz[c%2]
				loadQ8(M(reg.RBX, 2+8*(c0+c)), d, y)
				for h := range R {
					VFMADD231PS(w(h), y, acc(c, h))
				}
			}
			ADDQ(RS, reg.RBX)
			ADDQ(U8(32), reg.R8)
			DECQ(reg.R12)
			JNZ(LabelRef("vpos" + gc))
			for c := range C {
				for h := range R {
					VMOVUPS(acc(c, h), M(ACC, 32*((c0+c)*nq+h)))
				}
			}
		}
		ADDQ(U32(128*nq), ACC)
		ADDQ(U8(blk), V)
		DECQ(reg.R9)
		JNZ(LabelRef("vblock" + g))
	}
	VZEROUPPER()
	RET()
}

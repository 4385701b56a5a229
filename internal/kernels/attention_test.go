package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// TestAttendImpls checks AttendF16/AttendF32 of every implementation against
// the plain-Go reference: GQA group sizes around the 8-head kernel limit,
// head sizes the assembly takes and ones it leaves to Go, partial blocks,
// and scores large enough to need the running max.
func TestAttendImpls(t *testing.T) {
	type tc struct{ nq, hd, bs, n int }
	var cases []tc
	for _, nq := range []int{1, 2, 3, 7, 8, 9, 16} {
		for _, hd := range []int{16, 64, 128, 256, 24} {
			cases = append(cases, tc{nq, hd, 16, 37})
		}
	}
	for _, n := range []int{1, 15, 16, 17, 100, 513} {
		cases = append(cases, tc{2, 128, 16, n}, tc{4, 64, 5, n}, tc{2, 128, 40, n})
	}
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, c := range cases {
			for _, qscale := range []float64{1, 30} {
				name := fmt.Sprintf("nq=%d hd=%d bs=%d n=%d qscale=%g", c.nq, c.hd, c.bs, c.n, qscale)
				nb := (c.n + c.bs - 1) / c.bs
				q := randVec(r, c.nq*c.hd, qscale)
				k16, v16 := make([][]uint16, nb), make([][]uint16, nb)
				k32, v32 := make([][]float32, nb), make([][]float32, nb)
				for b := range nb {
					k32[b], v32[b] = randVec(r, c.bs*c.hd, 1), randVec(r, c.bs*c.hd, 1)
					k16[b], v16[b] = make([]uint16, c.bs*c.hd), make([]uint16, c.bs*c.hd)
					for i := range k32[b] {
						k16[b][i] = dtype.F32ToF16(k32[b][i])
						v16[b][i] = dtype.F32ToF16(v32[b][i])
					}
				}
				scale := float32(1 / math.Sqrt(float64(c.hd)))
				want := make([]float32, c.nq*c.hd)
				attendF16Generic(want, q, c.nq, c.hd, k16, v16, c.bs, c.n, scale)
				have, check := guarded(c.nq * c.hd)
				AttendF16(have, q, c.nq, c.hd, k16, v16, c.bs, c.n, scale)
				check(t)
				compareAttn(t, "f16 "+name, have, want, qscale)
				attendF32Generic(want, q, c.nq, c.hd, k32, v32, c.bs, c.n, scale)
				AttendF32(have, q, c.nq, c.hd, k32, v32, c.bs, c.n, scale)
				check(t)
				compareAttn(t, "f32 "+name, have, want, qscale)
			}
		}
	})
}

// compareAttn allows the f32 rounding of differently ordered score sums,
// which grows with the size of the scores (qscale).
func compareAttn(t *testing.T, what string, have, want []float32, qscale float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(have[i] - want[i])); !(d <= 1e-5*qscale*(1+math.Abs(float64(want[i])))) {
			t.Fatalf("%s: out[%d] = %g; reference %g", what, i, have[i], want[i])
		}
	}
}

// TestAttendCausalImpls checks AttendCausalF16/F32 of every implementation
// against one reference attention per token: blocks of tokens that do and
// do not fill the 8-row passes, starting at and after position 0, across
// cache-block boundaries, with a row stride wider than the rows (the gaps
// must stay untouched).
func TestAttendCausalImpls(t *testing.T) {
	type tc struct{ nq, hd, nt, p0 int }
	var cases []tc
	for _, nq := range []int{1, 2, 3, 7, 8, 9, 16} {
		for _, nt := range []int{1, 3, 4, 9, 17} {
			cases = append(cases, tc{nq, 64, nt, 0}, tc{nq, 128, nt, 21})
		}
	}
	cases = append(cases, tc{2, 24, 5, 3}, tc{2, 256, 6, 40}, tc{2, 128, 40, 100})
	const bs = 16
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		for _, c := range cases {
			for _, qscale := range []float64{1, 30} {
				name := fmt.Sprintf("nq=%d hd=%d nt=%d p0=%d qscale=%g", c.nq, c.hd, c.nt, c.p0, qscale)
				n := c.p0 + c.nt
				nb := (n + bs - 1) / bs
				stride := c.nq*c.hd + 8
				q := randVec(r, c.nt*stride, qscale)
				k16, v16 := make([][]uint16, nb), make([][]uint16, nb)
				k32, v32 := make([][]float32, nb), make([][]float32, nb)
				for b := range nb {
					k32[b], v32[b] = randVec(r, bs*c.hd, 1), randVec(r, bs*c.hd, 1)
					k16[b], v16[b] = make([]uint16, bs*c.hd), make([]uint16, bs*c.hd)
					for i := range k32[b] {
						k16[b][i] = dtype.F32ToF16(k32[b][i])
						v16[b][i] = dtype.F32ToF16(v32[b][i])
					}
				}
				scale := float32(1 / math.Sqrt(float64(c.hd)))
				rows := c.nq * c.hd
				want := make([]float32, c.nt*rows)
				have, check := guarded(c.nt * stride)
				for _, f16 := range []bool{true, false} {
					for i := range c.nt {
						if f16 {
							attendF16Generic(want[i*rows:(i+1)*rows], q[i*stride:], c.nq, c.hd, k16, v16, bs, c.p0+i+1, scale)
						} else {
							attendF32Generic(want[i*rows:(i+1)*rows], q[i*stride:], c.nq, c.hd, k32, v32, bs, c.p0+i+1, scale)
						}
					}
					for i := range have {
						have[i] = guard
					}
					if f16 {
						AttendCausalF16(have, q, stride, c.nt, c.nq, c.hd, k16, v16, bs, c.p0, scale)
					} else {
						AttendCausalF32(have, q, stride, c.nt, c.nq, c.hd, k32, v32, bs, c.p0, scale)
					}
					check(t)
					what := fmt.Sprintf("f16=%v %s", f16, name)
					for i := range c.nt {
						for j := rows; j < stride && (i+1)*stride <= len(have); j++ {
							if have[i*stride+j] != guard {
								t.Fatalf("%s: the gap after token %d was written", what, i)
							}
						}
						compareAttn(t, fmt.Sprintf("%s token %d", what, i), have[i*stride:i*stride+rows], want[i*rows:(i+1)*rows], qscale)
					}
				}
			}
		}
	})
}

// TestAttendCausalSameBits checks that on every implementation a prefill
// block (AttendCausal over nt tokens, rows of several tokens sharing each
// pass) gives each token exactly the bits of a decode step (one Attend call
// with the token's context), for f16 and q8_0 caches: a token's drafts must
// not depend on whether its context arrived as one prefill or step by step.
func TestAttendCausalSameBits(t *testing.T) {
	type tc struct{ nq, hd, nt, p0 int }
	cases := []tc{{2, 128, 8, 0}, {2, 128, 8, 37}, {1, 64, 17, 5}, {3, 64, 9, 16}, {7, 64, 4, 21}, {8, 128, 3, 40}, {16, 128, 5, 2}}
	const bs = 16
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(31, 32))
		for _, c := range cases {
			name := fmt.Sprintf("nq=%d hd=%d nt=%d p0=%d", c.nq, c.hd, c.nt, c.p0)
			n := c.p0 + c.nt
			nb := (n + bs - 1) / bs
			rows := c.nq * c.hd
			q := randVec(r, c.nt*rows, 3)
			k16, v16 := make([][]uint16, nb), make([][]uint16, nb)
			for b := range nb {
				k16[b], v16[b] = make([]uint16, bs*c.hd), make([]uint16, bs*c.hd)
				for i := range k16[b] {
					k16[b][i] = dtype.F32ToF16(float32(r.NormFloat64()))
					v16[b][i] = dtype.F32ToF16(float32(r.NormFloat64()))
				}
			}
			k8, v8, _, _ := q8Cache(r, nb, bs, c.hd)
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			for _, q8 := range []bool{false, true} {
				block := make([]float32, c.nt*rows)
				step := make([]float32, rows)
				if q8 {
					AttendCausalQ8_0(block, q, rows, c.nt, c.nq, c.hd, k8, v8, bs, c.p0, scale)
				} else {
					AttendCausalF16(block, q, rows, c.nt, c.nq, c.hd, k16, v16, bs, c.p0, scale)
				}
				for i := range c.nt {
					if q8 {
						AttendQ8_0(step, q[i*rows:], c.nq, c.hd, k8, v8, bs, c.p0+i+1, scale)
					} else {
						AttendF16(step, q[i*rows:], c.nq, c.hd, k16, v16, bs, c.p0+i+1, scale)
					}
					for e, v := range step {
						if w := block[i*rows+e]; math.Float32bits(v) != math.Float32bits(w) {
							t.Fatalf("q8=%v %s token %d: out[%d] = %g from a decode step, %g from the prefill block", q8, name, i, e, v, w)
						}
					}
				}
			}
		}
	})
}

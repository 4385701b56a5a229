package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// q8Cache returns nb blocks of bs positions of random keys and values
// quantized to q8_0 rows of hd elements, and the same blocks dequantized by
// dtype.Dequantize (an implementation independent of the kernels' widenRow).
func q8Cache(r *rand.Rand, nb, bs, hd int) (k8, v8 [][]byte, k32, v32 [][]float32) {
	k8, v8, k32, v32 = make([][]byte, nb), make([][]byte, nb), make([][]float32, nb), make([][]float32, nb)
	for b := range nb {
		for _, p := range []struct {
			q *[]byte
			f *[]float32
		}{{&k8[b], &k32[b]}, {&v8[b], &v32[b]}} {
			x := randVec(r, bs*hd, 1)
			q, err := dtype.Quantize(dtype.Q8_0, nil, x)
			if err != nil {
				panic(err)
			}
			f := make([]float32, bs*hd)
			if err := dtype.Dequantize(dtype.Q8_0, f, q); err != nil {
				panic(err)
			}
			*p.q, *p.f = q, f
		}
	}
	return k8, v8, k32, v32
}

// TestWidenQ8 checks the twin's q8_0 widening against dtype.Dequantize.
func TestWidenQ8(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	k8, _, k32, _ := q8Cache(r, 1, 3, 96)
	have := make([]float32, 96)
	for p := range 3 {
		widenRow(have, k8[0][p*rowLen[byte](96):][:rowLen[byte](96)])
		for i, v := range have {
			if w := k32[0][p*96+i]; v != w {
				t.Fatalf("position %d element %d: have %g; want %g", p, i, v, w)
			}
		}
	}
}

// TestAttendQ8Impls checks AttendQ8_0 of every implementation against the
// plain-Go twin, and the twin against AttendF32 of the same cache and of
// the query quantized to q8_0, both dequantized by dtype (the twin's
// integer scores are those float dot products up to rounding): GQA group
// sizes around the 8-row kernel limit, head sizes of 1…8 blocks, partial
// cache blocks, large scores.
func TestAttendQ8Impls(t *testing.T) {
	type tc struct{ nq, hd, bs, n int }
	var cases []tc
	for _, nq := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16} {
		for _, hd := range []int{32, 64, 128, 256} {
			cases = append(cases, tc{nq, hd, 16, 37})
		}
	}
	for _, n := range []int{1, 2, 3, 5, 15, 16, 17, 100, 513} {
		cases = append(cases, tc{2, 128, 16, n}, tc{7, 64, 5, n}, tc{2, 128, 40, n})
	}
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(23, 24))
		for _, c := range cases {
			for _, qscale := range []float64{1, 30} {
				name := fmt.Sprintf("nq=%d hd=%d bs=%d n=%d qscale=%g", c.nq, c.hd, c.bs, c.n, qscale)
				nb := (c.n + c.bs - 1) / c.bs
				q := randVec(r, c.nq*c.hd, qscale)
				k8, v8, k32, v32 := q8Cache(r, nb, c.bs, c.hd)
				scale := float32(1 / math.Sqrt(float64(c.hd)))
				want := make([]float32, c.nq*c.hd)
				attendQ8_0Generic(want, q, c.nq, c.hd, k8, v8, c.bs, c.n, scale)
				have, check := guarded(c.nq * c.hd)
				AttendQ8_0(have, q, c.nq, c.hd, k8, v8, c.bs, c.n, scale)
				check(t)
				compareAttn(t, "q8_0 "+name, have, want, qscale)
				ref := make([]float32, c.nq*c.hd)
				attendF32Generic(ref, dequantQ8(q), c.nq, c.hd, k32, v32, c.bs, c.n, scale)
				compareAttn(t, "q8_0 twin vs dequantized f32 "+name, want, ref, qscale)
			}
		}
	})
}

// TestAttendCausalQ8Impls checks AttendCausalQ8_0 of every implementation
// against one twin attention per token (as TestAttendCausalImpls), with a
// row stride wider than the rows whose gaps must stay untouched.
func TestAttendCausalQ8Impls(t *testing.T) {
	type tc struct{ nq, hd, nt, p0 int }
	var cases []tc
	for _, nq := range []int{1, 2, 3, 7, 8, 9, 16} {
		for _, nt := range []int{1, 3, 4, 9, 17} {
			cases = append(cases, tc{nq, 64, nt, 0}, tc{nq, 128, nt, 21})
		}
	}
	cases = append(cases, tc{2, 32, 5, 3}, tc{2, 256, 6, 40}, tc{2, 128, 40, 100}, tc{14, 64, 8, 33})
	const bs = 16
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(25, 26))
		for _, c := range cases {
			for _, qscale := range []float64{1, 30} {
				name := fmt.Sprintf("nq=%d hd=%d nt=%d p0=%d qscale=%g", c.nq, c.hd, c.nt, c.p0, qscale)
				n := c.p0 + c.nt
				nb := (n + bs - 1) / bs
				stride := c.nq*c.hd + 8
				q := randVec(r, c.nt*stride, qscale)
				k8, v8, _, _ := q8Cache(r, nb, bs, c.hd)
				scale := float32(1 / math.Sqrt(float64(c.hd)))
				rows := c.nq * c.hd
				want := make([]float32, c.nt*rows)
				for i := range c.nt {
					attendQ8_0Generic(want[i*rows:(i+1)*rows], q[i*stride:], c.nq, c.hd, k8, v8, bs, c.p0+i+1, scale)
				}
				have, check := guarded(c.nt * stride)
				for i := range have {
					have[i] = guard
				}
				AttendCausalQ8_0(have, q, stride, c.nt, c.nq, c.hd, k8, v8, bs, c.p0, scale)
				check(t)
				for i := range c.nt {
					for j := rows; j < stride && (i+1)*stride <= len(have); j++ {
						if have[i*stride+j] != guard {
							t.Fatalf("%s: the gap after token %d was written", name, i)
						}
					}
					compareAttn(t, fmt.Sprintf("%s token %d", name, i), have[i*stride:i*stride+rows], want[i*rows:(i+1)*rows], qscale)
				}
			}
		}
	})
}

// dequantQ8 returns x quantized to q8_0 and widened back by dtype.
func dequantQ8(x []float32) []float32 {
	q, err := dtype.Quantize(dtype.Q8_0, nil, x)
	if err != nil {
		panic(err)
	}
	y := make([]float32, len(x))
	if err := dtype.Dequantize(dtype.Q8_0, y, q); err != nil {
		panic(err)
	}
	return y
}

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// TestF32ToF16Impls checks F32ToF16 bit for bit against dtype.F32ToF16 on
// random values, every exponent from f16-subnormal to overflow, ties, NaNs.
func TestF32ToF16Impls(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	var src []float32
	for e := -30; e <= 20; e++ {
		for range 50 {
			src = append(src, float32(math.Ldexp(r.Float64()*2-1, e)))
		}
	}
	for _, u := range []uint32{0x7f800000, 0xff800000, 0x7fc00001, 0xff812345, 0x7f800001, 0, 0x80000000,
		0x477fefff, 0x477ff000, 0x477fffff, 0x47800000, 0x33000000, 0x33000001, 0x387fc000, 0x3f801000, 0x3f803000} {
		src = append(src, math.Float32frombits(u))
	}
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 15, 16, 17, len(src)} {
			dst := make([]uint16, n+1)
			dst[n] = 0xbeef
			F32ToF16(dst, src[:n])
			for i, v := range src[:n] {
				if want := dtype.F32ToF16(v); dst[i] != want {
					t.Fatalf("F32ToF16(%g = %#x) = %#x; want %#x", v, math.Float32bits(v), dst[i], want)
				}
			}
			if dst[n] != 0xbeef {
				t.Fatal("F32ToF16 wrote past len(src)")
			}
		}
	})
}

// TestSiLUMulImpls checks SiLUMul against the float64-exp reference within
// a few ulp, including in-place use and large arguments.
func TestSiLUMulImpls(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{1, 15, 16, 33, 3072} {
			gate, up := randVec(r, n, 4), randVec(r, n, 1)
			gate[0] = 100
			if n > 2 {
				gate[1], gate[2] = -100, -87.5
			}
			want := make([]float32, n)
			siluMulGeneric(want, gate, up)
			have, check := guarded(n)
			SiLUMul(have, gate, up)
			check(t)
			SiLUMul(gate, gate, up) // in place
			for i := range want {
				tol := 4e-7 * math.Abs(float64(want[i]))
				if d := math.Abs(float64(have[i] - want[i])); !(d <= tol) || have[i] != gate[i] {
					t.Fatalf("n=%d: SiLUMul[%d] = %g (in place %g); reference %g", n, i, have[i], gate[i], want[i])
				}
			}
		}
	})
}

// TestRMSNormImpls checks RMSNorm on every implementation bit for bit
// against the plain-Go reference (the summation order is part of the
// specification) and against a float64 computation within f32 rounding,
// including in-place use and lengths around the vector widths.
func TestRMSNormImpls(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{1, 7, 8, 15, 16, 17, 33, 128, 1000, 1024, 3072} {
			x, w := randVec(r, n, 3), randVec(r, n, 1)
			x[0] = 1e30 // float64 accumulation: no overflow
			want := make([]float32, n)
			scale := float32(1 / math.Sqrt(sumSquaresGeneric(x)/float64(n)+1e-6))
			scaleMulGeneric(want, x, w, scale)
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			ref := 1 / math.Sqrt(ss/float64(n)+1e-6)
			have, check := guarded(n)
			RMSNorm(have, x, w, 1e-6)
			check(t)
			for i := range want {
				if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d: RMSNorm[%d] = %g; plain Go %g", n, i, have[i], want[i])
				}
				if d := math.Abs(float64(have[i]) - float64(x[i])*ref*float64(w[i])); d > 3e-7*math.Abs(float64(have[i]))+1e-37 {
					t.Fatalf("n=%d: RMSNorm[%d] = %g; float64 %g", n, i, have[i], float64(x[i])*ref*float64(w[i]))
				}
			}
			RMSNorm(x, x, w, 1e-6) // in place
			for i := range want {
				if x[i] != have[i] {
					t.Fatalf("n=%d: in place RMSNorm[%d] = %g; %g", n, i, x[i], have[i])
				}
			}
		}
	})
}

// TestRoPEImpls checks RoPE on every implementation bit for bit against the
// plain-Go reference, for head sizes the vector kernel takes (half a
// multiple of 8) and one it leaves to Go, without touching anything past
// the heads.
func TestRoPEImpls(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	forEachImpl(t, func(t *testing.T) {
		for _, hd := range []int{8, 16, 128, 256} {
			tab := NewRoPETable(hd, 40, 1e6)
			for _, nHeads := range []int{1, 3, 16} {
				for _, pos := range []int{0, 1, 39} {
					x := randVec(r, nHeads*hd, 2)
					want := append([]float32(nil), x...)
					half := hd / 2
					ropeGeneric(want, tab.Cos[pos*half:(pos+1)*half], tab.Sin[pos*half:(pos+1)*half], nHeads, half)
					have, check := guarded(nHeads * hd)
					copy(have, x)
					tab.RoPE(have, nHeads, pos)
					check(t)
					for i := range want {
						if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
							t.Fatalf("hd=%d heads=%d pos=%d: x[%d] = %g; plain Go %g", hd, nHeads, pos, i, have[i], want[i])
						}
					}
					if pos == 0 {
						for i := range x { // cos 1, sin 0: unchanged
							if have[i] != x[i] {
								t.Fatalf("hd=%d: position 0 changed x[%d] from %g to %g", hd, i, x[i], have[i])
							}
						}
					}
				}
			}
		}
	})
}

// TestSumExpImpls checks SumExp on every implementation against a float64
// sum of math.Exp written here (NaNs skipped): relative error below 1e-7
// on random logits of the scale of an LM head (many terms near the
// maximum, so every lane counts), with -Inf, NaN, far-below and zero terms, at lengths around the vector widths and the
// Qwen vocabulary.
func TestSumExpImpls(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	nan, inf := float32(math.NaN()), float32(math.Inf(-1))
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{1, 7, 8, 9, 31, 32, 33, 100, 151936} {
			x := randVec(r, n, 4)
			if n > 9 {
				x[1], x[3], x[5], x[n-1] = inf, nan, -500, 0
			}
			m := x[Argmax(x)]
			var want float64
			for _, v := range x {
				if v == v {
					want += math.Exp(float64(v) - float64(m))
				}
			}
			if have := SumExp(x, m); !(math.Abs(have-want) <= 1e-7*want) {
				t.Fatalf("n=%d: SumExp = %.9g; want %.9g (relative error %.2g)", n, have, want, math.Abs(have-want)/want)
			}
		}
	})
}

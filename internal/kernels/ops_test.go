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

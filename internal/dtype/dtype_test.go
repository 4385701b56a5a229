package dtype

import (
	"math"
	"math/rand/v2"
	"testing"
)

// f16Reference converts through float64 arithmetic, independently of the bit
// manipulation in F32ToF16: it enumerates the two neighbouring halves.
func f16Reference(f float32) uint16 {
	best := uint16(0)
	bestErr := math.Inf(1)
	for h := range 1 << 16 {
		v := F16ToF32(uint16(h))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			continue
		}
		e := math.Abs(float64(v) - float64(f))
		if e < bestErr || (e == bestErr && h&1 == 0 && best&1 == 1) {
			best, bestErr = uint16(h), e
		}
	}
	return best
}

func TestF16RoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if got := F32ToF16(f); got != uint16(h) && !(f == 0 && got&0x7fff == 0) {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)=%g) = %#04x", h, f, got)
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []float32{0.5 * 5.9604645e-08, 65504, 65519.99, 6.1035156e-05, 3.0517578e-05, 1.0009766, 1.00048828125, 1.00146484375}
	for range 300 {
		cases = append(cases, float32(r.NormFloat64()*math.Pow(2, float64(r.IntN(40)-24))))
	}
	for _, f := range cases {
		if math.Abs(float64(f)) > 65504 {
			continue
		}
		have, want := F32ToF16(f)&0x7fff, f16Reference(float32(math.Abs(float64(f))))
		if have != want {
			t.Errorf("F32ToF16(%g): have %#04x; want %#04x", f, have, want)
		}
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{-2, 0xc000},
	}
	for _, c := range cases {
		if have := F32ToBF16(c.in); have != c.want {
			t.Errorf("F32ToBF16(%g): have %#04x; want %#04x", c.in, have, c.want)
		}
		if back := BF16ToF32(c.want); F32ToBF16(back) != c.want {
			t.Errorf("bf16 %#04x does not round-trip", c.want)
		}
	}
}

func TestQuantizeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 4*QK)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	src[5] = 0
	for i := 2 * QK; i < 3*QK; i++ {
		src[i] = 0 // an all-zero block must stay zero
	}
	for _, typ := range Types {
		b, err := Quantize(typ, nil, src)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := typ.RowBytes(len(src)); n != len(b) {
			t.Fatalf("%v: %d bytes; want %d", typ, len(b), n)
		}
		dst := make([]float32, len(src))
		if err := Dequantize(typ, dst, b); err != nil {
			t.Fatal(err)
		}
		for blk := 0; blk < len(src)/QK; blk++ {
			var amax float64
			for _, v := range src[blk*QK : blk*QK+QK] {
				amax = max(amax, math.Abs(float64(v)))
			}
			tol := map[Type]float64{F32: 0, F16: amax / 1000, BF16: amax / 128, Q8_0: amax / 127 * 0.51, Q4_0: amax / 8 * 0.51 * 1.01}[typ]
			for i := blk * QK; i < blk*QK+QK; i++ {
				if d := math.Abs(float64(dst[i] - src[i])); d > tol {
					t.Errorf("%v[%d]: have %g; want %g (tol %g)", typ, i, dst[i], src[i], tol)
				}
			}
		}
		// Requantizing what a block decodes to gives the same bytes (ggml fixed point).
		if typ == Q8_0 {
			b2, _ := Quantize(typ, nil, dst)
			if string(b2) != string(b) {
				t.Errorf("%v: requantization changed the bytes", typ)
			}
		}
	}
}

func TestRowBytesErrors(t *testing.T) {
	if _, err := Q8_0.RowBytes(33); err == nil {
		t.Error("Q8_0.RowBytes(33): want error")
	}
	if _, err := Type(99).RowBytes(32); err == nil {
		t.Error("unsupported type: want error")
	}
	if err := Dequantize(Q4_0, make([]float32, 32), make([]byte, 17)); err == nil {
		t.Error("short Q4_0 block: want error")
	}
}

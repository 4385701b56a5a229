//go:build !purego

package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestQuantizeExact checks the AVX-512 and AVX2 activation quantizers bit
// for bit against dtype.Quantize (by way of quantQ8Blocked), including ties,
// zeros, tiny and huge blocks.
func TestQuantizeExact(t *testing.T) {
	quantizers := map[string]func(x *float32, nblk int, q *byte, qstride int, m *byte, mstride int, off int){}
	if hasAVX512 {
		quantizers["avx512"] = quantQ8AVX512
	}
	if hasAVX2 {
		quantizers["avx2"] = quantQ8AVX2
	}
	if len(quantizers) == 0 {
		t.Skip("no AVX2")
	}
	for name, quant := range quantizers {
		t.Run(name, func(t *testing.T) { testQuantizeExact(t, quant) })
	}
}

func testQuantizeExact(t *testing.T, quant func(x *float32, nblk int, q *byte, qstride int, m *byte, mstride int, off int)) {
	r := rand.New(rand.NewPCG(5, 6))
	const nblk = 64
	x := randVec(r, nblk*32, 3)
	clear(x[32:64])     // zero block
	for i := range 32 { // values landing exactly on .5 after scaling
		x[64+i] = float32(i-16) * 0.5
	}
	x[64] = 127
	for i := range 32 {
		x[96+i] *= 1e-30 // subnormal f16 scale
		x[128+i] *= 1e30 // overflowing f16 scale
	}
	for i := range 32 {
		x[160+i] = float32(i%3-1) * 0.49999997
	}
	x[160] = 127
	for _, off := range []int{128, 8} {
		q1, q2 := make([]byte, nblk*32), make([]byte, nblk*32)
		m1, m2 := make([]byte, nblk*8), make([]byte, nblk*8)
		quant(&x[0], nblk, &q1[0], 32, &m1[0], 8, off)
		quantQ8Blocked(x, q2, 32, m2, 8, off)
		for i := range q1 {
			if q1[i] != q2[i] {
				t.Fatalf("block %d quant %d: have %d; want %d", i/32, i%32, int8(q1[i]), int8(q2[i]))
			}
		}
		for i := range m1 {
			if m1[i] != m2[i] {
				t.Fatalf("block %d meta byte %d: have %#x; want %#x", i/8, i%8, m1[i], m2[i])
			}
		}
	}
}

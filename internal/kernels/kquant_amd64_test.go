//go:build !purego

package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

var kTileTypes = []dtype.Type{dtype.Q4_K, dtype.Q5_K, dtype.Q6_K}

// TestKTiles checks the Q4_K/Q5_K/Q6_K tile kernels on every implementation
// against the plain-Go kernel: rows around the 16-row group (a partial last
// group), one to several super-blocks, every batch-tile size of the AVX2 and
// AVX-512 kernels and the cache-blocked prefill sweep (batch > kBatchChunk),
// with weights of every bit pattern and the int16/int32 worst cases; the
// AVX2 and AVX-512 results bit for bit against each other, and each row
// alone against the same row in a batch.
func TestKTiles(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	shapes := [][2]int{{1, 256}, {15, 512}, {16, 256}, {17, 768}, {33, 1024}, {70, 256}}
	batches := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 19, 20, 21, 31, 65, 131}
	if testing.Short() {
		shapes, batches = shapes[2:5], []int{1, 5, 11, 65}
	}
	pool := NewPool(3)
	defer pool.Close()
	defer SetImpl(Impls()[0])
	r := rand.New(rand.NewPCG(31, 32))
	for _, typ := range kTileTypes {
		for _, s := range shapes {
			rows, cols := s[0], s[1]
			m := rawKMatrix(t, r, typ, rows, cols)
			if pk, ok := m.packed.(*kpacked); !ok || pk.groupBytes == 0 {
				t.Fatalf("%v: matrix not packed in tiles (%T)", typ, m.packed)
			}
			for _, batch := range batches {
				what := fmt.Sprintf("%v %dx%d B=%d", typ, rows, cols, batch)
				x := randVec(r, batch*cols, 1)
				if batch > 2 {
					clear(x[2*cols : 3*cols]) // a zero row
					x[cols+3] = 0
					for i := range 256 { // quants all +127 (all −127 in row 1) against the worst-case weights
						x[i], x[cols+i] = 1, -1
					}
				}
				checkTilePaths(t, pool, what, m, x, batch)
			}
		}
	}
}

// rawKMatrix is a random matrix of typ (Q4_K, Q5_K or Q6_K) with every
// quant and scale bit pattern (random bytes) and sane f16 scales; row 0's
// first super-block has every quant and scale at its maximum (all bits set)
// and, for Q6_K, row 1's first one every quant at −32 with scales −128: the
// widest sub-block sums the kernels keep in 16 and 32 bits.
func rawKMatrix(t *testing.T, r *rand.Rand, typ dtype.Type, rows, cols int) *Matrix {
	rb, err := typ.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	bb := typ.BlockBytes()
	f16 := func(b []byte, v float64) { binary.LittleEndian.PutUint16(b, dtype.F32ToF16(float32(v))) }
	for off := 0; off < len(data); off += bb {
		switch typ {
		case dtype.Q6_K:
			f16(data[off+208:], r.NormFloat64()*0.002)
		default:
			f16(data[off:], r.NormFloat64()*0.01)
			f16(data[off+2:], r.NormFloat64()*0.01)
		}
	}
	switch typ {
	case dtype.Q6_K:
		for i := range 208 {
			data[i] = 0xff // quants 31, scales −1: then the scales of row 0 at +127
		}
		for i := 192; i < 208; i++ {
			data[i] = 0x7f
		}
		if rows > 1 {
			row1 := data[rb:]
			clear(row1[:192]) // quants −32
			for i := 192; i < 208; i++ {
				row1[i] = 0x80
			}
		}
	default:
		for i := 4; i < bb; i++ {
			data[i] = 0xff
		}
	}
	m, err := NewMatrix(typ, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestQuantQ8KExact checks quantQ8KAVX512 bit for bit against quantQ8K and
// the sums the tile kernels read (tileKActs), in both meta formats: ties in
// magnitude of opposite sign, zero, tiny and huge blocks, values landing on
// .5 after scaling; bytes outside a block's quants and meta stay untouched.
func TestQuantQ8KExact(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(33, 34))
	const nblk = 8
	x := randVec(r, nblk*256, 3)
	clear(x[256:512])    // zero block
	for i := range 256 { // values landing exactly on .5 after scaling, largest magnitude first negative
		x[512+i] = float32(i%64-32) * 0.5
	}
	x[512+7], x[512+200] = -127, 127
	for i := range 256 {
		x[768+i] *= 1e-30
		x[1024+i] *= 1e30
	}
	x[1280+3], x[1280+100] = 50, -50 // a tie: the first (positive) one sets the sign
	x[1536+9], x[1536+10] = -50, 50
	le := binary.LittleEndian
	for _, c8 := range []int{0, 1} {
		const stride, moff = 480, 256 // quants, then up to 144 meta bytes; the rest must stay untouched
		metaLen := 32
		if c8 != 0 {
			metaLen = 144
		}
		buf := make([]byte, nblk*stride)
		for i := range buf {
			buf[i] = 0xa5
		}
		quantQ8KAVX512(&x[0], nblk, &buf[0], stride, moff, c8)
		for i := range nblk {
			var q [256]int8
			var d float32
			var bs [16]int16
			quantQ8K(x[256*i:256*i+256], q[:], &d, bs[:])
			blk := buf[i*stride:]
			for j := range 256 {
				if int8(blk[j]) != q[j] {
					t.Fatalf("c8=%d block %d quant %d: have %d; want %d", c8, i, j, int8(blk[j]), q[j])
				}
			}
			meta := blk[moff:]
			if have := math.Float32frombits(le.Uint32(meta)); math.Float32bits(have) != math.Float32bits(d) {
				t.Fatalf("c8=%d block %d: d = %g; want %g", c8, i, have, d)
			}
			for k := range 8 {
				if c8 == 0 {
					if have, want := int16(le.Uint16(meta[16+2*k:])), bs[2*k]+bs[2*k+1]; have != want {
						t.Fatalf("block %d: per-32 sum %d = %d; want %d", i, k, have, want)
					}
				}
			}
			if c8 != 0 {
				for js := range 32 {
					e := 16*(js/2) + 4*(js%2)
					var c int32
					for tt := range 4 {
						c += int32(q[e+tt]) + int32(q[e+8+tt])
					}
					if have := int32(le.Uint32(meta[16+4*js:])); have != -32*c {
						t.Fatalf("block %d: c_%d = %d; want %d", i, js, have, -32*c)
					}
				}
			}
			for j := moff + metaLen; j < stride; j++ {
				if blk[j] != 0xa5 {
					t.Fatalf("c8=%d block %d: byte %d written", c8, i, j)
				}
			}
			for j := moff + 4; j < moff+16; j++ {
				if blk[j] != 0xa5 {
					t.Fatalf("c8=%d block %d: byte %d written", c8, i, j)
				}
			}
		}
	}
}

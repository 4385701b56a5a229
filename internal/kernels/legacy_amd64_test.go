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

var legacyTypes = []dtype.Type{dtype.Q4_1, dtype.Q5_0, dtype.Q5_1}

// TestLegacyTiles checks the Q4_1/Q5_0/Q5_1 tile kernels on every
// implementation against the plain-Go kernel: rows around the 16-row group
// (a partial last group), one to many blocks, every batch-tile size of both
// kernels and the cache-blocked prefill sweep (batch > kBatchChunk); the
// AVX2 and AVX-512 results bit for bit against each other, and each row
// alone against the same row in a batch.
func TestLegacyTiles(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	shapes := [][2]int{{1, 32}, {15, 64}, {16, 96}, {17, 256}, {33, 864}, {70, 128}}
	batches := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 24, 25, 65, 131}
	if testing.Short() {
		shapes, batches = shapes[2:5], []int{1, 5, 13, 65}
	}
	pool := NewPool(3)
	defer pool.Close()
	defer SetImpl(Impls()[0])
	r := rand.New(rand.NewPCG(21, 22))
	for _, typ := range legacyTypes {
		for _, s := range shapes {
			rows, cols := s[0], s[1]
			m := rawLegacyMatrix(t, r, typ, rows, cols)
			if _, ok := m.packed.(*lpacked); !ok {
				t.Fatalf("%v: matrix not packed for the tile kernels (%T)", typ, m.packed)
			}
			for _, batch := range batches {
				what := fmt.Sprintf("%v %dx%d B=%d", typ, rows, cols, batch)
				x := randVec(r, batch*cols, 1)
				if batch > 2 {
					clear(x[2*cols : 3*cols]) // a zero row
					x[cols+3] = 0
					for i := range 32 { // quants all +127 (all −127 in row 1) against all-ones weights
						x[i], x[cols+32+i] = 1, -1
					}
				}
				checkTilePaths(t, pool, what, m, x, batch)
			}
		}
	}
}

// rawLegacyMatrix is a random matrix of typ with every quant bit pattern
// (random bytes) and sane f16 scales and mins; row 0's first block has every
// quant at its maximum (all bits set), the int16 worst case of the AVX2 kernels.
func rawLegacyMatrix(t *testing.T, r *rand.Rand, typ dtype.Type, rows, cols int) *Matrix {
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
		f16(data[off:], r.NormFloat64()*0.05)
		if typ != dtype.Q5_0 {
			f16(data[off+2:], r.NormFloat64()*0.5)
		}
	}
	q0 := 4 // the quants (and 5th bits) after d, m
	if typ == dtype.Q5_0 {
		q0 = 2
	}
	for i := q0; i < bb; i++ {
		data[i] = 0xff
	}
	m, err := NewMatrix(typ, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestQuantQ8LExact checks quantQ8LAVX2 bit for bit against quantQ8_0 and
// s8_1 (the activations of the plain-Go kernel), including ties, zeros, tiny
// and huge blocks.
func TestQuantQ8LExact(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
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
	le := binary.LittleEndian
	for _, q81 := range []int{0, 1} {
		const stride = 48 // quants, 8 meta bytes, 8 bytes that must stay untouched
		buf := make([]byte, nblk*stride)
		for i := range buf {
			buf[i] = 0xa5
		}
		quantQ8LAVX2(&x[0], nblk, &buf[0], stride, 32, q81)
		for i := range nblk {
			xb := x[32*i : 32*i+32]
			var q [32]int8
			var d float32
			sum := quantQ8_0(xb, q[:], &d)
			blk := buf[i*stride:]
			for j := range 32 {
				if int8(blk[j]) != q[j] {
					t.Fatalf("q81=%d block %d quant %d: have %d; want %d", q81, i, j, int8(blk[j]), q[j])
				}
			}
			if have := math.Float32frombits(le.Uint32(blk[32:])); math.Float32bits(have) != math.Float32bits(d) {
				t.Fatalf("q81=%d block %d: d = %g; want %g", q81, i, have, d)
			}
			if q81 == 0 {
				if have, want := int32(le.Uint32(blk[36:])), int32(-16*sum); have != want {
					t.Fatalf("block %d: c = %d; want %d", i, have, want)
				}
			} else if have, want := math.Float32frombits(le.Uint32(blk[36:])), s8_1(sum, xb); math.Float32bits(have) != math.Float32bits(want) {
				t.Fatalf("block %d: s = %g; want %g", i, have, want)
			}
			for j := 40; j < stride; j++ {
				if blk[j] != 0xa5 {
					t.Fatalf("q81=%d block %d: byte %d written", q81, i, j)
				}
			}
		}
	}
}

// TestSpreadQH checks spreadQH bit by bit against its definition.
func TestSpreadQH(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for range 1000 {
		qh := r.Uint32()
		w := spreadQH(qh)
		for m := range 4 {
			for b := range 4 {
				if w>>(8*b+m)&1 != qh>>(4*m+b)&1 || w>>(8*b+4+m)&1 != qh>>(16+4*m+b)&1 {
					t.Fatalf("spreadQH(%#x) = %#x: byte %d step %d wrong", qh, w, b, m)
				}
			}
		}
	}
}

// checkTilePaths runs m·x (batch rows) on every implementation but
// "generic" against the plain-Go reference: within compare's tolerance,
// bit for bit between the implementations, and each row alone bit for bit
// against the same row in the batch. The caller restores the implementation.
func checkTilePaths(t *testing.T, pool *Pool, what string, m *Matrix, x []float32, batch int) {
	t.Helper()
	rows, cols := m.Rows, m.Cols
	want := make([]float32, batch*rows)
	matmulRef(nil, want, m, x, batch)
	var first []float32
	for _, name := range Impls() {
		if name == "generic" {
			continue
		}
		if err := SetImpl(name); err != nil {
			t.Fatal(err)
		}
		y, check := guarded(batch * rows)
		MatMul(pool, y, m, x, batch)
		check(t)
		compare(t, what+" "+name, y, want, m, x, batch)
		if first == nil {
			first = append([]float32(nil), y...)
		} else {
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(first[i]) {
					t.Fatalf("%s: %s gives y[%d] = %g; %s %g", what, name, i, y[i], Impls()[0], first[i])
				}
			}
		}
		for _, b := range []int{0, batch / 2, batch - 1} {
			y1 := make([]float32, rows)
			MatMul(pool, y1, m, x[b*cols:(b+1)*cols], 1)
			for i := range y1 {
				if math.Float32bits(y1[i]) != math.Float32bits(y[b*rows+i]) {
					t.Fatalf("%s %s: row %d alone gives y[%d] = %g; in the batch %g", what, name, b, i, y1[i], y[b*rows+i])
				}
			}
		}
	}
}

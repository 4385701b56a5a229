package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// kRefMatMul is the float64 product of the dequantized weights with the
// activations as ggml quantizes them for typ (Q8_K, Q8_0 or Q8_1), written
// from the formulas of kquant.go without the integer decomposition.
func kRefMatMul(typ dtype.Type, w *Matrix, x []float32, batch int) []float64 {
	rows, cols := w.Rows, w.Cols
	wf := make([]float32, rows*cols)
	if err := dtype.Dequantize(typ, wf, w.Data); err != nil {
		panic(err)
	}
	a := quantizeKActs(nil, typ, x, batch, cols)
	bs := typ.BlockSize()
	y := make([]float64, batch*rows)
	for b := range batch {
		xq, xd, _, xs := a.row(b)
		for r := range rows {
			var s float64
			for c := range cols {
				wv := float64(wf[r*cols+c])
				if xs != nil { // Q4_1/Q5_1: the min term uses s_x instead of d_x·Σq_x
					wv -= float64(dtype.F16ToF32(binary.LittleEndian.Uint16(w.Row(r)[c/bs*typ.BlockBytes()+2:])))
				}
				s += wv * float64(xd[c/bs]) * float64(xq[c])
			}
			if xs != nil {
				for i := range cols / bs {
					s += float64(dtype.F16ToF32(binary.LittleEndian.Uint16(w.Row(r)[i*typ.BlockBytes()+2:]))) * float64(xs[i])
				}
			}
			y[b*rows+r] = s
		}
	}
	return y
}

func TestKMatMulAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, typ := range dtype.KTypes {
		for _, sh := range [][3]int{{1, 256, 1}, {37, 512, 3}, {16, 768, 2}} {
			rows, cols, batch := sh[0], sh[1], sh[2]
			m, _ := randMatrix(t, r, typ, rows, cols)
			x := randVec(r, batch*cols, 1)
			want := kRefMatMul(typ, m, x, batch)
			y := make([]float32, batch*rows)
			matmulRef(nil, y, m, x, batch)
			for i := range y {
				if d := math.Abs(float64(y[i]) - want[i]); !(d <= 1e-5*(1+math.Abs(want[i]))) {
					t.Fatalf("%v %dx%d B=%d: y[%d] = %g; float64 reference %g", typ, rows, cols, batch, i, y[i], want[i])
				}
			}
		}
	}
}

// TestKMatMulImpls checks every implementation against the plain-Go kernel
// on rows not a multiple of any tile, batches of every register-block size,
// zero activation blocks, guard values around the output; and MatMulArgmax
// against MatMul + Argmax.
func TestKMatMulImpls(t *testing.T) {
	batches := []int{1, 2, 3, 4, 5, 8, 13, 33, 70} // 70: two activation chunks (kBatchChunk)
	if testing.Short() {
		batches = []int{1, 3, 13}
	}
	pool := NewPool(3)
	defer pool.Close()
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		for _, typ := range dtype.KTypes {
			for _, s := range [][2]int{{1, 256}, {33, 512}, {70, 256}, {5, 1024}} {
				rows, cols := s[0], s[1]
				m, _ := randMatrix(t, r, typ, rows, cols)
				for _, batch := range batches {
					x := randVec(r, batch*cols, 1)
					if batch > 2 {
						clear(x[2*cols : 2*cols+256]) // a zero block
						x[cols+3] = 0
					}
					want := make([]float32, batch*rows)
					matmulRef(nil, want, m, x, batch)
					y, check := guarded(batch * rows)
					MatMul(pool, y, m, x, batch)
					check(t)
					compare(t, fmt.Sprintf("%v %dx%d B=%d", typ, rows, cols, batch), y, want, m, x, batch)

					checkArgmax(t, pool, m, x, y, batch)
				}
			}
		}
	})
}

// TestKMatMulDeterministic: an output does not depend on the batch it is
// computed in or on the number of threads.
func TestKMatMulDeterministic(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(15, 16))
		p1, p3 := NewPool(1), NewPool(3)
		defer p1.Close()
		defer p3.Close()
		for _, typ := range dtype.KTypes {
			const rows, cols, batch = 100, 512, 11
			m, _ := randMatrix(t, r, typ, rows, cols)
			x := randVec(r, batch*cols, 1)
			yb := make([]float32, batch*rows)
			MatMul(p3, yb, m, x, batch)
			for _, b := range []int{0, 6, 10} {
				y1 := make([]float32, rows)
				MatMul(p1, y1, m, x[b*cols:(b+1)*cols], 1)
				for i := range y1 {
					if math.Float32bits(y1[i]) != math.Float32bits(yb[b*rows+i]) {
						t.Fatalf("%v: row %d alone gives y[%d] = %g; in a batch of %d: %g", typ, b, i, y1[i], batch, yb[b*rows+i])
					}
				}
			}
		}
	})
}

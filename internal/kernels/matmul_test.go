package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// randMatrix returns a (rows, cols) matrix of type t and its exact f32 values.
func randMatrix(t testing.TB, r *rand.Rand, typ dtype.Type, rows, cols int) (*Matrix, []float32) {
	f := make([]float32, rows*cols)
	for i := range f {
		f[i] = float32(r.NormFloat64())
	}
	data, err := dtype.Quantize(typ, nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := dtype.Dequantize(typ, f, data); err != nil {
		t.Fatal(err)
	}
	m, err := NewMatrix(typ, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	return m, f
}

// refMatMul is the float64 product of the dequantized weights and the
// activations as the kernel sees them (Q8_0-rounded for quantized weights).
func refMatMul(typ dtype.Type, wf []float32, x []float32, rows, cols, batch int) []float64 {
	xs := x
	if typ == dtype.Q8_0 || typ == dtype.Q4_0 {
		q, _ := dtype.Quantize(dtype.Q8_0, nil, x)
		xs = make([]float32, len(x))
		dtype.Dequantize(dtype.Q8_0, xs, q)
	}
	y := make([]float64, batch*rows)
	for b := range batch {
		for r := range rows {
			var s float64
			for c := range cols {
				s += float64(wf[r*cols+c]) * float64(xs[b*cols+c])
			}
			y[b*rows+r] = s
		}
	}
	return y
}

func TestMatMulAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	pool := NewPool(3)
	defer pool.Close()
	for _, typ := range dtype.Types {
		for _, shape := range [][3]int{{1, 32, 1}, {5, 64, 3}, {37, 96, 7}, {130, 256, 9}} {
			rows, cols, batch := shape[0], shape[1], shape[2]
			t.Run(fmt.Sprintf("%v/%dx%d/B=%d", typ, rows, cols, batch), func(t *testing.T) {
				m, wf := randMatrix(t, r, typ, rows, cols)
				x := make([]float32, batch*cols)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				const guard = 12345.5
				y := make([]float32, batch*rows+4)
				for i := range y {
					y[i] = guard
				}
				MatMul(pool, y[:batch*rows], m, x, batch)
				want := refMatMul(typ, wf, x, rows, cols, batch)
				for i, w := range want {
					tol := 1e-4 * (1 + math.Abs(w)) * math.Sqrt(float64(cols))
					if d := math.Abs(float64(y[i]) - w); d > tol || math.IsNaN(float64(y[i])) {
						t.Fatalf("y[%d]: have %g; want %g (diff %g > %g)", i, y[i], w, d, tol)
					}
				}
				for i := batch * rows; i < len(y); i++ {
					if y[i] != guard {
						t.Fatalf("guard y[%d] overwritten: %g", i, y[i])
					}
				}
			})
		}
	}
}

func TestArgmaxTies(t *testing.T) {
	cases := []struct {
		x    []float32
		want int
	}{
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{-1, -1}, 0},
		{[]float32{float32(math.NaN()), 2, 5, 5}, 2},
	}
	for _, c := range cases {
		if have := Argmax(c.x); have != c.want {
			t.Errorf("Argmax(%v): have %d; want %d", c.x, have, c.want)
		}
	}
}

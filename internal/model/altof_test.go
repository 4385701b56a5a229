package model

import (
	"math"
	"testing"
)

// TestAltOfEdges: the cases without a meaningful runner-up, a tie with the
// greedy id, NaNs, and a trimmed head's id mapping; y is left as it was.
func TestAltOfEdges(t *testing.T) {
	inf, nan := float32(math.Inf(-1)), float32(math.NaN())
	for _, c := range []struct {
		name   string
		y      []float32
		ids    []int
		next   int
		alt    int
		pn, pa float32
	}{
		{"one id", []float32{3}, nil, 0, -1, 1, 0},
		{"others -Inf", []float32{inf, 2, inf}, nil, 1, -1, 1, 0},
		{"others NaN", []float32{nan, 2, nan}, nil, 1, -1, 1, 0},
		{"maximum -Inf", []float32{inf, inf}, nil, 0, -1, 1, 0},
		{"tie with next", []float32{inf, 5, 5}, nil, 1, 2, 0.5, 0.5},
		{"NaN beside", []float32{nan, 0, float32(math.Log(3))}, nil, 2, 1, 0.75, 0.25},
		{"trimmed head", []float32{0, float32(math.Log(3))}, []int{7, 40}, 40, 7, 0.75, 0.25},
	} {
		y := append([]float32(nil), c.y...)
		alt, pn, pa := altOf(y, c.ids, c.next)
		if alt != c.alt || math.Abs(float64(pn-c.pn)) > 1e-6 || math.Abs(float64(pa-c.pa)) > 1e-6 {
			t.Errorf("%s: have alt %d, p %g %g; want %d, %g %g", c.name, alt, pn, pa, c.alt, c.pn, c.pa)
		}
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(c.y[i]) {
				t.Errorf("%s: y[%d] = %g after altOf; was %g", c.name, i, y[i], c.y[i])
			}
		}
	}
}

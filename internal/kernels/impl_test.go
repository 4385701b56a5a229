package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// forEachImpl runs f once per implementation this build and CPU support,
// with that implementation forced.
func forEachImpl(t *testing.T, f func(t *testing.T)) {
	defer SetImpl(Impls()[0])
	for _, name := range Impls() {
		t.Run(name, func(t *testing.T) {
			if err := SetImpl(name); err != nil {
				t.Fatal(err)
			}
			f(t)
		})
	}
}

const guard = float32(-7.25e33)

// guarded returns a slice of n floats inside a larger one whose borders hold
// guard values, and a check that they are intact.
func guarded(n int) ([]float32, func(t *testing.T)) {
	buf := make([]float32, n+32)
	for i := range buf {
		buf[i] = guard
	}
	s := buf[16 : 16+n : 16+n]
	return s, func(t *testing.T) {
		t.Helper()
		for i := range 16 {
			if buf[i] != guard || buf[16+n+i] != guard {
				t.Fatalf("guard value overwritten next to a %d-float output", n)
			}
		}
	}
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

// TestMatMulImpls checks every implementation against the plain-Go
// reference on awkward shapes: rows not a multiple of the 32-row tile,
// float columns not a multiple of 8, every batch-tile size.
func TestMatMulImpls(t *testing.T) {
	shapes := [][2]int{{1, 32}, {31, 64}, {33, 96}, {64, 256}, {95, 160}, {7, 1024}}
	floatShapes := [][2]int{{1, 1}, {17, 3}, {40, 13}, {33, 100}, {96, 8}}
	batches := []int{1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 25, 33, 64, 131}
	if testing.Short() {
		batches = []int{1, 5, 13, 33}
	}
	pool := NewPool(3)
	defer pool.Close()
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, typ := range dtype.Types {
			sh := shapes
			if typ == dtype.F32 || typ == dtype.F16 || typ == dtype.BF16 {
				sh = append(append([][2]int{}, shapes...), floatShapes...)
			}
			for _, s := range sh {
				rows, cols := s[0], s[1]
				m, _ := randMatrix(t, r, typ, rows, cols)
				for _, batch := range batches {
					x := randVec(r, batch*cols, 1)
					if batch > 2 {
						x[cols+1] = 0 // a zero, and a whole zero block below
						clear(x[2*cols : 2*cols+min(cols, 32)])
					}
					want := make([]float32, batch*rows)
					matmulRef(nil, want, m, x, batch)
					y, check := guarded(batch * rows)
					MatMul(pool, y, m, x, batch)
					check(t)
					compare(t, fmt.Sprintf("%v %dx%d B=%d", typ, rows, cols, batch), y, want, m, x, batch)
				}
			}
		}
	})
}

// compare allows the f32 rounding of a differently ordered or fused sum:
// a few ulps of Σ|w·x| per output.
func compare(t *testing.T, what string, have, want []float32, m *Matrix, x []float32, batch int) {
	t.Helper()
	wf := make([]float32, m.Rows*m.Cols)
	if err := dtype.Dequantize(m.Type, wf, m.Data); err != nil {
		t.Fatal(err)
	}
	for b := range batch {
		for r := range m.Rows {
			var mag float64
			for c := range m.Cols {
				mag += math.Abs(float64(wf[r*m.Cols+c]) * float64(x[b*m.Cols+c]))
			}
			i := b*m.Rows + r
			tol := 4e-6 * mag * math.Sqrt(float64(m.Cols)/32+1)
			if m.Type == dtype.Q8_0 || m.Type == dtype.Q4_0 {
				tol = 2e-6*mag + 1e-30
			}
			if d := math.Abs(float64(have[i] - want[i])); !(d <= tol) {
				t.Fatalf("%s: y[b=%d, r=%d] = %g; reference %g (diff %g > %g)", what, b, r, have[i], want[i], d, tol)
			}
		}
	}
}

// TestMatMulDeterministic checks that an output does not depend on the batch
// it is computed in or on the number of threads: bit-identical results.
func TestMatMulDeterministic(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		p1, p3 := NewPool(1), NewPool(3)
		defer p1.Close()
		defer p3.Close()
		for _, typ := range dtype.Types {
			// 131 rows take the cache-blocked large-batch (prefill) kernels.
			for _, batch := range []int{29, 131} {
				const rows, cols = 100, 256
				m, _ := randMatrix(t, r, typ, rows, cols)
				x := randVec(r, batch*cols, 1)
				yb := make([]float32, batch*rows)
				MatMul(p3, yb, m, x, batch)
				for _, b := range []int{0, 7, 28, batch - 1} {
					y1 := make([]float32, rows)
					MatMul(p1, y1, m, x[b*cols:(b+1)*cols], 1)
					for i := range y1 {
						if math.Float32bits(y1[i]) != math.Float32bits(yb[b*rows+i]) {
							t.Fatalf("%v: row %d alone gives y[%d] = %g; in a batch of %d: %g", typ, b, i, y1[i], batch, yb[b*rows+i])
						}
					}
				}
			}
		}
	})
}

func TestArgmaxImpls(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(9, 9))
		nan := float32(math.NaN())
		inf := float32(math.Inf(1))
		for _, n := range []int{1, 15, 16, 17, 48, 100, 151936} {
			x := randVec(r, n, 1)
			check := func(what string) {
				t.Helper()
				if have, want := Argmax(x), argmaxGeneric(x); have != want {
					t.Fatalf("n=%d %s: have %d; want %d", n, what, have, want)
				}
			}
			check("random")
			x[n-1] = 10
			x[n/2] = 10
			check("tie")
			x[0] = nan
			check("nan")
			for i := range x {
				x[i] = float32(math.Inf(-1))
			}
			check("all -inf")
			x[n-1] = nan
			check("-inf and nan")
			x[n/3] = inf
			check("inf")
		}
	})
}

// TestMatMulArgmax checks MatMulArgmax against MatMul followed by Argmax on
// every implementation, with exact ties (duplicate weight rows) as the
// maxima, both within one 512-row chunk and across chunks handled by
// different workers.
func TestMatMulArgmax(t *testing.T) {
	pool := NewPool(3)
	defer pool.Close()
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(21, 22))
		for _, typ := range dtype.Types {
			for _, rows := range []int{1, 33, 700, 2085} {
				const cols = 64
				// Rows rows/3 and rows-1 are all +1, rows 0 and 1 all -1 (exact
				// in every type); activation row 0 is positive and row 1
				// negative, so their maxima are those ties by a wide margin
				// (Σ|x| ≈ 51 against random rows' products of σ ≈ 8).
				f := randVec(r, rows*cols, 1)
				for _, row := range []int{rows / 3, rows - 1, 0, 1} {
					if row < rows {
						v := float32(1)
						if row <= 1 && row != rows/3 && row != rows-1 {
							v = -1
						}
						for c := range cols {
							f[row*cols+c] = v
						}
					}
				}
				data, err := dtype.Quantize(typ, nil, f)
				if err != nil {
					t.Fatal(err)
				}
				m, err := NewMatrix(typ, rows, cols, data)
				if err != nil {
					t.Fatal(err)
				}
				for _, batch := range []int{1, 3, 13, 32, 70} {
					x := randVec(r, batch*cols, 1)
					for c := range cols {
						x[c] = float32(math.Abs(float64(x[c])))
						if batch > 1 {
							x[cols+c] = -float32(math.Abs(float64(x[cols+c])))
						}
					}
					y := make([]float32, batch*rows)
					MatMul(pool, y, m, x, batch)
					if have, want := Argmax(y[:rows]), rows/3; have != want {
						t.Fatalf("%v rows=%d: activation row 0's maximum is row %d; want the tie at %d", typ, rows, have, want)
					}
					if batch > 1 && rows > 2 {
						if have := Argmax(y[rows : 2*rows]); have != 0 {
							t.Fatalf("%v rows=%d: activation row 1's maximum is row %d; want the tie at 0", typ, rows, have)
						}
					}
					checkArgmax(t, pool, m, x, y, batch)
				}
			}
		}
	})
}

// TestMatMulExtremeCodes checks every implementation against the reference
// on the codes where int8 tricks break: Q8_0 weights of -128 and ±127 (a
// sign-flipped -128 overflows; pairs of 127·127 products near int16
// saturation) and Q4_0 nibbles 0 and 15, against activations at ±127.
func TestMatMulExtremeCodes(t *testing.T) {
	const rows, cols = 40, 256
	pool := NewPool(2)
	defer pool.Close()
	forEachImpl(t, func(t *testing.T) {
		for _, typ := range []dtype.Type{dtype.Q8_0, dtype.Q4_0} {
			rb, _ := typ.RowBytes(cols)
			data := make([]byte, rows*rb)
			bb := rb / (cols / dtype.QK) // bytes per block
			for i := 0; i < len(data); i += bb {
				binary.LittleEndian.PutUint16(data[i:], dtype.F32ToF16(0.01*float32(1+i%7)))
				for k := 2; k < bb; k++ {
					switch (i/bb + k) % 4 {
					case 0:
						data[i+k] = 0x80 // Q8_0: -128; Q4_0: nibbles 0 and 8
					case 1:
						data[i+k] = 0x7f // 127; nibbles 15 and 7
					case 2:
						data[i+k] = 0x81 // -127; nibbles 1 and 8
					default:
						data[i+k] = 0xff // -1; nibbles 15 and 15
					}
				}
			}
			m, err := NewMatrix(typ, rows, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			for _, batch := range []int{1, 2, 3, 70} {
				x := make([]float32, batch*cols)
				for i := range x {
					x[i] = float32(1 - 2*(i/3%2)) // ±1: every quant ±127
				}
				want := make([]float32, batch*rows)
				matmulRef(nil, want, m, x, batch)
				y, check := guarded(batch * rows)
				MatMul(pool, y, m, x, batch)
				check(t)
				compare(t, fmt.Sprintf("%v B=%d", typ, batch), y, want, m, x, batch)
			}
		}
	})
}

// checkArgmax checks MatMulArgmax of m and x (batch rows) against Argmax of
// each row of y, the MatMul output, and that it writes no id past batch.
func checkArgmax(t *testing.T, pool *Pool, m *Matrix, x, y []float32, batch int) {
	t.Helper()
	rows := m.Rows
	ids := make([]int, batch+1)
	ids[batch] = -7
	MatMulArgmax(pool, ids, m, x, batch)
	if ids[batch] != -7 {
		t.Fatal("ids written past batch")
	}
	for b := range batch {
		if want := Argmax(y[b*rows : (b+1)*rows]); ids[b] != want {
			t.Fatalf("%v rows=%d B=%d: row %d argmax %d; MatMul+Argmax %d", m.Type, rows, batch, b, ids[b], want)
		}
	}
}

// TestMatMuls checks MatMuls against the plain-Go reference for each matrix
// and against MatMul one matrix at a time (bit-identical), on every
// implementation: matrices of one type and width (the activations are
// quantized once for all of them), with row counts that leave partial
// tiles, at decode and cache-blocked prefill batches; and a mixed list,
// which is computed matrix by matrix.
func TestMatMuls(t *testing.T) {
	pool := NewPool(3)
	defer pool.Close()
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		const cols = 256
		for _, types := range [][]dtype.Type{
			{dtype.Q8_0, dtype.Q8_0, dtype.Q8_0},
			{dtype.Q4_0, dtype.Q4_0},
			{dtype.Q8_0, dtype.Q4_0, dtype.BF16},
		} {
			rows := []int{64, 33, 95}[:len(types)]
			ws := make([]*Matrix, len(types))
			for i, typ := range types {
				ws[i], _ = randMatrix(t, r, typ, rows[i], cols)
			}
			for _, batch := range []int{1, 5, 13, 70, 131} {
				x := randVec(r, batch*cols, 1)
				ys := make([][]float32, len(ws))
				checks := make([]func(*testing.T), len(ws))
				for i, w := range ws {
					ys[i], checks[i] = guarded(batch * w.Rows)
				}
				MatMuls(pool, ys, ws, x, batch)
				for i, w := range ws {
					what := fmt.Sprintf("%v B=%d matrix %d (%v, %d rows)", types, batch, i, w.Type, w.Rows)
					checks[i](t)
					want := make([]float32, batch*w.Rows)
					matmulRef(nil, want, w, x, batch)
					compare(t, what, ys[i], want, w, x, batch)
					one := make([]float32, batch*w.Rows)
					MatMul(pool, one, w, x, batch)
					for k := range one {
						if math.Float32bits(one[k]) != math.Float32bits(ys[i][k]) {
							t.Fatalf("%s: y[%d] = %g; MatMul alone %g", what, k, ys[i][k], one[k])
						}
					}
				}
			}
		}
	})
}

// TestMatMulArgmaxKeep checks the logits MatMulArgmaxKeep stores for the
// rows that ask, on every implementation and weight type: bit for bit
// those of MatMul (the full product, written straight by the kernels), and
// within rounding of the plain-Go reference (matmulRef); the greedy ids are
// Argmax of the kept rows and those of MatMulArgmax without keep; guard
// values around each kept row catch writes past it. Row counts cross the
// 512-row chunks of the assembly path and the 4096-row chunks of the
// K-quant path, and leave partial tiles.
func TestMatMulArgmaxKeep(t *testing.T) {
	pool := NewPool(3)
	defer pool.Close()
	types := append(append([]dtype.Type{}, dtype.Types...), dtype.KTypes...)
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(31, 32))
		for _, typ := range types {
			const cols = 256
			for _, rows := range []int{1, 45, 1061, 4133} {
				if testing.Short() && rows > 1061 {
					continue
				}
				m, _ := randMatrix(t, r, typ, rows, cols)
				for _, batch := range []int{1, 3, 13, 70} {
					if batch > 13 && rows > 1061 {
						continue
					}
					what := fmt.Sprintf("%v rows=%d B=%d", typ, rows, batch)
					x := randVec(r, batch*cols, 1)
					y := make([]float32, batch*rows)
					MatMul(pool, y, m, x, batch)
					want := make([]float32, batch*rows)
					matmulRef(nil, want, m, x, batch)
					plain := make([]int, batch)
					MatMulArgmax(pool, plain, m, x, batch)

					keep := make([][]float32, batch)
					checks := make([]func(*testing.T), batch)
					for b := range batch {
						if b%3 == 0 || b == batch-1 {
							keep[b], checks[b] = guarded(rows)
						}
					}
					ids := make([]int, batch)
					MatMulArgmaxKeep(pool, ids, keep, m, x, batch)
					var have, ref, xk []float32 // the kept rows, for compare
					for b := range batch {
						if ids[b] != plain[b] {
							t.Fatalf("%s: row %d argmax %d with keep; %d without", what, b, ids[b], plain[b])
						}
						if keep[b] == nil {
							continue
						}
						checks[b](t)
						if have := argmaxGeneric(keep[b]); have != ids[b] {
							t.Fatalf("%s: row %d: Argmax of the kept logits is %d; the kernel chose %d", what, b, have, ids[b])
						}
						for i, v := range keep[b] {
							if math.Float32bits(v) != math.Float32bits(y[b*rows+i]) {
								t.Fatalf("%s: kept logit [%d][%d] = %g; MatMul %g", what, b, i, v, y[b*rows+i])
							}
						}
						have = append(have, keep[b]...)
						ref = append(ref, want[b*rows:(b+1)*rows]...)
						xk = append(xk, x[b*cols:(b+1)*cols]...)
					}
					if rows <= 1061 && batch <= 13 { // beyond: bit-identical to MatMul, which TestMatMulImpls covers
						compare(t, what, have, ref, m, xk, len(xk)/cols)
					}
				}
			}
		}
	})
}

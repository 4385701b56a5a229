//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// TestQ8ScoresSameBits checks the integer-dot score kernels bit for bit
// against q8Score, their plain-Go specification: every row count of a pass,
// heads of 1…8 blocks, keys and queries with extreme values (±127, all-zero
// blocks, huge and tiny scales), and the masked tail rows of a short call.
func TestQ8ScoresSameBits(t *testing.T) {
	type scorer struct {
		name string
		run  func(s []float32, z *q8Query, k []byte, nb, rows int, scale float32) []float32 // scores of row h at [16h+p]
	}
	var scorers []scorer
	if hasAVX512 {
		scorers = append(scorers, scorer{"avx512", func(s []float32, z *q8Query, k []byte, nb, rows int, scale float32) []float32 {
			q8ScoresAVX512(&s[0], &k[0], nb, rows, &z.q[0][0], &z.m[0][0], scale, &z.dk[0], &k[0])
			return s
		}})
	}
	if hasAVX2 {
		scorers = append(scorers, scorer{"avx2", func(s []float32, z *q8Query, k []byte, nb, rows int, scale float32) []float32 {
			q8ScoresAVX2(&s[0], &k[0], nb, rows, &z.q[0][0], &z.m[0][0], scale, &z.dk[0], &z.sh[0], &k[0])
			hm := make([]float32, 16*8) // position-major s[8p+h] to head-major
			for p := range 16 {
				for h := range 8 {
					hm[16*h+p] = s[8*p+h]
				}
			}
			return hm
		}})
	}
	if len(scorers) == 0 {
		t.Skip("no score kernel on this CPU")
	}
	r := rand.New(rand.NewPCG(41, 42))
	for _, sc := range scorers {
		for _, hd := range []int{32, 64, 96, 128, 256} {
			for rows := 1; rows <= attnMaxNQ; rows++ {
				for _, kind := range []string{"normal", "extreme"} {
					name := fmt.Sprintf("%s hd=%d rows=%d %s", sc.name, hd, rows, kind)
					q := randVec(r, rows*hd, 3)
					x := randVec(r, 16*hd, 1)
					if kind == "extreme" {
						for i := range x {
							switch r.IntN(6) {
							case 0:
								x[i] *= 1e4
							case 1:
								x[i] = 0
							}
						}
						for i := range q {
							if r.IntN(5) == 0 {
								q[i] *= 3e3
							}
						}
						clear(x[32 : 32+32]) // an all-zero block (d = 0)
						clear(q[:min(32, len(q))])
					}
					k, err := dtype.Quantize(dtype.Q8_0, nil, x)
					if err != nil {
						t.Fatal(err)
					}
					var z q8Query
					var qo [attnMaxNQ]int
					for j := range rows {
						qo[j] = j * hd
					}
					z.quantize(q, &qo, rows, hd)
					scale := float32(1 / math.Sqrt(float64(hd)))
					s := make([]float32, 16*8+8)
					have := sc.run(s, &z, k, hd/32, rows, scale)
					rl := rowLen[byte](hd)
					for h := range rows {
						// The pass's quantizer (assembly) against the twin's.
						qq, qd, qc := make([]int8, hd), make([]float32, hd/32), make([]int32, hd/32)
						quantQuery(q[h*hd:(h+1)*hd], qq, qd, qc)
						for i, v := range qq {
							if a := int8(z.q[h][i]); a != v || z.q[h][256+i] != byte(max(v, -v)) {
								t.Fatalf("%s: row %d: quantized query element %d is %d (|q| %d); quantQuery gives %d", name, h, i, a, z.q[h][256+i], v)
							}
						}
						for b := range qd {
							if d, c := math.Float32frombits(z.m[h][2*b]), int32(z.m[h][2*b+1]); math.Float32bits(d) != math.Float32bits(qd[b]) || c != qc[b] {
								t.Fatalf("%s: row %d block %d: d, -128·Σq = %g, %d; quantQuery gives %g, %d", name, h, b, d, c, qd[b], qc[b])
							}
						}
						for p := range 16 {
							want := q8Score(qq, qd, k[p*rl:(p+1)*rl], scale)
							if v := have[16*h+p]; math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%s: row %d position %d: have %g (%#x); want %g (%#x)", name, h, p, v, math.Float32bits(v), want, math.Float32bits(want))
							}
						}
					}
				}
			}
		}
	}
}

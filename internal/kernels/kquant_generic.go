// Plain-Go kernel for K-quant and Q4_1/Q5_0/Q5_1 weights: the specification
// of kquant.go written out, the reference the AVX2 kernels are tested
// against and the path on other CPUs.
package kernels

import (
	"github.com/draftd/draftd/internal/dtype"
)

// kRow is one weight row decoded to integers.
type kRow struct {
	q     []int8    // (cols) quant of each weight, offset removed where the type has one (Q3_K, Q5_0, Q6_K)
	sc    []int32   // (cols/16) K-quants: scale of each 16-weight group
	m     []int32   // (cols/16) Q2_K/Q4_K/Q5_K: min of each 16-weight group
	d, dm []float32 // (nblk) block scale; block min scale (K-quants) or min (Q4_1/Q5_1)
}

func newKRow(cols, nblk int) *kRow {
	return &kRow{q: make([]int8, cols), sc: make([]int32, cols/16), m: make([]int32, cols/16),
		d: make([]float32, nblk), dm: make([]float32, nblk)}
}

// decode fills r from the stored row of type t.
func (r *kRow) decode(t dtype.Type, row []byte) {
	bb, n := t.BlockBytes(), t.BlockSize()
	f16 := func(b []byte) float32 { return dtype.F16ToF32(uint16(b[0]) | uint16(b[1])<<8) }
	for i := range len(r.d) {
		blk := row[i*bb : (i+1)*bb]
		q := r.q[i*n : (i+1)*n]
		switch t {
		case dtype.Q4_1:
			r.d[i], r.dm[i] = f16(blk), f16(blk[2:])
			for j := range 16 {
				q[j], q[j+16] = int8(blk[4+j]&0xf), int8(blk[4+j]>>4)
			}
		case dtype.Q5_0, dtype.Q5_1:
			off, bias := 2, 16
			r.d[i] = f16(blk)
			if t == dtype.Q5_1 {
				r.dm[i], off, bias = f16(blk[2:]), 4, 0
			}
			qh := uint32(blk[off]) | uint32(blk[off+1])<<8 | uint32(blk[off+2])<<16 | uint32(blk[off+3])<<24
			for j := range 16 {
				b := blk[off+4+j]
				q[j] = int8(int(b&0xf) | int(qh>>j&1)<<4 - bias)
				q[j+16] = int8(int(b>>4) | int(qh>>(j+16)&1)<<4 - bias)
			}
		case dtype.Q2_K:
			sc, m := r.sc[i*16:(i+1)*16], r.m[i*16:(i+1)*16]
			for j := range 16 {
				sc[j], m[j] = int32(blk[j]&0xf), int32(blk[j]>>4)
			}
			for e := range 256 {
				half, j, l := e/128, e%128/32, e%32
				q[e] = int8(blk[16+32*half+l] >> (2 * j) & 3)
			}
			r.d[i], r.dm[i] = f16(blk[80:]), f16(blk[82:])
		case dtype.Q3_K:
			sc := r.sc[i*16 : (i+1)*16]
			for j := range 16 {
				sc[j] = int32(dtype.ScaleQ3K(j, blk[96:108]))
				r.m[i*16+j] = 0
			}
			for e := range 256 {
				half, j, l := e/128, e%128/32, e%32
				v := int8(blk[32+32*half+l]>>(2*j)&3) - 4
				if blk[l]>>(4*half+j)&1 != 0 {
					v += 4
				}
				q[e] = v
			}
			r.d[i] = f16(blk[108:])
		case dtype.Q4_K, dtype.Q5_K:
			r.d[i], r.dm[i] = f16(blk), f16(blk[2:])
			qs := blk[16:]
			if t == dtype.Q5_K {
				qs = blk[48:]
			}
			for j := range 8 {
				s, m := dtype.ScaleMinK4(j, blk[4:16])
				r.sc[i*16+2*j], r.sc[i*16+2*j+1] = int32(s), int32(s)
				r.m[i*16+2*j], r.m[i*16+2*j+1] = int32(m), int32(m)
				for l := range 32 {
					v := qs[32*(j/2)+l]
					if j%2 == 0 {
						v &= 0xf
					} else {
						v >>= 4
					}
					if t == dtype.Q5_K && blk[16+l]>>j&1 != 0 {
						v += 16
					}
					q[32*j+l] = int8(v)
				}
			}
		case dtype.Q6_K:
			for j := range 16 {
				r.sc[i*16+j] = int32(int8(blk[192+j]))
				r.m[i*16+j] = 0
			}
			for e := range 256 {
				half, j, l := e/128, e%128/32, e%32
				lo := blk[64*half+32*(j%2)+l]
				if j >= 2 {
					lo >>= 4
				}
				q[e] = int8(lo&0xf|(blk[128+32*half+l]>>(2*j)&3)<<4) - 32
			}
			r.d[i] = f16(blk[208:])
		}
	}
}

// dot is the row's product with one quantized activation row (kquant.go's formulas).
func (r *kRow) dot(t dtype.Type, xq []int8, xd []float32, xbs []int16, xs []float32) float32 {
	var s float32
	if !t.IsK() {
		for i, dx := range xd {
			var isum int32
			for j := i * 32; j < i*32+32; j++ {
				isum += int32(r.q[j]) * int32(xq[j])
			}
			s += float32(r.d[i]*dx) * float32(isum)
			if xs != nil {
				s += float32(r.dm[i] * xs[i])
			}
		}
		return s
	}
	for i, dx := range xd {
		var isum, summs int32
		for j := i * 16; j < i*16+16; j++ {
			var g int32
			for l := j * 16; l < j*16+16; l++ {
				g += int32(r.q[l]) * int32(xq[l])
			}
			isum += r.sc[j] * g
			summs += r.m[j] * int32(xbs[j])
		}
		s += float32(r.d[i]*dx) * float32(isum)
		if t == dtype.Q2_K || t == dtype.Q4_K || t == dtype.Q5_K {
			s -= float32(r.dm[i]*dx) * float32(summs)
		}
	}
	return s
}

// kRowsGeneric computes outputs rows [lo, hi) of w·x for every activation
// row b into y[b·ystride + r − base].
func kRowsGeneric(w *Matrix, a *kActs, y []float32, ystride, batch, lo, hi, base int) {
	r := newKRow(w.Cols, a.nblk)
	for row := lo; row < hi; row++ {
		r.decode(w.Type, w.Row(row))
		for b := range batch {
			xq, xd, xbs, xs := a.row(b)
			y[b*ystride+row-base] = r.dot(w.Type, xq, xd, xbs, xs)
		}
	}
}

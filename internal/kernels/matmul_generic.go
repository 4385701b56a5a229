// Plain-Go reference of MatMul: the specification every fast kernel is tested
// against, and the path used under the purego build tag or on other CPUs.
package kernels

import (
	"encoding/binary"
	"math"

	"github.com/draftd/draftd/internal/dtype"
)

// matmulGeneric computes output rows [lo, hi) of y = x·Wᵀ (see MatMul).
// xq is x quantized to Q8_0 blocks when w is Q8_0/Q4_0, else nil.
func matmulGeneric(y []float32, w *Matrix, x []float32, xq []byte, batch, lo, hi int) {
	cols, rows := w.Cols, w.Rows
	switch w.Type {
	case dtype.F32, dtype.F16, dtype.BF16:
		wr := make([]float32, cols) // (cols) row r widened to f32
		for r := lo; r < hi; r++ {
			row := w.Row(r)
			switch w.Type {
			case dtype.F32:
				for c := range wr {
					wr[c] = math.Float32frombits(binary.LittleEndian.Uint32(row[4*c:]))
				}
			case dtype.F16:
				for c := range wr {
					wr[c] = dtype.F16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
				}
			case dtype.BF16:
				for c := range wr {
					wr[c] = dtype.BF16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
				}
			}
			for b := range batch {
				xb := x[b*cols : (b+1)*cols]
				var s float32
				for c, v := range wr {
					s += v * xb[c]
				}
				y[b*rows+r] = s
			}
		}
	case dtype.Q8_0, dtype.Q4_0:
		nb := cols / dtype.QK
		xrb := nb * 34
		wq := make([]int8, cols)  // (cols) row r as int8 quants
		wd := make([]float32, nb) // (nb) row r block scales
		for r := lo; r < hi; r++ {
			row := w.Row(r)
			for i := range nb {
				if w.Type == dtype.Q8_0 {
					blk := row[i*34 : i*34+34]
					wd[i] = dtype.F16ToF32(binary.LittleEndian.Uint16(blk))
					for j := range dtype.QK {
						wq[i*dtype.QK+j] = int8(blk[2+j])
					}
				} else {
					blk := row[i*18 : i*18+18]
					wd[i] = dtype.F16ToF32(binary.LittleEndian.Uint16(blk))
					for j := range dtype.QK / 2 {
						wq[i*dtype.QK+j] = int8(blk[2+j]&0x0f) - 8
						wq[i*dtype.QK+j+16] = int8(blk[2+j]>>4) - 8
					}
				}
			}
			for b := range batch {
				xr := xq[b*xrb : (b+1)*xrb]
				var s float32
				for i := range nb {
					blk := xr[i*34 : i*34+34]
					dx := dtype.F16ToF32(binary.LittleEndian.Uint16(blk))
					var isum int32
					for j := range dtype.QK {
						isum += int32(wq[i*dtype.QK+j]) * int32(int8(blk[2+j]))
					}
					s += float32(isum) * (wd[i] * dx)
				}
				y[b*rows+r] = s
			}
		}
	default:
		panic("kernels: matmul of unsupported type " + w.Type.String())
	}
}

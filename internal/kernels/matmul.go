// Matrix multiplication of stored weights by f32 activations: the one kernel
// that decides draftd's speed. This file holds the API and its specification;
// matmul_generic.go is the plain-Go reference, *_amd64.go the dispatch to
// assembly. It does not own weight layout on disk (see internal/gguf).
package kernels

import (
	"fmt"

	"github.com/draftd/draftd/internal/dtype"
)

// Matrix is a weight matrix W of shape (Rows, Cols): row r holds the Cols
// input weights of output r, stored as Type exactly as in a GGUF file
// (llama.cpp's ne0 = Cols). Kernels may keep a repacked copy (packed); the
// numbers it encodes never change.
type Matrix struct {
	Type       dtype.Type
	Rows, Cols int
	Data       []byte // (Rows, RowBytes(Cols)) as stored
	rowBytes   int
	packed     any // kernel-specific layout built by NewMatrix, or nil
}

// NewMatrix wraps data (not copied) as a (rows, cols) matrix of type t.
func NewMatrix(t dtype.Type, rows, cols int, data []byte) (*Matrix, error) {
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("matrix shape (%d, %d) must be positive", rows, cols)
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	if len(data) != rows*rb {
		return nil, fmt.Errorf("%v matrix (%d, %d) needs %d bytes; have %d", t, rows, cols, rows*rb, len(data))
	}
	m := &Matrix{Type: t, Rows: rows, Cols: cols, Data: data, rowBytes: rb}
	m.packed = pack(m)
	if kType(t) {
		m.packed = kpack(m) // kquant.go
	}
	return m, nil
}

// Row returns the stored bytes of row r.
func (m *Matrix) Row(r int) []byte { return m.Data[r*m.rowBytes : (r+1)*m.rowBytes] }

// Bytes is the size of the stored weights, for bandwidth accounting.
func (m *Matrix) Bytes() int { return len(m.Data) }

// MatMul computes y[b*Rows+r] = Σ_c W[r][c] · x[b*Cols+c] for b < batch:
// x is (batch, Cols) and y is (batch, Rows). Work is split by output rows over
// the pool. For F32/F16/BF16 weights the products are taken in f32. For
// Q8_0/Q4_0 weights each activation row is first quantized to Q8_0 blocks
// (as llama.cpp does) and each block product is an exact integer dot scaled
// by d_w·d_x, so every implementation agrees up to f32 summation order.
// K-quant and Q4_1/Q5_0/Q5_1 weights work the same way (see kquant.go).
func MatMul(p *Pool, y []float32, w *Matrix, x []float32, batch int) {
	if batch <= 0 {
		return
	}
	if len(x) < batch*w.Cols || len(y) < batch*w.Rows {
		panic(fmt.Sprintf("kernels.MatMul: x has %d, y has %d floats for batch %d of (%d, %d)", len(x), len(y), batch, w.Rows, w.Cols))
	}
	x = x[:batch*w.Cols]
	y = y[:batch*w.Rows]
	if kType(w.Type) {
		kmatmul(p, y, nil, nil, w, x, batch, false) // kquant.go
		return
	}
	matmul(p, y, w, x, batch)
}

// MatMuls computes ys[i] = x·ws[i]ᵀ for every i, with the results MatMul
// would give one matrix at a time (bit-identical), for matrices that read
// the same activations (a layer's Q, K and V, or its gate and up): when they
// share a type and width, the activation rows are quantized once for all of
// them instead of once per matrix.
func MatMuls(p *Pool, ys [][]float32, ws []*Matrix, x []float32, batch int) {
	if len(ys) != len(ws) {
		panic(fmt.Sprintf("kernels.MatMuls: %d outputs for %d matrices", len(ys), len(ws)))
	}
	if batch <= 0 || len(ws) == 0 {
		return
	}
	same := !kType(ws[0].Type)
	for i, w := range ws {
		if len(x) < batch*w.Cols || len(ys[i]) < batch*w.Rows {
			panic(fmt.Sprintf("kernels.MatMuls: x has %d, y[%d] has %d floats for batch %d of (%d, %d)", len(x), i, len(ys[i]), batch, w.Rows, w.Cols))
		}
		same = same && w.Type == ws[0].Type && w.Cols == ws[0].Cols
	}
	if !same || !matmuls(p, ys, ws, x[:batch*ws[0].Cols], batch) {
		for i, w := range ws {
			MatMul(p, ys[i], w, x, batch)
		}
	}
}

// MatMulArgmax sets ids[b] to the index of the largest element of row b of
// the product MatMul would compute (ties go to the lowest index, NaNs are
// never chosen, as in Argmax), for b < batch, without storing the product:
// the LM head of a decode step that needs only the greedy token.
func MatMulArgmax(p *Pool, ids []int, w *Matrix, x []float32, batch int) {
	MatMulArgmaxKeep(p, ids, nil, w, x, batch)
}

// MatMulArgmaxKeep is MatMulArgmax that also stores row b of the product
// into keep[b] (w.Rows floats) for each b < batch with keep[b] != nil: the
// very values the argmax compared, so ids[b] is Argmax(keep[b]) bit for bit
// and the ids do not depend on which rows are kept. keep is nil or has at
// least batch entries. This is for a caller that needs more than the
// greedy id of a few rows (the runner-up and softmax of pre-drafting)
// without a second product.
func MatMulArgmaxKeep(p *Pool, ids []int, keep [][]float32, w *Matrix, x []float32, batch int) {
	if batch <= 0 {
		return
	}
	if len(x) < batch*w.Cols || len(ids) < batch || (keep != nil && len(keep) < batch) {
		panic(fmt.Sprintf("kernels.MatMulArgmaxKeep: x has %d floats, ids %d, keep %d for batch %d of (%d, %d)", len(x), len(ids), len(keep), batch, w.Rows, w.Cols))
	}
	if keep != nil {
		keep = keep[:batch]
		kept := false
		for b, k := range keep {
			if k != nil && len(k) < w.Rows {
				panic(fmt.Sprintf("kernels.MatMulArgmaxKeep: keep[%d] has %d floats for %d rows", b, len(k), w.Rows))
			}
			kept = kept || k != nil
		}
		if !kept {
			keep = nil
		}
	}
	if kType(w.Type) {
		kmatmul(p, nil, ids[:batch], keep, w, x[:batch*w.Cols], batch, false)
		return
	}
	matmulArgmax(p, ids[:batch], keep, w, x[:batch*w.Cols], batch)
}

// matmulArgmaxRef is MatMulArgmaxKeep by way of the full product.
func matmulArgmaxRef(p *Pool, ids []int, keep [][]float32, w *Matrix, x []float32, batch int) {
	y := make([]float32, batch*w.Rows)
	matmulRef(p, y, w, x, batch)
	for b := range batch {
		row := y[b*w.Rows : (b+1)*w.Rows]
		ids[b] = argmaxGeneric(row)
		if keep != nil && keep[b] != nil {
			copy(keep[b], row)
		}
	}
}

// matmulRef is MatMul on the plain-Go reference kernel.
func matmulRef(p *Pool, y []float32, w *Matrix, x []float32, batch int) {
	if kType(w.Type) {
		kmatmul(p, y, nil, nil, w, x, batch, true)
		return
	}
	var xq []byte
	if w.Type == dtype.Q8_0 || w.Type == dtype.Q4_0 {
		xq = quantizeActivations(x, batch, w.Cols)
	}
	p.For(w.Rows, 1, func(lo, hi int) {
		matmulGeneric(y, w, x, xq, batch, lo, hi)
	})
}

// quantizeActivations encodes each (Cols) row of x as Q8_0 blocks.
func quantizeActivations(x []float32, batch, cols int) []byte {
	rb := cols / dtype.QK * 34
	xq := make([]byte, 0, batch*rb) // (batch, cols/32 blocks of 34 bytes)
	for b := range batch {
		xq, _ = dtype.Quantize(dtype.Q8_0, xq, x[b*cols:(b+1)*cols])
	}
	return xq
}

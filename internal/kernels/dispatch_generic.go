//go:build purego || !amd64

// Dispatch for builds without assembly: everything runs the plain-Go reference.
package kernels

const rowAlign = 1

func pack(m *Matrix) any { return nil }

func matmulRows(y []float32, w *Matrix, x []float32, xq []byte, batch, lo, hi int) {
	matmulGeneric(y, w, x, xq, batch, lo, hi)
}

// Impl names the implementation in use, for logs and /v1/info.
func Impl() string { return "generic" }

func attendF16(out, q []float32, nq, headDim int, keys, vals [][]uint16, bs, n int, scale float32) {
	attendF16Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
}

func attendF32(out, q []float32, nq, headDim int, keys, vals [][]float32, bs, n int, scale float32) {
	attendF32Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
}

//go:build purego || !amd64

// Dispatch for builds without assembly: everything runs the plain-Go reference.
package kernels

import "fmt"

func pack(m *Matrix) any { return nil }

func matmul(p *Pool, y []float32, w *Matrix, x []float32, batch int) {
	matmulRef(p, y, w, x, batch)
}

// matmuls runs MatMuls' shared-quantization path where there is one.
func matmuls(p *Pool, ys [][]float32, ws []*Matrix, x []float32, batch int) bool { return false }

func matmulArgmax(p *Pool, ids []int, keep [][]float32, w *Matrix, x []float32, batch int) {
	matmulArgmaxRef(p, ids, keep, w, x, batch)
}

// Impl names the implementation in use, for logs and /v1/info.
func Impl() string { return "generic" }

// Impls lists the implementations this build and CPU can run, fastest first.
func Impls() []string { return []string{"generic"} }

// SetImpl forces the implementation used by every kernel (one of Impls()).
// It is meant for tests and benchmarks and must not race with kernel calls.
func SetImpl(name string) error {
	if name != "generic" {
		return fmt.Errorf("kernels: implementation %q not available (have %v)", name, Impls())
	}
	return nil
}

func argmax(x []float32) int { return argmaxGeneric(x) }

func sumExp(x []float32, m float32) float64 { return sumExpGeneric(x, m) }

func siluMul(out, gate, up []float32) { siluMulGeneric(out, gate, up) }

func f32ToF16(dst []uint16, src []float32) { f32ToF16Generic(dst, src) }

func attendF16(out, q []float32, nq, headDim int, keys, vals [][]uint16, bs, n int, scale float32) {
	attendF16Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
}

func attendQ8_0(out, q []float32, nq, headDim int, keys, vals [][]byte, bs, n int, scale float32) {
	checkQ8Head(headDim)
	attendQ8_0Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
}

func attendCausalQ8_0(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]byte, bs, p0 int, scale float32) {
	checkQ8Head(headDim)
	attendCausalGeneric(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
}

func attendF32(out, q []float32, nq, headDim int, keys, vals [][]float32, bs, n int, scale float32) {
	attendF32Generic(out, q, nq, headDim, keys, vals, bs, n, scale)
}

func sumSquares(x []float32) float64 { return sumSquaresGeneric(x) }

func scaleMul(out, x, w []float32, scale float32) { scaleMulGeneric(out, x, w, scale) }

func rope(x, c, s []float32, nHeads, half int) { ropeGeneric(x, c, s, nHeads, half) }

func attendCausalF16(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]uint16, bs, p0 int, scale float32) {
	attendCausalGeneric(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
}

func attendCausalF32(out, q []float32, stride, nt, nq, headDim int, keys, vals [][]float32, bs, p0 int, scale float32) {
	attendCausalGeneric(out, q, stride, nt, nq, headDim, keys, vals, bs, p0, scale)
}

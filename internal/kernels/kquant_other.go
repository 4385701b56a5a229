//go:build purego || !amd64

// K-quant dispatch for builds without assembly: the plain-Go kernel only.
package kernels

import "github.com/draftd/draftd/internal/dtype"

func kpack(m *Matrix) any { return nil }

func kRowsFast(w *Matrix, a *kActs, y []float32, ystride, batch, lo, hi, base int) bool { return false }

func kernelSums(t dtype.Type, a *kActs, batch int) {}

func kTileQuantize(p *Pool, w *Matrix, x []float32, batch int, ref bool) *kActs { return nil }

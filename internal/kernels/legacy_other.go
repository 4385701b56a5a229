//go:build purego || !amd64

package kernels

// legacyQuantize: without assembly Q4_1/Q5_0/Q5_1 run the plain-Go kernel
// on the activations of quantizeKActs.
func legacyQuantize(p *Pool, w *Matrix, x []float32, batch int, ref bool) *kActs { return nil }

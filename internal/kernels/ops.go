// Small vector kernels of the decoder: RMSNorm, RoPE, SiLU·mul, softmax-free
// argmax. Plain Go; their cost is negligible next to matmul and attention.
package kernels

import (
	"math"

	"github.com/draftd/draftd/internal/dtype"
)

// RMSNorm sets out[i] = x[i] / sqrt(mean(x²) + eps) * w[i]; out may alias x.
// The mean is accumulated in float64 so long rows do not lose precision.
func RMSNorm(out, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		out[i] = v * scale * w[i]
	}
}

// RoPETable holds cos and sin of position·inv_freq for positions [0, n):
// cos[p*half+i] = cos(p · theta^(-2i/headDim)), half = headDim/2.
type RoPETable struct {
	Half     int
	Cos, Sin []float32 // (n, half)
}

// NewRoPETable computes the table in float64 and rounds once to float32.
func NewRoPETable(headDim, n int, theta float64) *RoPETable {
	half := headDim / 2
	t := &RoPETable{Half: half, Cos: make([]float32, n*half), Sin: make([]float32, n*half)}
	for i := range half {
		// HF computes inv_freq in float32: 1 / theta^(arange(0, d, 2)/d).
		invFreq := float32(1 / math.Pow(theta, float64(2*i)/float64(headDim)))
		for p := range n {
			a := float64(float32(p) * invFreq)
			t.Cos[p*half+i] = float32(math.Cos(a))
			t.Sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return t
}

// RoPE rotates each of the nHeads vectors of x (nHeads, 2*half) at position
// pos, NeoX style: element i pairs with element i+half.
func (t *RoPETable) RoPE(x []float32, nHeads, pos int) {
	half := t.Half
	c := t.Cos[pos*half : (pos+1)*half]
	s := t.Sin[pos*half : (pos+1)*half]
	for h := range nHeads {
		v := x[h*2*half : (h+1)*2*half]
		for i := range half {
			a, b := v[i], v[i+half]
			v[i] = a*c[i] - b*s[i]
			v[i+half] = b*c[i] + a*s[i]
		}
	}
}

// SiLUMul sets out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
// The assembly versions use an f32 exp accurate to about 2 ulp.
func SiLUMul(out, gate, up []float32) {
	if len(out) < len(gate) || len(up) < len(gate) {
		panic("kernels.SiLUMul: out or up shorter than gate")
	}
	siluMul(out, gate, up)
}

func siluMulGeneric(out, gate, up []float32) {
	for i, g := range gate {
		out[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

// F32ToF16 sets dst[i] to src[i] rounded to IEEE half precision (nearest
// even, overflow to ±Inf), exactly as dtype.F32ToF16, for i < len(src):
// the KV cache store of a decode step.
func F32ToF16(dst []uint16, src []float32) {
	if len(dst) < len(src) {
		panic("kernels.F32ToF16: dst shorter than src")
	}
	f32ToF16(dst, src)
}

func f32ToF16Generic(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = dtype.F32ToF16(v)
	}
}

// Argmax returns the index of the largest element; ties go to the lowest index.
// NaNs are never chosen unless every element is NaN (then 0).
func Argmax(x []float32) int { return argmax(x) }

func argmaxGeneric(x []float32) int {
	best, bi := float32(math.Inf(-1)), 0
	for i, v := range x {
		if v > best {
			best, bi = v, i
		}
	}
	return bi
}

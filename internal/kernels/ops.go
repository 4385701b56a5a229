// Small vector kernels of the decoder: RMSNorm, RoPE, SiLU·mul, f32→f16,
// argmax, the softmax sum Σexp. The API and plain-Go references are here; the dispatch files
// choose vector versions (which for RMSNorm and RoPE give the same bits).
// They are per token, so a prefill of thousands of tokens feels them.
package kernels

import (
	"math"

	"github.com/draftd/draftd/internal/dtype"
)

// RMSNorm sets out[i] = x[i] * scale * w[i] with scale = 1/sqrt(mean(x²) +
// eps); out may alias x. Σx² is accumulated in float64 (so long rows do not
// lose precision) in the order sumSquaresGeneric specifies, which every
// implementation follows, so all give the same bits.
func RMSNorm(out, x, w []float32, eps float32) {
	if len(out) < len(x) || len(w) < len(x) {
		panic("kernels.RMSNorm: out or w shorter than x")
	}
	scale := float32(1 / math.Sqrt(sumSquares(x)/float64(len(x))+float64(eps)))
	scaleMul(out, x, w, scale)
}

// sumSquaresGeneric returns Σ x[i]² in float64: the first len(x)&^15
// elements go to 16 partial sums by i mod 16, combined as
// q_l = (p_l + p_{4+l}) + (p_{8+l} + p_{12+l}) and then (q_0+q_2) + (q_1+q_3);
// the remaining elements are added one by one. (Each square of a float32 is
// exact in float64, so fused and unfused accumulation agree.)
func sumSquaresGeneric(x []float32) float64 {
	n := len(x) &^ 15
	var ss float64
	if n > 0 {
		var p [16]float64
		for i := 0; i < n; i += 16 {
			for j, v := range x[i : i+16] {
				p[j] += float64(v) * float64(v)
			}
		}
		var q [4]float64
		for l := range q {
			q[l] = (p[l] + p[4+l]) + (p[8+l] + p[12+l])
		}
		ss = (q[0] + q[2]) + (q[1] + q[3])
	}
	for _, v := range x[n:] {
		ss += float64(v) * float64(v)
	}
	return ss
}

func scaleMulGeneric(out, x, w []float32, scale float32) {
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
	if len(x) < nHeads*2*half {
		panic("kernels.RoPE: x shorter than nHeads vectors")
	}
	rope(x, t.Cos[pos*half:(pos+1)*half], t.Sin[pos*half:(pos+1)*half], nHeads, half)
}

func ropeGeneric(x, c, s []float32, nHeads, half int) {
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

// SumExp returns Σ exp(x[i] - m) in float64, for m ≥ every x[i] (the
// maximum: the softmax denominator of a row of logits). NaNs and terms
// below exp(-87.3) (f32 underflow) add nothing in the reference and about
// 1e-38 each in the assembly versions, whose f32 exp is accurate to about
// 2 ulp; each sums in its own order, so implementations agree to about
// 1e-7 relative, not bit for bit.
func SumExp(x []float32, m float32) float64 { return sumExp(x, m) }

func sumExpGeneric(x []float32, m float32) float64 {
	var s float64
	for _, v := range x {
		if d := float64(v - m); d >= -87.3 { // false for NaN
			s += math.Exp(d)
		}
	}
	return s
}

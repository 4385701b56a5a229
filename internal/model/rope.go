// RoPE frequencies of a Config — plain theta^(-2i/d), Llama 3.x scaling
// from an HF rope_scaling (transformers' _compute_llama3_parameters) or from
// a GGUF rope_freqs tensor (llama.cpp's divisors) — and the model's cos/sin
// table, grown as positions are used so that nothing is sized from
// max_position_embeddings. The rotation itself is kernels.RoPETable.RoPE.
package model

import (
	"math"

	"github.com/draftd/draftd/internal/kernels"
)

// InvFreq returns RoPE's headDim/2 inverse frequencies, scaled as the
// config says.
func (c *Config) InvFreq() []float32 {
	half := c.HeadDim / 2
	out := make([]float32, half) // (headDim/2)
	for i := range half {
		// HF computes inv_freq in float32: 1 / theta^(arange(0, d, 2)/d).
		f := float32(1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim)))
		switch {
		case c.Llama3 != nil:
			f = float32(c.Llama3.scale(float64(f)))
		case c.RoPEFreqFactors != nil:
			f /= c.RoPEFreqFactors[i] // ggml's rope: theta / freq_factors[i]
		}
		out[i] = f
	}
	return out
}

// scale is transformers' _compute_llama3_parameters for one inverse
// frequency: wavelengths shorter than original/high_freq_factor are kept,
// longer than original/low_freq_factor divided by factor, and those between
// interpolated smoothly.
func (r *Llama3RoPE) scale(invFreq float64) float64 {
	lowWavelen := r.OriginalMaxPos / r.LowFreqFactor
	highWavelen := r.OriginalMaxPos / r.HighFreqFactor
	wavelen := 2 * math.Pi / invFreq
	switch {
	case wavelen < highWavelen:
		return invFreq
	case wavelen > lowWavelen:
		return invFreq / r.Factor
	}
	smooth := (r.OriginalMaxPos/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
	return (1-smooth)*invFreq/r.Factor + smooth*invFreq
}

// ropeUpTo makes m.rope cover positions [0, n) (n ≤ MaxContext), at least
// doubling it when it grows. The caller holds m.mu.
func (m *Model) ropeUpTo(n int) {
	half := len(m.invFreq)
	have := 0
	if m.rope != nil {
		have = len(m.rope.Cos) / half
	}
	if n <= have {
		return
	}
	size := min(max(n, 2*have, 256), m.MaxContext)
	t := &kernels.RoPETable{Half: half, Cos: make([]float32, size*half), Sin: make([]float32, size*half)} // (size, half)
	if m.rope != nil {
		copy(t.Cos, m.rope.Cos)
		copy(t.Sin, m.rope.Sin)
	}
	for p := have; p < size; p++ {
		for i, f := range m.invFreq {
			a := float64(float32(p) * f)
			t.Cos[p*half+i] = float32(math.Cos(a))
			t.Sin[p*half+i] = float32(math.Sin(a))
		}
	}
	m.rope = t
}

// RoPEFreqDivisors is the RoPE scaling as llama.cpp stores it in GGUF: the
// rope_freqs tensor (headDim/2 divisors of theta^(-2i/d)) that its converter
// writes for rope_scaling llama3 (convert_hf_to_gguf.py,
// LlamaModel.generate_extra_tensors: 1 for kept wavelengths, factor for
// divided ones, 1/((1-s)/factor + s) in between); nil without scaling.
func (c *Config) RoPEFreqDivisors() []float32 {
	if c.RoPEFreqFactors != nil {
		return append([]float32(nil), c.RoPEFreqFactors...)
	}
	r := c.Llama3
	if r == nil {
		return nil
	}
	out := make([]float32, c.HeadDim/2) // (headDim/2)
	for i := range out {
		invFreq := float64(float32(1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))))
		wavelen := 2 * math.Pi / invFreq
		switch {
		case wavelen < r.OriginalMaxPos/r.HighFreqFactor:
			out[i] = 1
		case wavelen > r.OriginalMaxPos/r.LowFreqFactor:
			out[i] = float32(r.Factor)
		default:
			s := (r.OriginalMaxPos/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			out[i] = float32(1 / ((1-s)/r.Factor + s))
		}
	}
	return out
}

// The safetensors side of the number formats: which safetensors dtype
// strings draftd computes with as stored, and the FP8 E4M3 decoding table
// for FP8 checkpoints (widened, with their block scales, by the callers).
// Not the safetensors file format itself (internal/safetensors).
package dtype

import "math"

// FromSafetensors maps the safetensors float dtypes draftd computes with as
// stored ("F32", "F16", "BF16") to their Type.
func FromSafetensors(s string) (Type, bool) {
	switch s {
	case "F32":
		return F32, true
	case "F16":
		return F16, true
	case "BF16":
		return BF16, true
	}
	return 0, false
}

// FP8E4M3 decodes every OCP FP8 E4M3FN byte (bias 7, no infinities,
// 0x7f/0xff NaN).
var FP8E4M3 = func() (t [256]float32) {
	for i := range 256 {
		sign := float32(1)
		if i&0x80 != 0 {
			sign = -1
		}
		e, m := (i>>3)&0xf, i&7
		switch {
		case e == 0xf && m == 7:
			t[i] = float32(math.NaN())
		case e == 0:
			t[i] = sign * float32(m) / 8 * float32(math.Ldexp(1, -6))
		default:
			t[i] = sign * (1 + float32(m)/8) * float32(math.Ldexp(1, e-7))
		}
	}
	return t
}()

// Package dtype names the weight storage types draftd understands and converts
// between them and float32. Type values are ggml's type ids, so a GGUF tensor
// header maps to a Type without a table. Block layouts are exactly ggml's:
//
//	Q8_0: 32 weights per 34-byte block: f16 scale d, then 32 int8 q; w = d*q.
//	Q4_0: 32 weights per 18-byte block: f16 scale d, then 16 bytes; byte j holds
//	      weight j in its low nibble and weight j+16 in its high nibble; w = d*(nibble-8).
//
// The K-quants (Q2_K…Q6_K) and Q4_1/Q5_0/Q5_1 are in kquant.go.
//
// This package is not a tensor library: it only knows how bytes encode numbers.
package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Type is a ggml tensor type id.
type Type uint32

// The ggml type ids draftd reads and writes.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q8_0 Type = 8
	BF16 Type = 30
)

// QK is the number of weights in one Q8_0 or Q4_0 block.
const QK = 32

// Types lists every supported type, for tests and benchmarks.
var Types = []Type{F32, F16, BF16, Q8_0, Q4_0}

func (t Type) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	case Q8_0:
		return "Q8_0"
	case Q4_0:
		return "Q4_0"
	}
	if k := kString(t); k != "" {
		return k
	}
	return fmt.Sprintf("ggml-type-%d", uint32(t))
}

// Parse maps a name such as "q8_0" or "BF16" to a Type.
func Parse(s string) (Type, error) {
	for _, t := range append(Types[:len(Types):len(Types)], KTypes...) {
		if equalFold(s, t.String()) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown weight type %q (want one of f32, f16, bf16, q8_0, q4_0, q2_k, q3_k, q4_k, q5_k, q6_k, q4_1, q5_0, q5_1)", s)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Supported reports whether draftd can compute with t.
func (t Type) Supported() bool {
	switch t {
	case F32, F16, BF16, Q8_0, Q4_0:
		return true
	}
	return kString(t) != ""
}

// BlockSize is the number of elements in one storage block of t.
func (t Type) BlockSize() int {
	switch t {
	case Q8_0, Q4_0, Q4_1, Q5_0, Q5_1:
		return QK
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K:
		return QKK
	}
	return 1
}

// BlockBytes is the size in bytes of one storage block of t.
func (t Type) BlockBytes() int {
	switch t {
	case F32:
		return 4
	case F16, BF16:
		return 2
	case Q8_0:
		return 2 + QK
	case Q4_0:
		return 2 + QK/2
	}
	return kBlockBytes(t)
}

// RowBytes is the size of n consecutive elements of t, or an error when n is
// not a whole number of blocks or t is unsupported.
func (t Type) RowBytes(n int) (int, error) {
	if !t.Supported() {
		return 0, fmt.Errorf("unsupported tensor type %v", t)
	}
	if n < 0 || n%t.BlockSize() != 0 {
		return 0, fmt.Errorf("%v row of %d elements is not a whole number of %d-element blocks", t, n, t.BlockSize())
	}
	return n / t.BlockSize() * t.BlockBytes(), nil
}

// Dequantize decodes len(dst) elements of type t from src into dst.
// src must hold exactly those elements (see RowBytes).
func Dequantize(t Type, dst []float32, src []byte) error {
	nb, err := t.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(src) != nb {
		return fmt.Errorf("dequantize %v: have %d bytes for %d elements; want %d", t, len(src), len(dst), nb)
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		for b := 0; b < len(dst)/QK; b++ {
			blk := src[b*34 : b*34+34] // (34): d f16, q [32]int8
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := range QK {
				dst[b*QK+j] = d * float32(int8(blk[2+j]))
			}
		}
	case Q4_0:
		for b := 0; b < len(dst)/QK; b++ {
			blk := src[b*18 : b*18+18] // (18): d f16, qs [16]uint8
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := range QK / 2 {
				q := blk[2+j]
				dst[b*QK+j] = d * float32(int(q&0x0f)-8)
				dst[b*QK+j+QK/2] = d * float32(int(q>>4)-8)
			}
		}
	default:
		dequantizeK(t, dst, src)
	}
	return nil
}

// Quantize encodes src into type t, appending to dst, with ggml's reference
// rounding (quantize_row_q8_0_ref / quantize_row_q4_0_ref; round-to-nearest-even
// for f16/bf16), so files written here are byte-identical to llama.cpp's.
// The types of kquant.go use the encoders of kquant_quant.go.
func Quantize(t Type, dst []byte, src []float32) ([]byte, error) {
	if _, err := t.RowBytes(len(src)); err != nil {
		return dst, err
	}
	switch t {
	case F32:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case F16:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(v))
		}
	case BF16:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint16(dst, F32ToBF16(v))
		}
	case Q8_0:
		for b := 0; b < len(src); b += QK {
			x := src[b : b+QK]
			var amax float32
			for _, v := range x {
				amax = max(amax, abs32(v))
			}
			d := amax / 127
			var id float32
			if d != 0 {
				id = 1 / d
			}
			dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
			for _, v := range x {
				dst = append(dst, byte(int8(roundHalfAway(v*id))))
			}
		}
	case Q4_0:
		for b := 0; b < len(src); b += QK {
			x := src[b : b+QK]
			var amax, mx float32
			for _, v := range x {
				if abs32(v) > amax {
					amax, mx = abs32(v), v
				}
			}
			d := mx / -8
			var id float32
			if d != 0 {
				id = 1 / d
			}
			dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
			for j := range QK / 2 {
				x0 := min(15, int8(float32(x[j]*id)+8.5)) // float32(): no FMA, as in C
				x1 := min(15, int8(float32(x[j+QK/2]*id)+8.5))
				dst = append(dst, byte(x0)|byte(x1)<<4)
			}
		}
	default:
		dst = quantizeK(t, dst, src)
	}
	return dst, nil
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// roundHalfAway is C's roundf: halves round away from zero.
func roundHalfAway(v float32) float32 { return float32(math.Round(float64(v))) }

// BF16ToF32 widens a bfloat16 bit pattern exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds to the nearest bfloat16 (ties to even), keeping NaNs quiet,
// as ggml_compute_fp32_to_bf16 does.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u>>16)&1)) >> 16)
}

// F16ToF32 widens an IEEE binary16 bit pattern exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			return -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// F32ToF16 rounds to the nearest IEEE binary16 (ties to even), as the F16C
// instruction VCVTPS2PH does; overflow gives ±Inf.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	man := u & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := man & (1<<shift - 1)
		h := man >> shift
		if rest > half || (rest == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is the correct rounding
	}
	return sign | uint16(h)
}

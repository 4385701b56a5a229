// K-quants and the older asymmetric/5-bit block types of ggml: their ids,
// block layouts, bit-exact decoding and encoders. Layouts are ggml's
// (ggml-common.h); decoding follows ggml's dequantize_row_* arithmetic in
// float32, each product and difference rounded separately.
//
//	Q4_1 (20 B / 32): f16 d, f16 m, 16 B nibbles as Q4_0;            w = d·q + m, q ∈ [0,15].
//	Q5_0 (22 B / 32): f16 d, u32 qh (bit j = 5th bit of weight j), 16 B nibbles; w = d·(q−16).
//	Q5_1 (24 B / 32): f16 d, f16 m, u32 qh, 16 B nibbles;            w = d·q + m, q ∈ [0,31].
//	Q2_K (84 B / 256): scales[16] (low nibble scale, high nibble min of each 16 weights),
//	      qs[64] (2 bits), f16 d, f16 dmin;                          w = d·sc·q − dmin·m.
//	Q3_K (110 B / 256): hmask[32] (high bit), qs[64] (low 2 bits), scales[12] (16 × 6 bit,
//	      biased by 32), f16 d;                                        w = d·(sc−32)·(q−4·!hbit).
//	Q4_K (144 B / 256): f16 d, f16 dmin, scales[12] (8 × 6-bit scale and min), qs[128];
//	      sub-block j of 32 weights:                                   w = d·sc_j·q − dmin·m_j.
//	Q5_K (176 B / 256): as Q4_K plus qh[32] (5th bits), before qs.
//	Q6_K (210 B / 256): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, f16 d;
//	      each 16 weights:                                             w = d·sc·(q−32).
//
// The position of each weight's bits within a block is given by the loops of
// DequantizeK below. IQ types are not decoded here.
package dtype

import (
	"encoding/binary"
	"math"
)

// ggml type ids of the types in this file.
const (
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
)

// QKK is the number of weights in one K-quant super-block.
const QKK = 256

// KTypes lists the types of this file: K-quants and the legacy Q4_1/Q5_0/Q5_1.
// (Types lists the others.)
var KTypes = []Type{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q4_1, Q5_0, Q5_1}

// IsK reports whether t is a K-quant (256-weight super-blocks).
func (t Type) IsK() bool { return t >= Q2_K && t <= Q6_K }

// kString names the types of this file, or "".
func kString(t Type) string {
	return map[Type]string{Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q2_K: "Q2_K", Q3_K: "Q3_K",
		Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K"}[t]
}

func kBlockBytes(t Type) int {
	switch t {
	case Q4_1:
		return 4 + 16
	case Q5_0:
		return 2 + 4 + 16
	case Q5_1:
		return 4 + 4 + 16
	case Q2_K:
		return 16 + 64 + 4
	case Q3_K:
		return 32 + 64 + 12 + 2
	case Q4_K:
		return 4 + 12 + 128
	case Q5_K:
		return 4 + 12 + 32 + 128
	case Q6_K:
		return 128 + 64 + 16 + 2
	}
	return 0
}

// BitsPerWeight is the storage cost of t in bits per weight (Q4_K: 4.5).
func (t Type) BitsPerWeight() float64 {
	if t.BlockBytes() == 0 {
		return 0
	}
	return float64(8*t.BlockBytes()) / float64(t.BlockSize())
}

func f16At(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

// ScaleMinK4 decodes the 6-bit scale and min of sub-block j (0…7) from the
// 12 packed bytes of a Q4_K/Q5_K block: bytes 0–3 hold scales 0–3 (low 6
// bits), bytes 4–7 mins 0–3; sub-blocks 4–7 take their low 4 bits from the
// nibbles of bytes 8–11 and their top 2 bits from the top bits of bytes 0–7.
func ScaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// ScaleQ3K decodes the 6-bit (biased by 32) scale j (0…15) of a Q3_K block:
// low 4 bits in the nibbles of bytes 0–7 (j < 8 low, else high nibble of
// byte j−8), top 2 bits in byte 8 + j%4 at bit 2·(j/4).
func ScaleQ3K(j int, s []byte) int {
	var lo byte
	if j < 8 {
		lo = s[j] & 0xf
	} else {
		lo = s[j-8] >> 4
	}
	return int(lo|((s[8+j%4]>>(2*(j/4)))&3)<<4) - 32
}

// dequantizeK decodes whole blocks of a type of this file.
func dequantizeK(t Type, dst []float32, src []byte) {
	bb := t.BlockBytes()
	n := t.BlockSize()
	for b := 0; b < len(dst)/n; b++ {
		blk, y := src[b*bb:(b+1)*bb], dst[b*n:(b+1)*n]
		switch t {
		case Q4_1:
			d, m := f16At(blk), f16At(blk[2:])
			for j := range 16 {
				q := blk[4+j]
				y[j] = float32(float32(q&0xf)*d) + m
				y[j+16] = float32(float32(q>>4)*d) + m
			}
		case Q5_0, Q5_1:
			d, m, off := f16At(blk), float32(0), 2
			if t == Q5_1 {
				m, off = f16At(blk[2:]), 4
			}
			qh := binary.LittleEndian.Uint32(blk[off:])
			qs := blk[off+4:]
			for j := range 16 {
				q0 := int(qs[j]&0xf) | int(qh>>j&1)<<4
				q1 := int(qs[j]>>4) | int(qh>>(j+16)&1)<<4
				if t == Q5_0 {
					y[j], y[j+16] = float32(q0-16)*d, float32(q1-16)*d
				} else {
					y[j], y[j+16] = float32(float32(q0)*d)+m, float32(float32(q1)*d)+m
				}
			}
		case Q2_K:
			sc, qs := blk[:16], blk[16:80]
			d, dmin := f16At(blk[80:]), f16At(blk[82:])
			for e := range 256 {
				half, j, l := e/128, e%128/32, e%32
				s := sc[8*half+2*j+l/16]
				dl, ml := float32(d*float32(s&0xf)), float32(dmin*float32(s>>4))
				q := qs[32*half+l] >> (2 * j) & 3
				y[e] = float32(dl*float32(q)) - ml
			}
		case Q3_K:
			hm, qs, sc := blk[:32], blk[32:96], blk[96:108]
			d := f16At(blk[108:])
			for e := range 256 {
				half, j, l := e/128, e%128/32, e%32
				dl := float32(d * float32(ScaleQ3K(8*half+2*j+l/16, sc)))
				q := int(qs[32*half+l]>>(2*j)&3) - 4
				if hm[l]>>(4*half+j)&1 != 0 {
					q += 4
				}
				y[e] = dl * float32(q)
			}
		case Q4_K, Q5_K:
			d, dmin := f16At(blk), f16At(blk[2:])
			sc := blk[4:16]
			qh, qs := blk[16:48], blk[16:144]
			if t == Q5_K {
				qs = blk[48:176]
			}
			for e := range 256 {
				j, l := e/32, e%32 // sub-block j: low nibbles (even j) or high nibbles (odd j) of qs[32·(j/2)+l]
				s, m := ScaleMinK4(j, sc)
				q := qs[32*(j/2)+l]
				if j%2 == 0 {
					q &= 0xf
				} else {
					q >>= 4
				}
				if t == Q5_K && qh[l]>>j&1 != 0 {
					q += 16
				}
				y[e] = float32(float32(d*float32(s))*float32(q)) - float32(dmin*float32(m))
			}
		case Q6_K:
			ql, qh, sc := blk[:128], blk[128:192], blk[192:208]
			d := f16At(blk[208:])
			for e := range 256 {
				half, j, l := e/128, e%128/32, e%32 // j: which of the 4 32-weight rows of a half
				lo := ql[64*half+32*(j%2)+l]
				if j >= 2 {
					lo >>= 4
				}
				q := int(lo&0xf|(qh[32*half+l]>>(2*j)&3)<<4) - 32
				y[e] = float32(d*float32(int8(sc[8*half+2*j+l/16]))) * float32(q)
			}
		}
	}
}

// nearestInt rounds to the nearest integer, halves to even (ggml's nearest_int):
// adding 1.5·2^23 leaves the rounded integer in the low mantissa bits.
func nearestInt(v float32) int {
	if !(v > -4194303 && v < 4194303) {
		return int(math.RoundToEven(float64(v)))
	}
	return int(math.Float32bits(v+12582912)&0x7fffff) - 0x400000
}

// quantizeK encodes src (a whole number of blocks) as t, appending to dst.
func quantizeK(t Type, dst []byte, src []float32) []byte {
	n := t.BlockSize()
	for b := 0; b < len(src); b += n {
		x := src[b : b+n]
		switch t {
		case Q4_1, Q5_1:
			dst = quantAsym32(t, dst, x)
		case Q5_0:
			dst = quantQ5_0(dst, x)
		case Q2_K:
			dst = quantQ2K(dst, x)
		case Q3_K:
			dst = quantQ3K(dst, x)
		case Q4_K, Q5_K:
			dst = quantQ45K(t, dst, x)
		case Q6_K:
			dst = quantQ6K(dst, x)
		}
	}
	return dst
}

// Encoders for the types of kquant.go. The K-quant encoders fit each
// sub-block by weighted least squares over a small grid of candidate
// scales (the approach of ggml's reference quantizers), quantize the
// sub-block scales to their stored width, and then refine each stored
// sub-block scale (and min) by ±1 steps against the squared error of the
// weights as they will decode. They are deterministic; they are not
// byte-identical to llama.cpp's output (Q8_0/Q4_0 in dtype.go are).
package dtype

import (
	"encoding/binary"
	"math"
)

// fitMin fits x ≈ scale·L − negMin with L ∈ [0, nmax] minimising Σ w·err²,
// trying inverse scales (nmax + rmin + rdelta·i)/(max − min) for i ≤ nstep.
func fitMin(x, w []float32, nmax int, rmin, rdelta float32, nstep int, L []uint8) (scale, negMin float32) {
	lo, hi := x[0], x[0]
	var sw, sx float32
	for i, v := range x {
		lo, hi = min(lo, v), max(hi, v)
		sw += w[i]
		sx += w[i] * v
	}
	lo = min(lo, 0)
	if hi == lo {
		clear(L)
		return 0, -lo
	}
	quant := func(iscale, off float32, out []uint8) {
		for i, v := range x {
			out[i] = uint8(max(0, min(nmax, nearestInt(iscale*(v-off)))))
		}
	}
	errOf := func(scale, off float32, l []uint8) float32 {
		var e float32
		for i, v := range x {
			d := scale*float32(l[i]) + off - v
			e += w[i] * d * d
		}
		return e
	}
	iscale := float32(nmax) / (hi - lo)
	scale, off := 1/iscale, lo
	quant(iscale, lo, L)
	best := errOf(scale, off, L)
	var aux [32]uint8
	la := aux[:len(x)]
	for is := 0; is <= nstep; is++ {
		quant((rmin+rdelta*float32(is)+float32(nmax))/(hi-lo), lo, la)
		var sl, sl2, sxl float32
		for i, v := range x {
			l := float32(la[i])
			sl += w[i] * l
			sl2 += w[i] * l * l
			sxl += w[i] * l * v
		}
		D := sw*sl2 - sl*sl
		if D <= 0 {
			continue
		}
		s, o := (sw*sxl-sx*sl)/D, (sl2*sx-sl*sxl)/D
		if o > 0 {
			s, o = sxl/sl2, 0
		}
		if e := errOf(s, o, la); e < best {
			copy(L, la)
			best, scale, off = e, s, o
		}
	}
	return scale, -off
}

// fitSym fits x ≈ scale·L with L ∈ [−nmax, nmax−1] minimising Σ x²·err²,
// trying inverse scales −(nmax + 0.1·i)/max for |i| ≤ 9 (max: the value of
// largest magnitude).
func fitSym(x []float32, nmax int) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < 1e-15 {
		return 0
	}
	try := func(iscale float32) (sumlx, suml2 float32) {
		for _, v := range x {
			l := float32(max(-nmax, min(nmax-1, nearestInt(iscale*v))))
			w := v * v
			sumlx += w * v * l
			suml2 += w * l * l
		}
		return
	}
	sumlx, suml2 := try(-float32(nmax) / mx)
	if suml2 == 0 {
		return 0
	}
	scale := sumlx / suml2
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		lx, l2 := try(-(float32(nmax) + 0.1*float32(is)) / mx)
		if l2 > 0 && lx*lx > best*l2 {
			scale = lx / l2
			best = scale * lx
		}
	}
	return scale
}

// symErr is the squared error of x coded as d·clamp(round(x/d), lo, hi).
func symErr(x []float32, d float32, lo, hi int) float32 {
	var e, id float32
	if d != 0 {
		id = 1 / d
	}
	for _, v := range x {
		q := max(lo, min(hi, nearestInt(v*id)))
		r := d*float32(q) - v
		e += r * r
	}
	return e
}

// asymErr is the squared error of x coded as d·clamp(round((x+m)/d), 0, nmax) − m.
func asymErr(x []float32, d, m float32, nmax int) float32 {
	var e, id float32
	if d != 0 {
		id = 1 / d
	}
	for _, v := range x {
		q := max(0, min(nmax, nearestInt((v+m)*id)))
		r := d*float32(q) - m - v
		e += r * r
	}
	return e
}

// refineAsym returns the stored (scale, min) codes in [0, cmax] near (ls, lm)
// that minimise the decoded error of x, with super-block scales d and dmin.
func refineAsym(x []float32, d, dmin float32, ls, lm, cmax, nmax int) (int, int) {
	bs, bm := ls, lm
	best := asymErr(x, d*float32(ls), dmin*float32(lm), nmax)
	for s := max(0, ls-1); s <= min(cmax, ls+1); s++ {
		for m := max(0, lm-1); m <= min(cmax, lm+1); m++ {
			if e := asymErr(x, d*float32(s), dmin*float32(m), nmax); e < best {
				best, bs, bm = e, s, m
			}
		}
	}
	return bs, bm
}

// refineSym returns the stored scale code in [clo, chi] near ls that
// minimises the decoded error of x with super-block scale d.
func refineSym(x []float32, d float32, ls, clo, chi, lo, hi int) int {
	bs, best := ls, symErr(x, d*float32(ls), lo, hi)
	for _, s := range []int{ls - 1, ls + 1} {
		if s < clo || s > chi {
			continue
		}
		if e := symErr(x, d*float32(s), lo, hi); e < best {
			best, bs = e, s
		}
	}
	return bs
}

func roundF16(v float32) float32 { return F16ToF32(F32ToF16(v)) }

// quantAsym32 encodes one 32-weight Q4_1 or Q5_1 block: d = (max−min)/nmax, m = min.
func quantAsym32(t Type, dst []byte, x []float32) []byte {
	nmax := 15
	if t == Q5_1 {
		nmax = 31
	}
	lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	d := (hi - lo) / float32(nmax)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(lo))
	var q [32]uint8
	var qh uint32
	for j, v := range x {
		q[j] = uint8(max(0, min(nmax, int((v-lo)*id+0.5))))
		qh |= uint32(q[j]>>4) << j
	}
	if t == Q5_1 {
		dst = binary.LittleEndian.AppendUint32(dst, qh)
	}
	for j := range 16 {
		dst = append(dst, q[j]&0xf|(q[j+16]&0xf)<<4)
	}
	return dst
}

// quantQ5_0 encodes one 32-weight Q5_0 block: d = max/−16 (max: the value of
// largest magnitude).
func quantQ5_0(dst []byte, x []float32) []byte {
	var amax, mx float32
	for _, v := range x {
		if abs32(v) > amax {
			amax, mx = abs32(v), v
		}
	}
	d := mx / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
	var q [32]uint8
	var qh uint32
	for j, v := range x {
		q[j] = uint8(max(0, min(31, int(float32(v*id)+16.5)))) // float32(): no FMA, as in C
		qh |= uint32(q[j]>>4) << j
	}
	dst = binary.LittleEndian.AppendUint32(dst, qh)
	for j := range 16 {
		dst = append(dst, q[j]&0xf|(q[j+16]&0xf)<<4)
	}
	return dst
}

// quantQ45K encodes one 256-weight Q4_K or Q5_K super-block.
func quantQ45K(t Type, dst []byte, x []float32) []byte {
	nmax, rmin, nstep := 15, float32(-1), 20
	if t == Q5_K {
		nmax, rmin, nstep = 31, -0.5, 15
	}
	var L [256]uint8
	var scales, mins [8]float32
	var w [32]float32
	var maxScale, maxMin float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var s2 float32
		for _, v := range xs {
			s2 += v * v
		}
		av := float32(math.Sqrt(float64(s2 / 32)))
		for l, v := range xs {
			w[l] = av + abs32(v)
		}
		scales[j], mins[j] = fitMin(xs, w[:], nmax, rmin, 0.1, nstep, L[32*j:32*j+32])
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	var invS, invM float32
	if maxScale > 0 {
		invS = 63 / maxScale
	}
	if maxMin > 0 {
		invM = 63 / maxMin
	}
	d, dmin := F32ToF16(maxScale/63), F32ToF16(maxMin/63)
	df, dminf := F16ToF32(d), F16ToF32(dmin)
	var ls, lm [8]int
	for j := range 8 {
		ls[j] = min(63, nearestInt(invS*scales[j]))
		lm[j] = min(63, nearestInt(invM*mins[j]))
		ls[j], lm[j] = refineAsym(x[32*j:32*j+32], df, dminf, ls[j], lm[j], 63, nmax)
	}
	var sc [12]byte
	for j := range 8 {
		if j < 4 {
			sc[j], sc[j+4] = byte(ls[j]), byte(lm[j])
		} else {
			sc[j+4] = byte(ls[j]&0xf | (lm[j]&0xf)<<4)
			sc[j-4] |= byte(ls[j]>>4) << 6
			sc[j] |= byte(lm[j]>>4) << 6
		}
	}
	for j := range 8 {
		s, m := ScaleMinK4(j, sc[:])
		dd := df * float32(s)
		if dd == 0 {
			continue
		}
		dm, idd := dminf*float32(m), 1/dd
		for l := range 32 {
			L[32*j+l] = uint8(max(0, min(nmax, nearestInt((x[32*j+l]+dm)*idd))))
		}
	}
	dst = binary.LittleEndian.AppendUint16(dst, d)
	dst = binary.LittleEndian.AppendUint16(dst, dmin)
	dst = append(dst, sc[:]...)
	if t == Q5_K {
		var qh [32]byte
		for e, q := range L {
			qh[e%32] |= (q >> 4) << (e / 32)
		}
		dst = append(dst, qh[:]...)
	}
	for c := range 4 {
		for l := range 32 {
			dst = append(dst, L[64*c+l]&0xf|(L[64*c+32+l]&0xf)<<4)
		}
	}
	return dst
}

// quantQ6K encodes one 256-weight Q6_K super-block.
func quantQ6K(dst []byte, x []float32) []byte {
	var scales [16]float32
	var amax, mx float32
	for j := range 16 {
		scales[j] = fitSym(x[16*j:16*j+16], 32)
		if a := abs32(scales[j]); a > amax {
			amax, mx = a, scales[j]
		}
	}
	var blk [210]byte
	if amax < 1e-15 {
		return append(dst, blk[:]...)
	}
	iscale := -128 / mx
	d := F32ToF16(1 / iscale)
	df := F16ToF32(d)
	var L [256]uint8
	for j := range 16 {
		s := min(127, nearestInt(iscale*scales[j]))
		s = refineSym(x[16*j:16*j+16], df, s, -128, 127, -32, 31)
		blk[192+j] = byte(int8(s))
		var idd float32
		if dd := df * float32(s); dd != 0 {
			idd = 1 / dd
		}
		for l := range 16 {
			L[16*j+l] = uint8(max(-32, min(31, nearestInt(x[16*j+l]*idd))) + 32)
		}
	}
	for e, q := range L {
		half, j, l := e/128, e%128/32, e%32
		i := 64*half + 32*(j%2) + l
		if j < 2 {
			blk[i] |= q & 0xf
		} else {
			blk[i] |= (q & 0xf) << 4
		}
		blk[128+32*half+l] |= (q >> 4) << (2 * j)
	}
	binary.LittleEndian.PutUint16(blk[208:], d)
	return append(dst, blk[:]...)
}

// quantQ3K encodes one 256-weight Q3_K super-block.
func quantQ3K(dst []byte, x []float32) []byte {
	var scales [16]float32
	var amax, mx float32
	for j := range 16 {
		scales[j] = fitSym(x[16*j:16*j+16], 4)
		if a := abs32(scales[j]); a > amax {
			amax, mx = a, scales[j]
		}
	}
	var blk [110]byte
	if amax == 0 {
		return append(dst, blk[:]...)
	}
	iscale := -32 / mx
	d := F32ToF16(1 / iscale)
	df := F16ToF32(d)
	sc := blk[96:108]
	var L [256]uint8
	for j := range 16 {
		s := max(-32, min(31, nearestInt(iscale*scales[j])))
		s = refineSym(x[16*j:16*j+16], df, s, -32, 31, -4, 3)
		u := byte(s + 32)
		if j < 8 {
			sc[j] |= u & 0xf
		} else {
			sc[j-8] |= (u & 0xf) << 4
		}
		sc[8+j%4] |= (u >> 4) << (2 * (j / 4))
		var idd float32
		if dd := df * float32(s); dd != 0 {
			idd = 1 / dd
		}
		for l := range 16 {
			L[16*j+l] = uint8(max(-4, min(3, nearestInt(x[16*j+l]*idd))) + 4)
		}
	}
	for e, q := range L {
		half, j, l := e/128, e%128/32, e%32
		if q > 3 {
			blk[l] |= 1 << (4*half + j)
		}
		blk[32+32*half+l] |= (q & 3) << (2 * j)
	}
	binary.LittleEndian.PutUint16(blk[108:], d)
	return append(dst, blk[:]...)
}

// quantQ2K encodes one 256-weight Q2_K super-block.
func quantQ2K(dst []byte, x []float32) []byte {
	var L [256]uint8
	var scales, mins [16]float32
	var w [16]float32
	var maxScale, maxMin float32
	for j := range 16 {
		xs := x[16*j : 16*j+16]
		for l, v := range xs {
			w[l] = abs32(v)
		}
		scales[j], mins[j] = fitMin(xs, w[:], 3, -0.5, 0.1, 15, L[16*j:16*j+16])
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	var blk [84]byte
	var d, dmin uint16
	if maxScale > 0 {
		d = F32ToF16(maxScale / 15)
	}
	if maxMin > 0 {
		dmin = F32ToF16(maxMin / 15)
	}
	df, dminf := F16ToF32(d), F16ToF32(dmin)
	for j := range 16 {
		ls, lm := 0, 0
		if maxScale > 0 {
			ls = min(15, nearestInt(15/maxScale*scales[j]))
		}
		if maxMin > 0 {
			lm = min(15, nearestInt(15/maxMin*mins[j]))
		}
		ls, lm = refineAsym(x[16*j:16*j+16], df, dminf, ls, lm, 15, 3)
		blk[j] = byte(ls | lm<<4)
		dd, dm := df*float32(ls), dminf*float32(lm)
		if dd == 0 {
			continue
		}
		idd := 1 / dd
		for l := range 16 {
			L[16*j+l] = uint8(max(0, min(3, nearestInt((x[16*j+l]+dm)*idd))))
		}
	}
	for e, q := range L {
		half, j, l := e/128, e%128/32, e%32
		blk[16+32*half+l] |= q << (2 * j)
	}
	binary.LittleEndian.PutUint16(blk[80:], d)
	binary.LittleEndian.PutUint16(blk[82:], dmin)
	return append(dst, blk[:]...)
}

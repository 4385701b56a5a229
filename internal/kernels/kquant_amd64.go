//go:build !purego

// K-quant dispatch on amd64: Q4_K, Q5_K and Q6_K weights are repacked at
// load into 16-row tiles and Q2_K/Q3_K into a per-row kernel layout, then
// multiplied by kquant_amd64.s: the tiles by AVX2 kernels or, on AVX-512
// VNNI machines, by kernels that take the whole 16-row group and up to
// kzMaxNB activation rows per call (same tile bytes, same sums bit for bit);
// Q2_K/Q3_K by AVX2 row kernels on both. Q4_1/Q5_0/Q5_1 weights are repacked
// and multiplied by legacy_amd64.go (AVX2 and AVX-512 tile kernels), or by
// the plain-Go kernel without AVX2.
//
// Tiles (as Q4_0's in matmul_amd64.go): rows in groups of 16 (the last one
// zero-padded: scale 0), a group's super-blocks follow each other, groups
// follow each other; "lane r of half h" is row 16g+8h+r, one 32-bit lane of
// a ymm register, 4 bytes per row per register. Offsets within one
// super-block of a group:
//
//	Q4_K (2368 B = 16 × 148):
//	   0: the 16 rows' d (f16), then at 32 their dmin (f16);
//	  64: for h = 0,1 and sub-block j: the 8 lanes' 6-bit scales, a byte each;
//	 192: for h = 0,1 and k = 0…3: the 8 lanes' mins (m[2k], m[2k+1]), a byte each;
//	 320: for sub-block j, m = 0…3 and h = 0,1: 8 lanes × 4 bytes, weights
//	      32j+4m+t in the low nibbles and 32j+16+4m+t in the high ones (t < 4).
//	Q5_K (2880 B = 16 × 180): the Q4_K tile, then at 2368 for sub-block j and
//	      h = 0,1: 8 lanes × 4 bytes of 5th bits, bit m of byte t for weight
//	      32j+4m+t, bit 4+m for weight 32j+16+4m+t.
//	Q6_K (3360 B = 16 × 210):
//	   0: the 16 rows' d (f16);
//	  32: for h = 0,1 and 16-weight sub-block j: the 8 lanes' int8 scales;
//	 288: for sub-block j, step s = 0,1 and h = 0,1: 8 lanes × 4 bytes, the
//	      low 4 bits of q+32 for weights 16j+4s+t (low nibbles) and 16j+8+4s+t
//	      (high nibbles);
//	2336: for sub-block j and h = 0,1: 8 lanes × 4 bytes, the high 2 bits of
//	      those weights, at bit 4s (low side) and 4s+2 (high side) of byte t.
//
// The tile kernels take the activations tiled by batch tiles (kActs.xt; see
// kTile): the tile of rows [b0, b0+nb) starts at byte b0·nblk·xb and holds
// per super-block the nb rows' 256 quants, then xb − 256 bytes per row: d_x
// f32 at 0 and at 16 the 8 per-32 quant sums (Q4_K, Q5_K; xb = 288) or the
// 16 per-16 ones (Q6_K AVX2; xb = 304), int16, or (Q6_K AVX-512; xb = 400)
// for sub-block j and step s, c_js = −32·(the sum of the quants of weights
// 16j+4s+t and 16j+8+4s+t, t < 4), int32.
//
// Row layouts (one row's blocks are contiguous, rows follow each other):
//
//	Q3_K (114 B): qs[64], hmask[32], the 16 6-bit scales decoded to int8 (−32…31)
//	      and reordered per half as s0 s2 s4 s6 s1 s3 s5 s7, d f16.
//	Q2_K (100 B): qs[64], the 16 scales and the 16 mins as bytes, each reordered
//	      as Q3_K's scales, d, dmin f16.
//
// Their kernels take per-16 activation sums reordered like the scales
// (kActs.kb).
package kernels

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/draftd/draftd/internal/dtype"
)

const kMaxNB = 4 // activation rows per kernel call (see _asm/kquant.go)

type kKernel func(w *byte, nrow, nblk int, x *int8, xstride int, xd *float32, dstride int, xb *int16, bstride int, y *float32, ystride int)

var (
	q3kK = [...]kKernel{nil, q3kAVX2x1, q3kAVX2x2, q3kAVX2x3, q3kAVX2x4}
	q2kK = [...]kKernel{nil, q2kAVX2x1, q2kAVX2x2, q2kAVX2x3, q2kAVX2x4}
)

type k4tKernel func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)

var (
	q4ktK = [...]k4tKernel{nil, q4ktAVX2x1, q4ktAVX2x2, q4ktAVX2x3, q4ktAVX2x4}
	q5ktK = [...]k4tKernel{nil, q5ktAVX2x1, q5ktAVX2x2, q5ktAVX2x3, q5ktAVX2x4}
	q6ktK = [...]k4tKernel{nil, q6ktAVX2x1, q6ktAVX2x2, q6ktAVX2x3}
	q6kuK = [...]k6uKernel{nil, q6kuAVX2x1, q6kuAVX2x2, q6kuAVX2x3}
	q4kzK = [...]k4tKernel{nil, q4ktAVX512x1, q4ktAVX512x2, q4ktAVX512x3, q4ktAVX512x4, q4ktAVX512x5,
		q4ktAVX512x6, q4ktAVX512x7, q4ktAVX512x8, q4ktAVX512x9, q4ktAVX512x10, q4ktAVX512x11,
		q4ktAVX512x12, q4ktAVX512x13, q4ktAVX512x14, q4ktAVX512x15, q4ktAVX512x16}
	q5kzK = [...]k4tKernel{nil, q5ktAVX512x1, q5ktAVX512x2, q5ktAVX512x3, q5ktAVX512x4, q5ktAVX512x5,
		q5ktAVX512x6, q5ktAVX512x7, q5ktAVX512x8, q5ktAVX512x9, q5ktAVX512x10, q5ktAVX512x11,
		q5ktAVX512x12, q5ktAVX512x13, q5ktAVX512x14, q5ktAVX512x15, q5ktAVX512x16}
	q6kzK = [...]k4tKernel{nil, q6ktAVX512x1, q6ktAVX512x2, q6ktAVX512x3, q6ktAVX512x4, q6ktAVX512x5,
		q6ktAVX512x6, q6ktAVX512x7, q6ktAVX512x8, q6ktAVX512x9, q6ktAVX512x10, q6ktAVX512x11,
		q6ktAVX512x12, q6ktAVX512x13, q6ktAVX512x14, q6ktAVX512x15, q6ktAVX512x16}
)

// kTileKernels are the kernels of one tile type.
type kTileKernels struct {
	fused  []k4tKernel                      // unpack as they go, prefetch the next group
	pre    []k6uKernel                      // read quants unpacked by unpack, or nil
	unpack func(w *byte, nblk int, u *byte) // one group's quants to bytes (k6uBlock per super-block)
	g      int                              // activation rows per call at most
	minPre int                              // calls per group from which pre pays
	equal  bool                             // batch tiles of near-equal sizes (else g rows, the last one short)
	xb     int                              // tiled activation bytes per row and super-block
	meta   kMeta                            // what follows the quants and d_x in the tiled activations
}

// kMeta is the activation sums a tile kernel reads after d_x (see tileKActs,
// quantQ8KAVX512).
type kMeta int

const (
	kMeta32 kMeta = iota // 8 per-32 quant sums, int16 (Q4_K, Q5_K)
	kMeta16              // 16 per-16 quant sums, int16 (Q6_K AVX2)
	kMetaC8              // 32 c_js = −32·(sum of a tile step's 8 quants), int32 (Q6_K AVX-512)
)

// Unpacking once pays for Q6_K from 4 calls per group (batch ≥ 10; measured
// on Zen 3, BenchmarkMatmul: B=32 +25–40 %, B=8 −10 % if used there). For
// Q4_K and Q5_K it was tried and does not pay (Q4_K B=32 −30 %, Q5_K ±10 %):
// their quants unpack in 3 (Q5_K 9) operations per register.
var (
	q4kTiles = kTileKernels{fused: q4ktK[:], g: kMaxNB, xb: k4tX, meta: kMeta32}
	q5kTiles = kTileKernels{fused: q5ktK[:], g: kMaxNB, xb: k4tX, meta: kMeta32}
	q6kTiles = kTileKernels{q6ktK[:], q6kuK[:], q6kUnpackAVX2, k6tMaxNB, 4, false, k6tX, kMeta16}
	// AVX-512 VNNI: the whole group, up to kzMaxNB rows, near-equal tiles.
	q4kTilesZ = kTileKernels{fused: q4kzK[:], g: kzMaxNB, equal: true, xb: k4tX, meta: kMeta32}
	q5kTilesZ = kTileKernels{fused: q5kzK[:], g: kzMaxNB, equal: true, xb: k4tX, meta: kMeta32}
	q6kTilesZ = kTileKernels{fused: q6kzK[:], g: kzMaxNB, equal: true, xb: k6zX, meta: kMetaC8}
)

// kTiles is the tile kernels of Q4_K/Q5_K/Q6_K for the implementation in
// use, or nil.
func kTiles(t dtype.Type) *kTileKernels {
	if impl < implAVX2 {
		return nil
	}
	z := impl == implAVX512
	switch t {
	case dtype.Q4_K:
		if z {
			return &q4kTilesZ
		}
		return &q4kTiles
	case dtype.Q5_K:
		if z {
			return &q5kTilesZ
		}
		return &q5kTiles
	case dtype.Q6_K:
		if z {
			return &q6kTilesZ
		}
		return &q6kTiles
	}
	return nil
}

// kTile is the first row and the size of batch tile t of k's tiling of
// batch rows.
func (k *kTileKernels) kTile(t, batch int) (b0, nb int) {
	if !k.equal {
		return k.g * t, min(k.g, batch-k.g*t)
	}
	nt := (batch + k.g - 1) / k.g
	b0 = t * batch / nt
	return b0, (t+1)*batch/nt - b0
}

// k6uKernel is a Q6_K tile kernel on quants unpacked by q6kUnpackAVX2.
type k6uKernel func(w *byte, nblk int, x *byte, y *float32, ystride int, u *byte)

// k6uBufs recycles the unpacked quants of tile groups (k6uBlock bytes per super-block).
var k6uBufs = sync.Pool{New: func() any { return new([]byte) }}

// Tile geometry (mirrored in _asm/kquant.go).
const (
	k4tBlock = 2368 // Q4_K bytes per 16-row group and super-block
	k4tX     = 288  // Q4_K tiled activation bytes per row and super-block
	k5tBlock = 2880 // Q5_K bytes per 16-row group and super-block
	k6tBlock = 3360 // Q6_K bytes per 16-row group and super-block
	k6tX     = 304  // Q6_K tiled activation bytes per row and super-block
	k6tMaxNB = 3    // Q6_K activation rows per kernel call
	k6uBlock = 4096 // unpacked quants per 16-row group and super-block
	kzMaxNB  = 16   // AVX-512 tile kernels: activation rows per call
	k6zX     = 400  // Q6_K AVX-512 tiled activation bytes per row and super-block
)

// kpacked is a K-quant matrix in the kernel layout.
type kpacked struct {
	data       []byte // (Rows, rowBytes), or Q4_K/Q5_K/Q6_K: (groups, groupBytes)
	rowBytes   int
	groupBytes int // tiles: bytes of one 16-row group (nblk × k4tBlock, k5tBlock or k6tBlock)
}

// kpackTiles allocates the tiles of m (bb bytes per group and super-block)
// and fills them with pack(dst, row, src) for every row, dst being the
// row's group, the rows split over the CPUs (packing a model is a large
// copy; each group is written by one goroutine).
func kpackTiles(m *Matrix, bb int, pack func(grp []byte, row int, src []byte)) *kpacked {
	nblk := m.Cols / dtype.QKK
	groups := (m.Rows + 15) / 16
	pk := &kpacked{groupBytes: nblk * bb}
	pk.data = weightBytes(pk, groups*pk.groupBytes)
	nw := min(runtime.GOMAXPROCS(0), max(1, groups/64))
	var wg sync.WaitGroup
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := groups * w / nw; g < groups*(w+1)/nw; g++ {
				grp := pk.data[g*pk.groupBytes : (g+1)*pk.groupBytes]
				for row := 16 * g; row < min(m.Rows, 16*g+16); row++ {
					pack(grp, row, m.Row(row))
				}
			}
		}()
	}
	wg.Wait()
	return pk
}

// kpackQ4KTiles repacks a Q4_K matrix into 16-row tiles (see the file
// comment), with Q5_K's 5th bits appended per super-block (k5tBlock bytes).
func kpackQ4KTiles(m *Matrix) *kpacked {
	q5, bb, sb := m.Type == dtype.Q5_K, k4tBlock, 144
	if q5 {
		bb, sb = k5tBlock, 176
	}
	le := binary.LittleEndian
	return kpackTiles(m, bb, func(grp []byte, row int, src []byte) {
		h, r := row%16/8, row%8
		for i := range len(src) / sb {
			s := src[i*sb : (i+1)*sb]
			dst := grp[i*bb : (i+1)*bb]
			copy(dst[2*(8*h+r):], s[0:2])
			copy(dst[32+2*(8*h+r):], s[2:4])
			qs := s[16:144]
			if q5 {
				qs = s[48:176]
			}
			for j := range 8 {
				sc, mn := dtype.ScaleMinK4(j, s[4:16])
				dst[64+64*h+8*j+r] = sc
				dst[192+64*h+16*(j/2)+2*r+j%2] = mn
				var q5w uint32
				for mm := range 4 {
					// Weights 32j+4mm+t and 32j+16+4mm+t (t < 4) are the low
					// (j even) or high nibbles of these 4-byte words of qs.
					lo := le.Uint32(qs[32*(j/2)+4*mm:])
					hi := le.Uint32(qs[32*(j/2)+16+4*mm:])
					if j%2 == 1 {
						lo, hi = lo>>4, hi>>4
					}
					le.PutUint32(dst[320+256*j+64*mm+32*h+4*r:], lo&0x0f0f0f0f|(hi&0x0f0f0f0f)<<4)
					if q5 {
						qlo, qhi := le.Uint32(s[16+4*mm:]), le.Uint32(s[32+4*mm:])
						q5w |= (qlo>>j&0x01010101)<<mm | (qhi>>j&0x01010101)<<(4+mm)
					}
				}
				if q5 {
					le.PutUint32(dst[k4tBlock+64*j+32*h+4*r:], q5w)
				}
			}
		}
	})
}

// kpackQ6KTiles repacks a Q6_K matrix into 16-row tiles (see the file comment).
func kpackQ6KTiles(m *Matrix) *kpacked {
	le := binary.LittleEndian
	return kpackTiles(m, k6tBlock, func(grp []byte, row int, src []byte) {
		h, r := row%16/8, row%8
		for i := range len(src) / 210 {
			s := src[i*210 : (i+1)*210]
			dst := grp[i*k6tBlock : (i+1)*k6tBlock]
			copy(dst[2*(8*h+r):], s[208:210])
			// u4 is the unsigned quants (q+32) of weights e…e+3 as bytes.
			u4 := func(e int) uint32 {
				half, jj, l := e/128, e%128/32, e%32
				lo := le.Uint32(s[64*half+32*(jj%2)+l:])
				if jj >= 2 {
					lo >>= 4
				}
				return lo&0x0f0f0f0f | (le.Uint32(s[128+32*half+l:])>>(2*jj)&0x03030303)<<4
			}
			for j := range 16 {
				dst[32+128*h+8*j+r] = s[192+j]
				var qh uint32
				for st := range 2 {
					a, b := u4(16*j+4*st), u4(16*j+8+4*st)
					le.PutUint32(dst[288+128*j+64*st+32*h+4*r:], a&0x0f0f0f0f|(b&0x0f0f0f0f)<<4)
					qh |= (a>>4&0x03030303)<<(4*st) | (b>>4&0x03030303)<<(4*st+2)
				}
				le.PutUint32(dst[2336+64*j+32*h+4*r:], qh)
			}
		}
	})
}

// k23ScaleOrder is the kernel position of each of a half's 8 scales (Q3_K,
// Q2_K row layout).
var k23ScaleOrder = [8]int{0, 4, 1, 5, 2, 6, 3, 7}

func kpack(m *Matrix) any {
	if pk := legacyPack(m); pk != nil { // legacy_amd64.go
		return pk
	}
	if (m.Type == dtype.Q4_K || m.Type == dtype.Q5_K) && hasAVX2 {
		return kpackQ4KTiles(m)
	}
	if m.Type == dtype.Q6_K && hasAVX2 {
		return kpackQ6KTiles(m)
	}
	bb := map[dtype.Type]int{dtype.Q3_K: 114, dtype.Q2_K: 100}[m.Type]
	if !hasAVX2 || bb == 0 {
		return nil
	}
	nblk := m.Cols / dtype.QKK
	pk := &kpacked{rowBytes: nblk * bb}
	pk.data = alignedBytes(m.Rows * pk.rowBytes)
	for r := range m.Rows {
		src := m.Row(r)
		for i := range nblk {
			dst := pk.data[r*pk.rowBytes+i*bb : r*pk.rowBytes+(i+1)*bb]
			switch m.Type {
			case dtype.Q3_K:
				s := src[i*110 : (i+1)*110]
				copy(dst[:64], s[32:96]) // qs
				copy(dst[64:96], s[:32]) // hmask
				for h := range 2 {
					for k := range 8 {
						dst[96+8*h+k23ScaleOrder[k]] = byte(int8(dtype.ScaleQ3K(8*h+k, s[96:108])))
					}
				}
				copy(dst[112:], s[108:110])
			case dtype.Q2_K:
				s := src[i*84 : (i+1)*84]
				copy(dst[:64], s[16:80]) // qs
				for h := range 2 {
					for k := range 8 {
						dst[64+8*h+k23ScaleOrder[k]] = s[8*h+k] & 0xf
						dst[80+8*h+k23ScaleOrder[k]] = s[8*h+k] >> 4
					}
				}
				copy(dst[96:], s[80:84])
			}
		}
	}
	return pk
}

// kernelSums fills a.kb for the kernels of type t (see the file comment).
func kernelSums(t dtype.Type, a *kActs, batch int) {
	switch t {
	case dtype.Q4_K, dtype.Q5_K, dtype.Q6_K:
		// The AVX-512 tiles are filled by kTileQuantize instead.
		if k := kTiles(t); k != nil && impl == implAVX2 {
			tileKActs(a, batch, k)
		}
	case dtype.Q3_K, dtype.Q2_K:
		a.kb = grow(a.kb, batch*a.nblk*16)
		for i := 0; i < len(a.kb); i += 8 {
			for k := range 8 {
				a.kb[i+k23ScaleOrder[k]] = a.bsums[i+k]
			}
		}
	}
}

// kTileQuantize quantizes the (batch, Cols) rows of x for w straight into
// the tiled layout of the AVX-512 tile kernels (a.xt; a.q, a.d and a.bsums
// stay empty), the batch tiles split over p; nil when w does not run on them
// (ref: the plain-Go kernel is wanted; no tiles; AVX-512 not in use).
func kTileQuantize(p *Pool, w *Matrix, x []float32, batch int, ref bool) *kActs {
	pk, _ := w.packed.(*kpacked)
	if ref || pk == nil || pk.groupBytes == 0 || impl != implAVX512 {
		return nil
	}
	k := kTiles(w.Type)
	a := kActsPool.Get().(*kActs)
	a.cols, a.bsz, a.nblk = w.Cols, dtype.QKK, w.Cols/dtype.QKK
	a.q, a.d, a.bsums, a.s, a.kb = a.q[:0], a.d[:0], a.bsums[:0], a.s[:0], a.kb[:0]
	nblk, xb, cols := a.nblk, k.xb, a.cols
	a.xt = grow(a.xt, batch*nblk*xb) // (batch tiles, nblk, tile rows, xb) bytes
	c8 := 0
	if k.meta == kMetaC8 {
		c8 = 1
	}
	p.For((batch+k.g-1)/k.g, 1, func(lo, hi int) {
		for ti := lo; ti < hi; ti++ {
			b0, nb := k.kTile(ti, batch)
			for t := range nb {
				quantQ8KAVX512(&x[(b0+t)*cols], nblk, &a.xt[b0*nblk*xb+256*t], xb*nb, 256*(nb-t)+(xb-256)*t, c8)
			}
		}
	})
	return a
}

// tileKActs fills a.xt for the AVX2 tile kernels k (see the file comment)
// from the quantized rows: rows in k's batch tiles, k.xb bytes per row and
// super-block (256 quants, then d_x f32 and at meta byte 16 the sums k.meta
// says, kMeta32 or kMeta16).
func tileKActs(a *kActs, batch int, k *kTileKernels) {
	nblk, xb := a.nblk, k.xb
	a.xt = grow(a.xt, batch*nblk*xb) // (batch tiles, nblk, tile rows, xb) bytes
	q := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a.q))), len(a.q))
	le := binary.LittleEndian
	for ti := range (batch + k.g - 1) / k.g {
		b0, nb := k.kTile(ti, batch)
		for t := range nb {
			b := b0 + t
			for i := range nblk {
				blk := a.xt[b0*nblk*xb+i*xb*nb:]
				copy(blk[256*t:256*t+256], q[b*a.cols+256*i:])
				meta := blk[256*nb+(xb-256)*t:][:xb-256]
				le.PutUint32(meta, math.Float32bits(a.d[b*nblk+i]))
				bs := a.bsums[(b*nblk+i)*16:][:16] // (16) per-16 quant sums
				switch k.meta {
				case kMeta32:
					for k := range 8 {
						le.PutUint16(meta[16+2*k:], uint16(bs[2*k]+bs[2*k+1]))
					}
				case kMeta16:
					for k, v := range bs {
						le.PutUint16(meta[16+2*k:], uint16(v))
					}
				}
			}
		}
	}
}

// kTileRows computes output rows [lo, hi) (lo a multiple of 16) of a
// Q4_K/Q5_K/Q6_K matrix on its tile kernels k (activation rows in groups of
// k.g) into y[b·ystride + r − base]. When a group takes k.minPre calls or
// more, its quants are unpacked once and the pre kernels read them.
func kTileRows(pk *kpacked, k *kTileKernels, a *kActs, y []float32, ystride, batch, lo, hi, base int) {
	ks, pre, g := k.fused, k.pre, k.g
	nblk, gb, xb := a.nblk, pk.groupBytes, k.xb
	nt := (batch + g - 1) / g         // activation tiles
	var scratch [kzMaxNB * 16]float32 // (nb, 16) a partial last group's outputs
	var u []byte                      // unpacked Q6_K quants of the groups of a block, or nil
	ub := nblk * k6uBlock
	bg := max(1, (128<<10)/gb) // groups per cache block (prefill)
	if k.pre != nil && nt >= k.minPre {
		buf := k6uBufs.Get().(*[]byte)
		defer k6uBufs.Put(buf)
		n := ub
		if batch > kBatchChunk {
			n *= bg
		}
		*buf = grow(*buf, n)
		u = *buf
	}
	call := func(grp, t int, pf *byte, pfn int) {
		b0, nb := k.kTile(t, batch)
		r0 := 16 * grp
		x := &a.xt[b0*nblk*xb]
		yp, ys := &scratch[0], 64
		if r0+16 <= hi {
			yp, ys = &y[b0*ystride+r0-base], 4*ystride
		}
		if u != nil {
			pre[nb](&pk.data[grp*gb], nblk, x, yp, ys, &u[grp%bg*ub])
		} else {
			ks[nb](&pk.data[grp*gb], nblk, x, yp, ys, pf, pfn)
		}
		if r0+16 > hi {
			for b := range nb {
				copy(y[(b0+b)*ystride+r0-base:][:hi-r0], scratch[16*b:])
			}
		}
	}
	unpack := func(grp int) {
		if u != nil {
			k.unpack(&pk.data[grp*gb], nblk, &u[grp%bg*ub])
		}
	}
	g0, g1 := lo/16, (hi+15)/16
	if batch <= kBatchChunk {
		if u != nil {
			bg = 1
		}
		// Weights stream from memory once: call t of a group prefetches
		// its share of the next group.
		for grp := g0; grp < g1; grp++ {
			unpack(grp)
			for t := range nt {
				pf, pfn := &pk.data[grp*gb], 0
				if grp+1 < g1 {
					plo, phi := (gb*t/nt)&^63, (gb*(t+1)/nt)&^63
					pf, pfn = &pk.data[(grp+1)*gb+plo], phi-plo
				}
				call(grp, t, pf, pfn)
			}
		}
		return
	}
	// Prefill: a block of groups (≤ 128 KiB) against ~kBatchChunk rows at
	// a time, both held in L2.
	bt := max(1, kBatchChunk/g)
	for gs := g0; gs < g1; gs += bg {
		ge := min(g1, gs+bg)
		for grp := gs; grp < ge; grp++ {
			unpack(grp)
		}
		for t0 := 0; t0 < nt; t0 += bt {
			t1 := min(nt, t0+bt)
			for grp := gs; grp < ge; grp++ {
				for t := t0; t < t1; t++ {
					call(grp, t, &pk.data[grp*gb], 0)
				}
			}
		}
	}
}

func kRowsFast(w *Matrix, a *kActs, y []float32, ystride, batch, lo, hi, base int) bool {
	if legacyRows(w, a, y, ystride, batch, lo, hi, base) { // legacy_amd64.go
		return true
	}
	pk, _ := w.packed.(*kpacked)
	if pk == nil || impl < implAVX2 {
		return false
	}
	if pk.groupBytes > 0 {
		k := kTiles(w.Type)
		if lo%16 != 0 || k == nil || len(a.xt) != batch*a.nblk*k.xb {
			return false
		}
		kTileRows(pk, k, a, y, ystride, batch, lo, hi, base)
		return true
	}
	if len(a.kb) == 0 {
		return false
	}
	ks, kbn := &q3kK, 16*a.nblk
	if w.Type == dtype.Q2_K {
		ks = &q2kK
	}
	kRowTiles(lo, hi, batch, func(r, nr, b0, nb int) {
		ks[nb](&pk.data[r*pk.rowBytes], nr, a.nblk, &a.q[b0*a.cols], a.cols, &a.d[b0*a.nblk], 4*a.nblk,
			&a.kb[b0*kbn], 2*kbn, &y[b0*ystride+r-base], 4*ystride)
	})
	return true
}

// Cache blocking of a K-quant matmul: kRowBlock weight rows (≤ 60 KB for
// 6144 columns) against kBatchChunk activation rows (≤ 400 KB) at a time, so
// that neither is streamed again for every row or every 4 tokens of a
// prefill. Each output is still one kernel call's sum over all columns.
const kRowBlock, kBatchChunk = 16, 64

// kRowTiles calls k(r, nr, b0, nb) for weight rows [r, r+nr) (a row block
// in [lo, hi)) and every group of nb ≤ kMaxNB activation rows from b0, in
// cache-blocked order.
func kRowTiles(lo, hi, batch int, k func(r, nr, b0, nb int)) {
	for r0 := lo; r0 < hi; r0 += kRowBlock {
		nr := min(hi, r0+kRowBlock) - r0
		for c0 := 0; c0 < batch; c0 += kBatchChunk {
			c1 := min(batch, c0+kBatchChunk)
			for b0 := c0; b0 < c1; b0 += kMaxNB {
				k(r0, nr, b0, min(kMaxNB, c1-b0))
			}
		}
	}
}

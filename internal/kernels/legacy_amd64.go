//go:build !purego

// Q4_1/Q5_0/Q5_1 dispatch on amd64: the weights are repacked at load into
// 16-row groups (the last one zero-padded: scales 0) and multiplied by the
// tile kernels of legacy_amd64.s, several weight rows by several activation
// rows per call: AVX-512 VNNI a whole group by up to lMaxNB512 rows, AVX2 one
// 8-row half by up to lMaxNB2 rows. Both compute the same integers and the
// same f32 operations in the same order, so they agree bit for bit, and an
// output does not depend on the batch it is computed in.
//
// Group layout: a group's blocks follow each other (bb bytes each), groups
// follow each other; "lane r" is row 16g+r, one 32-bit lane of a zmm (AVX2:
// half h = r/8 is the h-th 32 bytes of each 64). Offsets within one block of
// a group (the same bytes as ggml's, rearranged):
//
//	Q4_1 (320 B): 0: the 16 rows' d (f16); 32: their m (f16); 64: qs.
//	Q5_0 (352 B): 0: d; 32: qh; 96: qs.
//	Q5_1 (384 B): 0: d; 32: m; 64: qh; 128: qs.
//
// where qs is, for m = 0…3, the 16 lanes' 4 bytes qs[4m…4m+3] of the ggml
// block (weights 4m+t in the low nibbles, 16+4m+t in the high ones), and qh
// the 16 lanes' 4 bytes of 5th bits: bit m of byte t for weight 4m+t, bit
// 4+m for weight 16+4m+t. The kernels take the quants unsigned (Q5_0: q+16)
// and start Q5_0's integer block sum at c = −16·Σq_x.
//
// Activations (kActs.xt) are tiled by batch tiles (legacyTile): the tile of
// rows [b0, b0+nb) starts at byte 40·nblk·b0 and holds per block the nb
// rows' 32 quants, then per row d_x f32 and c (Q5_0: −16·Σq int32; Q4_1,
// Q5_1: s_x f32).
package kernels

import (
	"encoding/binary"
	"runtime"
	"sync"
	"unsafe"

	"github.com/draftd/draftd/internal/dtype"
)

// Register blocking limits of the generated kernels (see _asm/legacy.go).
const (
	lMaxNB2   = 5
	lMaxNB512 = 12
	lXBytes   = 40 // tiled activation bytes per row and block
)

type l2Kernel func(ws, wq *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)
type l512Kernel func(w *byte, nblk int, x *byte, y *float32, ystride int, pf *byte, pfn int)

var (
	l2Kernels = map[dtype.Type]*[lMaxNB2 + 1]l2Kernel{
		dtype.Q4_1: {nil, q41tAVX2x1, q41tAVX2x2, q41tAVX2x3, q41tAVX2x4, q41tAVX2x5},
		dtype.Q5_0: {nil, q50tAVX2x1, q50tAVX2x2, q50tAVX2x3, q50tAVX2x4, q50tAVX2x5},
		dtype.Q5_1: {nil, q51tAVX2x1, q51tAVX2x2, q51tAVX2x3, q51tAVX2x4, q51tAVX2x5},
	}
	l512Kernels = map[dtype.Type]*[lMaxNB512 + 1]l512Kernel{
		dtype.Q4_1: {nil, q41tAVX512x1, q41tAVX512x2, q41tAVX512x3, q41tAVX512x4, q41tAVX512x5, q41tAVX512x6,
			q41tAVX512x7, q41tAVX512x8, q41tAVX512x9, q41tAVX512x10, q41tAVX512x11, q41tAVX512x12},
		dtype.Q5_0: {nil, q50tAVX512x1, q50tAVX512x2, q50tAVX512x3, q50tAVX512x4, q50tAVX512x5, q50tAVX512x6,
			q50tAVX512x7, q50tAVX512x8, q50tAVX512x9, q50tAVX512x10, q50tAVX512x11, q50tAVX512x12},
		dtype.Q5_1: {nil, q51tAVX512x1, q51tAVX512x2, q51tAVX512x3, q51tAVX512x4, q51tAVX512x5, q51tAVX512x6,
			q51tAVX512x7, q51tAVX512x8, q51tAVX512x9, q51tAVX512x10, q51tAVX512x11, q51tAVX512x12},
	}
)

// lLayout is a legacy type's group layout: bytes per block of a 16-row
// group and the offsets of the mins and 5th bits (−1: none) and quants.
type lLayout struct{ bb, mOff, qhOff, qsOff int }

var lLayouts = map[dtype.Type]lLayout{
	dtype.Q4_1: {320, 32, -1, 64},
	dtype.Q5_0: {352, -1, 32, 96},
	dtype.Q5_1: {384, 32, 64, 128},
}

// lpacked is a Q4_1/Q5_0/Q5_1 matrix in the group layout.
type lpacked struct {
	data       []byte // (groups, groupBytes)
	bb         int    // bytes per group and block
	groupBytes int    // nblk · bb
}

// legacyPack repacks m (Q4_1, Q5_0 or Q5_1) into 16-row groups, or returns
// nil for other types or without AVX2.
func legacyPack(m *Matrix) *lpacked {
	lay, ok := lLayouts[m.Type]
	if !ok || !hasAVX2 {
		return nil
	}
	le := binary.LittleEndian
	nblk := m.Cols / dtype.QK
	groups := (m.Rows + 15) / 16
	pk := &lpacked{bb: lay.bb, groupBytes: nblk * lay.bb}
	pk.data = weightBytes(pk, groups*pk.groupBytes)
	sb := m.Type.BlockBytes()
	qhAt, qsAt := 2, 2 // offsets of qh and qs in the ggml block
	switch m.Type {
	case dtype.Q4_1:
		qsAt = 4
	case dtype.Q5_0:
		qsAt = 6
	case dtype.Q5_1:
		qhAt, qsAt = 4, 8
	}
	packRow := func(grp []byte, r int, src []byte) {
		for i := range nblk {
			s := src[i*sb : (i+1)*sb]
			dst := grp[i*lay.bb : (i+1)*lay.bb]
			copy(dst[2*r:], s[0:2])
			if lay.mOff >= 0 {
				copy(dst[lay.mOff+2*r:], s[2:4])
			}
			if lay.qhOff >= 0 {
				le.PutUint32(dst[lay.qhOff+4*r:], spreadQH(le.Uint32(s[qhAt:])))
			}
			for mm := range 4 {
				copy(dst[lay.qsOff+64*mm+4*r:][:4], s[qsAt+4*mm:])
			}
		}
	}
	// Packing a model is a large copy; each group is written by one goroutine.
	nw := min(runtime.GOMAXPROCS(0), max(1, groups/64))
	var wg sync.WaitGroup
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := groups * w / nw; g < groups*(w+1)/nw; g++ {
				grp := pk.data[g*pk.groupBytes : (g+1)*pk.groupBytes]
				for row := 16 * g; row < min(m.Rows, 16*g+16); row++ {
					packRow(grp, row%16, m.Row(row))
				}
			}
		}()
	}
	wg.Wait()
	return pk
}

// spreadQH is the 5th-bit word of the group layout for a ggml block's qh:
// bit m of byte t is bit 4m+t of qh (weight 4m+t), bit 4+m is bit 16+4m+t.
func spreadQH(qh uint32) uint32 {
	var w uint32
	for t := range 4 {
		// Bits t, t+4, t+8, t+12 of each half, gathered to 4 adjacent bits.
		lo, hi := qh>>t&0x1111, qh>>(16+t)&0x1111
		lo = (lo | lo>>3 | lo>>6 | lo>>9) & 0xf
		hi = (hi | hi>>3 | hi>>6 | hi>>9) & 0xf
		w |= (lo | hi<<4) << (8 * t)
	}
	return w
}

// legacyMaxNB is the activation rows per kernel call of the implementation in use.
func legacyMaxNB() int {
	if impl == implAVX512 {
		return lMaxNB512
	}
	return lMaxNB2
}

// legacyTiles is the number of batch tiles of batch rows: tile i is rows
// [legacyTile(i, n, batch), legacyTile(i+1, n, batch)), near-equal sizes of
// at most legacyMaxNB.
func legacyTiles(batch int) int { return (batch + legacyMaxNB() - 1) / legacyMaxNB() }

// legacyTile is the first row of batch tile i of nt.
func legacyTile(i, nt, batch int) int { return i * batch / nt }

// legacyQuantize quantizes the (batch, Cols) rows of x for w straight into
// the tiled layout of the tile kernels (a.xt; a.q, a.d and a.s stay empty),
// the batch tiles split over p; nil when w does not run on them (ref: the
// plain-Go kernel is wanted; no packed layout; AVX2 not in use).
func legacyQuantize(p *Pool, w *Matrix, x []float32, batch int, ref bool) *kActs {
	if pk, _ := w.packed.(*lpacked); ref || pk == nil || impl < implAVX2 {
		return nil
	}
	a := kActsPool.Get().(*kActs)
	a.cols, a.bsz, a.nblk = w.Cols, dtype.QK, w.Cols/dtype.QK
	a.q, a.d, a.bsums, a.s, a.kb = a.q[:0], a.d[:0], a.bsums[:0], a.s[:0], a.kb[:0]
	nblk, cols := a.nblk, a.cols
	a.xt = grow(a.xt, batch*nblk*lXBytes)
	q81 := 1 // Q4_1, Q5_1: s_x; Q5_0: c
	if w.Type == dtype.Q5_0 {
		q81 = 0
	}
	nt := legacyTiles(batch)
	p.For(nt, 1, func(lo, hi int) {
		for ti := lo; ti < hi; ti++ {
			b0 := legacyTile(ti, nt, batch)
			nb := legacyTile(ti+1, nt, batch) - b0
			for k := range nb {
				quantQ8LAVX2(&x[(b0+k)*cols], nblk, &a.xt[(b0*nblk*lXBytes)+32*k], lXBytes*nb, 32*(nb-k)+8*k, q81)
			}
		}
	})
	return a
}

// legacyRows computes output rows [lo, hi) (lo a multiple of 16) of a
// Q4_1/Q5_0/Q5_1 matrix packed by legacyPack into y[b·ystride + r − base];
// false: not handled (no packed layout, AVX2 not in use, or no tiled
// activations).
func legacyRows(w *Matrix, a *kActs, y []float32, ystride, batch, lo, hi, base int) bool {
	pk, _ := w.packed.(*lpacked)
	if pk == nil || impl < implAVX2 || lo%16 != 0 || len(a.xt) != batch*a.nblk*lXBytes {
		return false
	}
	nt := legacyTiles(batch)
	nblk, gb := a.nblk, pk.groupBytes
	k2, k512 := l2Kernels[w.Type], l512Kernels[w.Type]
	avx512 := impl == implAVX512
	var scratch []float32 // (nb, 16) a partial last group's outputs
	if hi%16 != 0 {
		scratch = make([]float32, lMaxNB512*16)
	}
	// call computes group grp for batch tile ti and prefetches pfn bytes at pf.
	call := func(grp, ti int, pf *byte, pfn int) {
		b0 := legacyTile(ti, nt, batch)
		nb := legacyTile(ti+1, nt, batch) - b0
		r0 := 16 * grp
		x := &a.xt[b0*nblk*lXBytes]
		var yp *float32
		var ys int
		var yh []float32
		if r0+16 <= hi {
			yp, ys, yh = &y[b0*ystride+r0-base], 4*ystride, y[b0*ystride+r0-base+8:]
		} else {
			yp, ys, yh = &scratch[0], 64, scratch[8:]
		}
		g := pk.data[grp*gb:]
		if avx512 {
			k512[nb](&g[0], nblk, x, yp, ys, pf, pfn)
		} else {
			h := pfn / 2 &^ 63
			k2[nb](&g[0], &g[0], nblk, x, yp, ys, pf, h)
			k2[nb](&g[16], &g[32], nblk, x, &yh[0], ys, (*byte)(unsafe.Add(unsafe.Pointer(pf), h)), pfn-h)
		}
		if r0+16 > hi {
			for b := range nb {
				copy(y[(b0+b)*ystride+r0-base:][:hi-r0], scratch[16*b:])
			}
		}
	}
	g0, g1 := lo/16, (hi+15)/16
	if batch <= kBatchChunk {
		// Weights stream from memory once: call ti of a group prefetches
		// its share of the next group.
		for grp := g0; grp < g1; grp++ {
			for ti := range nt {
				pf, pfn := &pk.data[grp*gb], 0
				if grp+1 < g1 {
					plo, phi := (gb*ti/nt)&^63, (gb*(ti+1)/nt)&^63
					if ti == nt-1 {
						phi = gb
					}
					pf, pfn = &pk.data[(grp+1)*gb+plo], phi-plo
				}
				call(grp, ti, pf, pfn)
			}
		}
		return true
	}
	// Prefill: a block of groups (≤ 128 KiB) against ~kBatchChunk rows at a
	// time, both held in L2.
	bg := max(1, (128<<10)/gb)
	bt0 := max(1, kBatchChunk/legacyMaxNB())
	for gs := g0; gs < g1; gs += bg {
		ge := min(g1, gs+bg)
		for t0 := 0; t0 < nt; t0 += bt0 {
			t1 := min(nt, t0+bt0)
			for grp := gs; grp < ge; grp++ {
				for ti := t0; ti < t1; ti++ {
					call(grp, ti, &pk.data[grp*gb], 0)
				}
			}
		}
	}
	return true
}

//go:build !purego

// The amd64 matmul driver: packed weight layouts (built once by NewMatrix),
// activation quantization, and the split of one MatMul into kernel calls.
//
// Packed layout. Rows are grouped into tiles of 32 (zero-padded at the end);
// each tile is one contiguous stream that a kernel reads front to back, and
// tiles follow each other, so a thread streams its share of the weights
// sequentially. Within a tile the 32 rows are two groups of 16 (one zmm of
// f32 or int32 lanes each); "lane j of group g" is row 32t+16g+j.
//
//	Q8_0 (1088 B per 32 columns): 32 f16 scales (row order), then for
//	      s = 0…7 and g = 0,1: 16 lanes × 4 bytes q+128 of columns 4s…4s+3.
//	Q4_0 (576 B per 32 columns): 32 f16 scales, then for m = 0…3 and
//	      g = 0,1: 16 lanes × 4 bytes qs[4m…4m+3] of the ggml block, i.e.
//	      columns 4m+t in the low nibbles and 16+4m+t in the high nibbles.
//	BF16 (128 B per 2 columns): per column pair and group, 16 lanes × the
//	      stored 32-bit pair (column 2p in the low half, 2p+1 in the high).
//	F16  (64 B per column): per column and group, 16 lanes × f16.
//	F32  (128 B per column): per column and group, 16 lanes × f32.
//
// Float types are padded with zero columns to a multiple of 8.
//
// Kernels. On AVX-512, Q8_0/Q4_0 weights are multiplied as unsigned bytes
// (q+128, or the raw nibble) by the signed Q8_0 activation quants with
// VPDPBUSD; the offset is removed by starting each block sum at
// -offset·Σq_x, computed once per activation block. Each kernel call
// computes one 32-row tile for up to 6 (int8) or 12 (float) activation rows
// held in registers, looping over all columns.
//
// On AVX2 a kernel call computes one 16-row group of a tile for up to 2
// (int8) or 4 (float) activation rows. Q8_0 uses VPMADDUBSW on |w| and
// x·sign(w) (the stored q+128 is turned back into w with one XOR per
// weight vector, shared by the rows of the call), then VPMADDWD to widen;
// Q4_0 multiplies the raw nibbles by x, sums a whole block in int16 (8
// products of ≤ 2·15·127) and removes the offset as on AVX-512. Activations
// are laid out per batch tile so each call reads one contiguous stream
// (quantizeRow). Large batches (prefill) are cache-blocked: see run; their
// Q8_0 sweeps use q8AVX2Px<n>, the same sums for up to 5 rows per call
// without prefetching.
//
// Every output element is the same sequential sum over its columns whatever
// the batch size, blocking or thread count, so results are deterministic
// and batch-invariant.
package kernels

import (
	"encoding/binary"
	"math"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/draftd/draftd/internal/dtype"
)

// Register blocking limits of the generated kernels (see _asm/matmul_*.go).
const (
	qMaxNB   = 6
	fMaxNB   = 12
	q2MaxNB  = 4
	q2PMaxNB = 5
	f2MaxNB  = 4
)

type qKernel func(w, x, xm *byte, nblk, xstride int, y *float32, ystride int, pf *byte, pfn int)
type fKernel func(w *byte, x *float32, xstride, nk int, y *float32, ystride int, pf *byte, pfn int)
type f2Kernel func(w *byte, x *float32, xstride, nk int, y *float32, ystride int)
type q2Kernel func(ws, wq, x, xm *byte, nblk, xstride int, y *float32, ystride int, pf *byte, pfn int)
type q2PKernel func(ws, wq, x, xm *byte, nblk, xstride int, y *float32, ystride int)

var (
	q8K512   = [...]qKernel{nil, q8AVX512x1, q8AVX512x2, q8AVX512x3, q8AVX512x4, q8AVX512x5, q8AVX512x6}
	q4K512   = [...]qKernel{nil, q4AVX512x1, q4AVX512x2, q4AVX512x3, q4AVX512x4, q4AVX512x5, q4AVX512x6}
	bf16K512 = [...]fKernel{nil, bf16AVX512x1, bf16AVX512x2, bf16AVX512x3, bf16AVX512x4, bf16AVX512x5, bf16AVX512x6,
		bf16AVX512x7, bf16AVX512x8, bf16AVX512x9, bf16AVX512x10, bf16AVX512x11, bf16AVX512x12}
	f16K512 = [...]fKernel{nil, f16AVX512x1, f16AVX512x2, f16AVX512x3, f16AVX512x4, f16AVX512x5, f16AVX512x6,
		f16AVX512x7, f16AVX512x8, f16AVX512x9, f16AVX512x10, f16AVX512x11, f16AVX512x12}
	f32K512 = [...]fKernel{nil, f32AVX512x1, f32AVX512x2, f32AVX512x3, f32AVX512x4, f32AVX512x5, f32AVX512x6,
		f32AVX512x7, f32AVX512x8, f32AVX512x9, f32AVX512x10, f32AVX512x11, f32AVX512x12}
	q8K2   = [...]q2Kernel{nil, q8AVX2x1, q8AVX2x2, q8AVX2x3, q8AVX2x4}
	q4K2   = [...]q2Kernel{nil, q4AVX2x1, q4AVX2x2, q4AVX2x3, q4AVX2x4}
	q8K2P  = [...]q2PKernel{4: q8AVX2Px4, 5: q8AVX2Px5} // batch > blockRows: tiles of 4 or 5 rows
	bf16K2 = [...]f2Kernel{nil, bf16AVX2x1, bf16AVX2x2, bf16AVX2x3, bf16AVX2x4}
	f16K2  = [...]f2Kernel{nil, f16AVX2x1, f16AVX2x2, f16AVX2x3, f16AVX2x4}
	f32K2  = [...]f2Kernel{nil, f32AVX2x1, f32AVX2x2, f32AVX2x3, f32AVX2x4}
)

// packed is a Matrix's weights in the kernels' stream order.
type packed struct {
	tiles     int    // ceil(Rows/32)
	tileBytes int    // bytes of one 32-row tile
	nblk      int    // Q8_0/Q4_0: Cols/32
	k8        int    // F32/F16/BF16: Cols rounded up to a multiple of 8
	data      []byte // (tiles, tileBytes), 64-byte aligned
	// q8Codes: Q8_0 quants are stored as q^0x80 (the unsigned codes the
	// AVX-512 VNNI kernels take) rather than as q (the signed bytes of the
	// AVX2 kernels, whose VPSIGNB/VPABSB then read them straight from
	// memory). Chosen by the implementation in use when the matrix is
	// packed; see fits.
	q8Codes bool
}

// fits reports whether the kernels of implementation id can read pk: the
// two Q8_0 layouts differ, so a matrix packed before SetImpl switched
// between AVX-512 and AVX2 (tests and benchmarks only) runs the plain-Go
// reference instead of misreading its weights.
func (pk *packed) fits(t dtype.Type, id implID) bool {
	return t != dtype.Q8_0 || pk.q8Codes == (id == implAVX512)
}

func pack(m *Matrix) any {
	if !hasAVX2 {
		return nil
	}
	pk := &packed{tiles: (m.Rows + 31) / 32}
	switch m.Type {
	case dtype.Q8_0:
		pk.q8Codes = impl == implAVX512
		pk.nblk = m.Cols / dtype.QK
		pk.tileBytes = pk.nblk * (64 + 8*128)
	case dtype.Q4_0:
		pk.nblk = m.Cols / dtype.QK
		pk.tileBytes = pk.nblk * (64 + 4*128)
	case dtype.BF16, dtype.F16:
		pk.k8 = (m.Cols + 7) &^ 7
		pk.tileBytes = pk.k8 * 64
	case dtype.F32:
		pk.k8 = (m.Cols + 7) &^ 7
		pk.tileBytes = pk.k8 * 128
	default:
		return nil
	}
	pk.data = weightBytes(pk, pk.tiles*pk.tileBytes)
	// Packing the weights of a model is a large copy; spread it over the CPUs.
	nw := min(runtime.GOMAXPROCS(0), max(1, pk.tiles/64))
	var wg sync.WaitGroup
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := pk.tiles * w / nw; t < pk.tiles*(w+1)/nw; t++ {
				packTile(m, pk, t)
			}
		}()
	}
	wg.Wait()
	return pk
}

func alignedBytes(n int) []byte {
	b := make([]byte, n+64)
	off := alignOff(b)
	return b[off : off+n : off+n]
}

func packTile(m *Matrix, pk *packed, t int) {
	le := binary.LittleEndian
	dst := pk.data[t*pk.tileBytes : (t+1)*pk.tileBytes]
	for r := range 32 {
		row := 32*t + r
		g, j := r/16, r%16
		if row >= m.Rows {
			if m.Type == dtype.Q8_0 || m.Type == dtype.Q4_0 {
				// Zero weights (scale 0): q = 0 (code 128 for AVX-512), or nibble 8 (Q4_0).
				fill := uint32(0)
				switch {
				case m.Type == dtype.Q4_0:
					fill = 0x88888888
				case pk.q8Codes:
					fill = 0x80808080
				}
				bb := pk.tileBytes / pk.nblk
				for i := range pk.nblk {
					blk := dst[i*bb:]
					for s := range (bb - 64) / 128 {
						le.PutUint32(blk[64+128*s+64*g+4*j:], fill)
					}
				}
			}
			continue // float padding is already zero
		}
		src := m.Row(row)
		switch m.Type {
		case dtype.Q8_0:
			var code uint32 // the AVX-512 kernels' unsigned codes q+128, or q itself
			if pk.q8Codes {
				code = 0x80808080
			}
			for i := range pk.nblk {
				blk, sb := dst[i*1088:], src[i*34:]
				blk[2*r], blk[2*r+1] = sb[0], sb[1]
				for s := range 8 {
					le.PutUint32(blk[64+128*s+64*g+4*j:], le.Uint32(sb[2+4*s:])^code)
				}
			}
		case dtype.Q4_0:
			for i := range pk.nblk {
				blk, sb := dst[i*576:], src[i*18:]
				blk[2*r], blk[2*r+1] = sb[0], sb[1]
				for mm := range 4 {
					le.PutUint32(blk[64+128*mm+64*g+4*j:], le.Uint32(sb[2+4*mm:]))
				}
			}
		case dtype.BF16:
			for p := range m.Cols / 2 {
				le.PutUint32(dst[128*p+64*g+4*j:], le.Uint32(src[4*p:]))
			}
			if m.Cols%2 == 1 {
				p := m.Cols / 2
				le.PutUint16(dst[128*p+64*g+4*j:], le.Uint16(src[4*p:]))
			}
		case dtype.F16:
			for k := range m.Cols {
				le.PutUint16(dst[64*k+32*g+2*j:], le.Uint16(src[2*k:]))
			}
		case dtype.F32:
			for k := range m.Cols {
				le.PutUint32(dst[128*k+64*g+4*j:], le.Uint32(src[4*k:]))
			}
		}
	}
}

// mmJob is one MatMul call spread over a Pool; kept in the Pool's arena.
type mmJob struct {
	w        *Matrix
	pk       *packed
	y, x     []float32
	batch    int
	impl     implID
	xq, xm   []byte // quantized activations: (nblk, batch, 32) quants, (nblk, batch) {d f32, corr i32}
	xtiled   bool   // AVX2: xq, xm are instead (batch tile, nblk, rows of the tile, …), see quantizeRow
	q8P      bool   // AVX2 Q8_0, blocked: the prefill kernels q8K2P (up to q2PMaxNB rows per call)
	off      int    // quantization offset: 128 for Q8_0, 8 for Q4_0
	xrow     int    // float path: floats per activation row of x (Cols, or k8 if padded)
	bt       []int  // batch tile starts, then batch
	bblk     int    // batch tiles per cache block (see run)
	scratch  [][]float32
	ids      []int       // MatMulArgmax: per-row result; y is not written
	keep     [][]float32 // MatMulArgmaxKeep: (batch) nil or (Rows) logits to store
	best     []maxAt     // MatMulArgmax: (worker, batch) running maxima
	tiles    int
	chunk    int
	next     atomic.Int64
	quantize bool // quantize x inside the task (qnext/qdone), before any tile
	qnext    atomic.Int32
	qdone    atomic.Int32
}

// maxAt is a running argmax.
type maxAt struct {
	v float32
	i int
}

func matmul(p *Pool, y []float32, w *Matrix, x []float32, batch int) {
	if pk, _ := w.packed.(*packed); impl == implGeneric || pk == nil || !pk.fits(w.Type, impl) {
		matmulRef(p, y, w, x, batch)
		return
	}
	matmulAsm(p, y, nil, nil, w, x, batch)
}

func matmulArgmax(p *Pool, ids []int, keep [][]float32, w *Matrix, x []float32, batch int) {
	if pk, _ := w.packed.(*packed); impl == implGeneric || pk == nil || !pk.fits(w.Type, impl) {
		matmulArgmaxRef(p, ids, keep, w, x, batch)
		return
	}
	matmulAsm(p, nil, ids, keep, w, x, batch)
}

// Cache blocking for large batches (prefill): a worker's chunk of weight
// tiles (about blockWeightBytes) is swept once per block of activation rows
// (at most blockRows, and few enough that chunk and block together stay
// within blockL2Bytes of the 512 KiB L2), so each weight tile is reused
// across many tokens while both stay in L2: weights are read from memory
// once, activations from L3 once per chunk. Batches up to blockRows are
// not blocked.
const (
	blockWeightBytes = 288 << 10
	blockL2Bytes     = 384 << 10
	blockRows        = 64
)

// matmuls runs MatMuls for Q8_0 and Q4_0 matrices of one width on the
// assembly kernels, quantizing the activations once (under one hold of the
// pool, so no other call reuses its buffer in between); false: not handled.
func matmuls(p *Pool, ys [][]float32, ws []*Matrix, x []float32, batch int) bool {
	if t := ws[0].Type; impl == implGeneric || (t != dtype.Q8_0 && t != dtype.Q4_0) {
		return false
	}
	for _, w := range ws {
		if pk, _ := w.packed.(*packed); pk == nil || !pk.fits(w.Type, impl) {
			return false
		}
	}
	p, lent := holdPool(p)
	defer releasePool(p, lent)
	for i, w := range ws {
		matmulLocked(p, ys[i][:batch*w.Rows], nil, nil, w, x, batch, i > 0)
	}
	return true
}

// matmulAsm runs MatMul (ids == nil) or MatMulArgmaxKeep on the assembly
// kernels.
func matmulAsm(p *Pool, y []float32, ids []int, keep [][]float32, w *Matrix, x []float32, batch int) {
	p, lent := holdPool(p)
	defer releasePool(p, lent)
	matmulLocked(p, y, ids, keep, w, x, batch, false)
}

// matmulLocked is matmulAsm with p held. quantized: the arena already holds
// x quantized for this batch and a matrix of w's type and width (MatMuls'
// previous matrix), so the quantization is skipped.
func matmulLocked(p *Pool, y []float32, ids []int, keep [][]float32, w *Matrix, x []float32, batch int, quantized bool) {
	pk := w.packed.(*packed)
	j, _ := p.arena.job.(*mmJob)
	if j == nil {
		j = new(mmJob)
		p.arena.job = j
	}
	j.w, j.pk, j.y, j.x, j.batch, j.impl = w, pk, y, x, batch, impl
	j.tiles = pk.tiles
	j.chunk = max(1, min(64, pk.tiles/(8*p.n)))
	blocked := batch > blockRows && impl == implAVX2 // not yet measured on AVX-512
	if blocked {
		j.chunk = max(1, min(blockWeightBytes/pk.tileBytes, pk.tiles/(2*p.n)))
	}
	j.next.Store(0)
	j.quantize = false
	j.ids, j.keep = ids, keep
	if ids != nil {
		// Each worker keeps the logits of one claimed chunk (≤ 512 rows)
		// and a running argmax per activation row.
		j.chunk = min(j.chunk, 16)
		if cap(j.best) < p.n*batch {
			j.best = make([]maxAt, p.n*batch)
		}
		j.best = j.best[:p.n*batch]
		for i := range j.best {
			j.best[i] = maxAt{float32(math.Inf(-1)), 0}
		}
		j.scratch = p.arena.workerScratch(p.n, batch*32*j.chunk)
	} else {
		j.scratch = p.arena.workerScratch(p.n, batch*32) // for a partial last tile
	}

	quant := w.Type == dtype.Q8_0 || w.Type == dtype.Q4_0
	maxNB := fMaxNB
	switch {
	case quant && impl == implAVX2:
		maxNB = q2MaxNB
		if blocked && w.Type == dtype.Q8_0 {
			maxNB = q2PMaxNB
		}
	case quant:
		maxNB = qMaxNB
	case impl == implAVX2:
		maxNB = f2MaxNB
	}
	nt := (batch + maxNB - 1) / maxNB
	j.bt = j.bt[:0]
	for i := range nt {
		j.bt = append(j.bt, i*batch/nt)
	}
	j.bt = append(j.bt, batch)
	j.bblk = nt
	j.q8P = quant && impl == implAVX2 && maxNB == q2PMaxNB
	if blocked {
		rowBytes := 4 * pk.k8 // activation bytes per row
		if quant {
			rowBytes = 40 * pk.nblk
		}
		rows := min(blockRows, (blockL2Bytes-j.chunk*pk.tileBytes)/rowBytes)
		j.bblk = max(1, rows/maxNB)
	}
	switch {
	case quant:
		j.xtiled = impl == implAVX2
		j.off = 128
		if w.Type == dtype.Q4_0 {
			j.off = 8
		}
		n := pk.nblk * batch
		buf := p.arena.alignedBytes(n*40 + 64)
		j.xq, j.xm = buf[:n*32], buf[(n*32+63)&^63:][:n*8]
		j.qnext.Store(0)
		j.qdone.Store(0)
		if quantized {
			// Same batch, type and width: the same buffer, tiles and layout.
		} else if batch <= 4 || p.n == 1 {
			for b := range batch {
				j.quantizeRow(b)
			}
		} else {
			j.quantize = true
		}
	case w.Cols%8 == 0:
		j.xrow = w.Cols
	default:
		// Pad rows to k8 columns so kernels never read past a row.
		j.xrow = pk.k8
		buf := p.arena.alignedBytes(batch * pk.k8 * 4)
		xf := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), batch*pk.k8)
		clear(xf)
		for b := range batch {
			copy(xf[b*pk.k8:], x[b*w.Cols:(b+1)*w.Cols])
		}
		j.x = xf
	}
	p.run(j)
	if ids != nil {
		for b := range batch {
			best := j.best[b]
			for wk := 1; wk < p.n; wk++ {
				if o := j.best[wk*batch+b]; o.v > best.v || (o.v == best.v && o.i < best.i) {
					best = o
				}
			}
			ids[b] = best.i
		}
	}
	j.w, j.pk, j.y, j.x, j.ids, j.keep = nil, nil, nil, nil, nil, nil
}

// quantizeRow quantizes activation row b. Block i of row b goes to
// xq[32·(i·batch + b)] and its meta to xm[8·(i·batch + b)], or, if xtiled,
// rows are grouped by batch tile (each kernel call then reads one
// contiguous stream, which matters when batch·32 bytes is a multiple of
// the L1 way size): for b in the tile [b0, b0+nb), block i goes to
// xq[32·(nblk·b0 + i·nb + b-b0)] and xm[8·(nblk·b0 + i·nb + b-b0)].
func (j *mmJob) quantizeRow(b int) {
	nblk, cols := j.pk.nblk, j.w.Cols
	if j.xtiled {
		i := sort.SearchInts(j.bt, b+1) - 1 // the batch tile holding b
		b0, nb := j.bt[i], j.bt[i+1]-j.bt[i]
		o := nblk*b0 + b - b0
		quantQ8AVX2(&j.x[b*cols], nblk, &j.xq[32*o], 32*nb, &j.xm[8*o], 8*nb, j.off)
		return
	}
	switch j.impl {
	case implAVX512:
		quantQ8AVX512(&j.x[b*cols], nblk, &j.xq[32*b], 32*j.batch, &j.xm[8*b], 8*j.batch, j.off)
	case implAVX2:
		quantQ8AVX2(&j.x[b*cols], nblk, &j.xq[32*b], 32*j.batch, &j.xm[8*b], 8*j.batch, j.off)
	default:
		quantQ8Blocked(j.x[b*cols:(b+1)*cols], j.xq[32*b:], 32*j.batch, j.xm[8*b:], 8*j.batch, j.off)
	}
}

// run computes the tiles a worker claims, chunk by chunk. Within a chunk the
// batch is swept in blocks of bblk batch tiles (all of it for small
// batches), each block over every tile of the chunk.
func (j *mmJob) run(worker int) {
	if j.quantize {
		// Rows are claimed a batch tile at a time when tiled: the rows of
		// a tile share cache lines (32 bytes per row and block), and two
		// workers writing neighbouring rows made each line bounce between
		// their caches (the quantization took twice its one-worker time).
		n := 0
		for {
			c := int(j.qnext.Add(1) - 1)
			b0, b1 := c, c+1
			if j.xtiled {
				if c >= len(j.bt)-1 {
					break
				}
				b0, b1 = j.bt[c], j.bt[c+1]
			} else if c >= j.batch {
				break
			}
			for b := b0; b < b1; b++ {
				j.quantizeRow(b)
			}
			n += b1 - b0
		}
		if j.qdone.Add(int32(n)) != int32(j.batch) {
			for j.qdone.Load() != int32(j.batch) {
				runtime.Gosched()
			}
		}
	}
	scratch := j.scratch[worker]
	rows := j.w.Rows
	nt := len(j.bt) - 1
	for {
		t0 := int(j.next.Add(int64(j.chunk))) - j.chunk
		if t0 >= j.tiles {
			return
		}
		end := min(t0+j.chunk, j.tiles)
		for i0 := 0; i0 < nt; i0 += j.bblk {
			i1 := min(i0+j.bblk, nt)
			// Prefetching the next tile pays when weights stream from memory
			// once; a blocked sweep reads them from cache.
			pf := j.bblk == nt
			for t := t0; t < end; t++ {
				r0 := 32 * t
				switch {
				case j.ids != nil:
					// Logits of the chunk go to scratch (batch, 32·chunk).
					j.tile(t, i0, i1, &scratch[32*(t-t0)], 4*32*j.chunk, pf && t+1 < end)
				case r0+32 <= rows:
					j.tile(t, i0, i1, &j.y[r0], 4*rows, pf && t+1 < end)
				default:
					j.tile(t, i0, i1, &scratch[0], 4*32, false)
					for b := j.bt[i0]; b < j.bt[i1]; b++ {
						copy(j.y[b*rows+r0:(b+1)*rows], scratch[32*b:32*b+rows-r0])
					}
				}
			}
		}
		if j.ids != nil {
			n := min(end*32, rows) - t0*32
			best := j.best[worker*j.batch : (worker+1)*j.batch]
			for b := range j.batch {
				if j.keep != nil && j.keep[b] != nil {
					copy(j.keep[b][t0*32:t0*32+n], scratch[b*32*j.chunk:b*32*j.chunk+n])
				}
				i := argmax(scratch[b*32*j.chunk : b*32*j.chunk+n])
				if v := scratch[b*32*j.chunk+i]; v > best[b].v || (v == best[b].v && t0*32+i < best[b].i) {
					best[b] = maxAt{v, t0*32 + i}
				}
			}
		}
	}
}

// tile computes output rows [32t, 32t+32) for the activation rows of batch
// tiles [i0, i1) into y0 (row b at byte offset b·ystride); if prefetchNext,
// its kernel calls also prefetch tile t+1.
func (j *mmJob) tile(t, i0, i1 int, y0 *float32, ystride int, prefetchNext bool) {
	batch, pk := j.batch, j.pk
	wb := pk.data[t*pk.tileBytes:]
	// Kernel call i of n prefetches its share of the next weight tile.
	pfAt := func(i, n int) (*byte, int) {
		if !prefetchNext {
			return &wb[0], 0
		}
		lo := (pk.tileBytes * i / n) &^ 63
		hi := (pk.tileBytes * (i + 1) / n) &^ 63
		return &pk.data[(t+1)*pk.tileBytes+lo], hi - lo
	}
	yAt := func(b0 int) *float32 {
		return (*float32)(unsafe.Add(unsafe.Pointer(y0), b0*ystride))
	}
	switch j.w.Type {
	case dtype.Q8_0, dtype.Q4_0:
		if j.impl == implAVX512 {
			ks := &q8K512
			if j.w.Type == dtype.Q4_0 {
				ks = &q4K512
			}
			for i := i0; i < i1; i++ {
				b0, nb := j.bt[i], j.bt[i+1]-j.bt[i]
				pf, pfn := pfAt(i-i0, i1-i0)
				ks[nb](&wb[0], &j.xq[32*b0], &j.xm[8*b0], pk.nblk, 32*batch, yAt(b0), ystride, pf, pfn)
			}
		} else {
			// One 16-row group at a time, so its stream of the tile stays
			// in L1 across the batch tiles.
			ks := &q8K2
			if j.w.Type == dtype.Q4_0 {
				ks = &q4K2
			}
			if i1-i0 == 1 && j.bt[i0+1]-j.bt[i0] == 1 {
				// One activation row: the whole tile in one call, read front
				// to back (the 16-row calls below each read every other line).
				b0 := j.bt[i0]
				pf, pfn := pfAt(0, 1)
				if j.w.Type == dtype.Q8_0 {
					q8AVX2r32x1(&wb[0], &j.xq[32*pk.nblk*b0], &j.xm[8*pk.nblk*b0], pk.nblk, 32, yAt(b0), pf, pfn)
				} else {
					q4AVX2r32x1(&wb[0], &j.xq[32*pk.nblk*b0], &j.xm[8*pk.nblk*b0], pk.nblk, 32, yAt(b0), pf, pfn)
				}
				return
			}
			n := 2 * (i1 - i0)
			if j.q8P {
				for g := range 2 {
					for i := i0; i < i1; i++ {
						b0, nb := j.bt[i], j.bt[i+1]-j.bt[i]
						yp := (*float32)(unsafe.Add(unsafe.Pointer(yAt(b0)), 64*g))
						q8K2P[nb](&wb[32*g], &wb[64+64*g], &j.xq[32*pk.nblk*b0], &j.xm[8*pk.nblk*b0], pk.nblk, 32*nb, yp, ystride)
					}
				}
				return
			}
			for g := range 2 {
				for i := i0; i < i1; i++ {
					b0, nb := j.bt[i], j.bt[i+1]-j.bt[i]
					pf, pfn := pfAt(g*(i1-i0)+i-i0, n)
					yp := (*float32)(unsafe.Add(unsafe.Pointer(yAt(b0)), 64*g))
					ks[nb](&wb[32*g], &wb[64+64*g], &j.xq[32*pk.nblk*b0], &j.xm[8*pk.nblk*b0], pk.nblk, 32*nb, yp, ystride, pf, pfn)
				}
			}
		}
	default:
		var ks []fKernel
		var ks2 []f2Kernel
		goff := 64 // byte offset of group 1 within a column (pair)
		switch j.w.Type {
		case dtype.BF16:
			ks, ks2 = bf16K512[:], bf16K2[:]
		case dtype.F16:
			ks, ks2, goff = f16K512[:], f16K2[:], 32
		default:
			ks, ks2 = f32K512[:], f32K2[:]
		}
		for i := i0; i < i1; i++ {
			b0, nb := j.bt[i], j.bt[i+1]-j.bt[i]
			yp := yAt(b0)
			xp := &j.x[b0*j.xrow]
			if j.impl == implAVX512 {
				pf, pfn := pfAt(i-i0, i1-i0)
				ks[nb](&wb[0], xp, 4*j.xrow, pk.k8/8, yp, ystride, pf, pfn)
			} else {
				ks2[nb](&wb[0], xp, 4*j.xrow, pk.k8/8, yp, ystride)
				ks2[nb](&wb[goff], xp, 4*j.xrow, pk.k8/8, (*float32)(unsafe.Add(unsafe.Pointer(yp), 64)), ystride)
			}
		}
	}
}

// quantQ8Blocked is quantQ8AVX512 in Go: it quantizes the row x to Q8_0 with
// dtype.Quantize and writes block i's quants to q[i*qstride:] and its
// {d float32, -off·Σq int32} to m[i*mstride:].
func quantQ8Blocked(x []float32, q []byte, qstride int, m []byte, mstride, off int) {
	var blk [34]byte
	for i := range len(x) / dtype.QK {
		b, _ := dtype.Quantize(dtype.Q8_0, blk[:0], x[i*dtype.QK:(i+1)*dtype.QK])
		copy(q[i*qstride:i*qstride+32], b[2:])
		var sum int32
		for _, v := range b[2:] {
			sum += int32(int8(v))
		}
		d := dtype.F16ToF32(binary.LittleEndian.Uint16(b))
		binary.LittleEndian.PutUint32(m[i*mstride:], *(*uint32)(unsafe.Pointer(&d)))
		binary.LittleEndian.PutUint32(m[i*mstride+4:], uint32(-int32(off)*sum))
	}
}

// The attention half of a forward step: the per-token work before it
// (biases, QK-norm, RoPE, the KV store), the split of attention into
// parallel tasks of several consecutive tokens of one sequence (a prefill
// chunk becomes blocks of queries, each reading the sequence's cache once
// per pass), and the block views of one layer's cache those tasks read.
// It is not the kernels (internal/kernels) nor the owner of the cache
// (internal/kvcache hands out the blocks).
package model

import (
	"slices"

	"github.com/draftd/draftd/internal/kernels"
)

// attnTokens is how many consecutive tokens of one sequence an attention
// task takes. The AVX2 kernel serves up to 8 query rows (tokens × query
// heads of one KV head) from each read of a cache block.
const attnTokens = 8

// rowGrain is how many tokens one claim of the per-token loops takes.
const rowGrain = 8

// attnTask is the attention of tokens [t0, t0+nt) (flat step indices, all of
// sequence seq) for the query heads of KV head g.
type attnTask struct {
	seq, t0, nt, g int
}

// attnPlan holds the attention tasks of one step and the cache views of the
// layer being computed; reused across steps.
type attnPlan struct {
	tasks    []attnTask
	out      []attnTask  // the tasks of the output rows only (see outTokens), for the last layer
	viewOff  []int       // (seqs) index of each sequence's first view
	nblk     []int       // (seqs) blocks covering each sequence's positions
	k16, v16 [][]uint16  // (Σ kvHeads·nblk) block views of one layer, f16 cache
	k8, v8   [][]byte    // the same, q8_0 cache
	k32, v32 [][]float32 // the same, f32 cache
}

// planAttention lists the step's attention tasks, longest context first so
// the dynamic split ends with the short ones.
func (m *Model) planAttention(seqs []*Seq) {
	ap := &m.sc.ap
	ap.tasks = ap.tasks[:0]
	ap.viewOff = growInt(ap.viewOff, len(seqs))
	ap.nblk = growInt(ap.nblk, len(seqs))
	t, views := 0, 0
	for i, s := range seqs {
		n := len(s.Tokens)
		ap.nblk[i] = (s.Pos + n + BlockSize - 1) / BlockSize
		ap.viewOff[i] = views
		views += m.KVHeads * ap.nblk[i]
		for j := 0; j < n; j += attnTokens {
			for g := range m.KVHeads {
				ap.tasks = append(ap.tasks, attnTask{seq: i, t0: t + j, nt: min(attnTokens, n-j), g: g})
			}
		}
		t += n
	}
	ap.out = ap.out[:0]
	t = 0
	for i, s := range seqs {
		n := len(s.Tokens)
		for j := n - outRows(s); j < n; j += attnTokens {
			for g := range m.KVHeads {
				ap.out = append(ap.out, attnTask{seq: i, t0: t + j, nt: min(attnTokens, n-j), g: g})
			}
		}
		t += n
	}
	tok := m.sc.tokPos
	longestFirst := func(a, b attnTask) int {
		return (tok[b.t0] + b.nt) - (tok[a.t0] + a.nt)
	}
	slices.SortStableFunc(ap.tasks, longestFirst)
	slices.SortStableFunc(ap.out, longestFirst)
}

// layerViews points the views at layer li of every sequence's blocks:
// view viewOff[i] + g·nblk[i] + b is block b of KV head g of sequence i.
func (m *Model) layerViews(li int, seqs []*Seq) {
	ap := &m.sc.ap
	seg := BlockSize * m.HeadDim // one (layer, kvHead) segment of a block
	seg8 := BlockSize * kvRowBytes(KVQ8_0, m.HeadDim)
	ap.k16, ap.v16, ap.k32, ap.v32 = ap.k16[:0], ap.v16[:0], ap.k32[:0], ap.v32[:0]
	ap.k8, ap.v8 = ap.k8[:0], ap.v8[:0]
	for i, s := range seqs {
		for g := range m.KVHeads {
			off := (li*m.KVHeads + g) * seg
			off8 := (li*m.KVHeads + g) * seg8
			for _, b := range s.Blocks[:ap.nblk[i]] {
				switch m.kv {
				case KVF32:
					ap.k32 = append(ap.k32, b.K32[off:off+seg])
					ap.v32 = append(ap.v32, b.V32[off:off+seg])
				case KVQ8_0:
					ap.k8 = append(ap.k8, b.K8[off8:off8+seg8])
					ap.v8 = append(ap.v8, b.V8[off8:off8+seg8])
				default:
					ap.k16 = append(ap.k16, b.K[off:off+seg])
					ap.v16 = append(ap.v16, b.V[off:off+seg])
				}
			}
		}
	}
}

// prepQKV applies the biases, QK-norm and RoPE to the step's q and k rows
// and stores every token's k and v in its sequence's blocks at layer li,
// tokens split over the pool.
func (m *Model) prepQKV(li int, seqs []*Seq, T int) {
	c, l, sc := &m.Config, &m.Layer[li], &m.sc
	hd, qd, kvd := c.HeadDim, c.QDim(), c.KVDim()
	m.pool.ForEach(T, rowGrain, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			q := sc.q[t*qd : (t+1)*qd]   // (heads, headDim)
			k := sc.k[t*kvd : (t+1)*kvd] // (kvHeads, headDim)
			v := sc.v[t*kvd : (t+1)*kvd] // (kvHeads, headDim)
			if l.QBias != nil {
				addTo(q, l.QBias)
				addTo(k, l.KBias)
				addTo(v, l.VBias)
			}
			if l.QNorm != nil {
				for h := range c.Heads {
					kernels.RMSNorm(q[h*hd:(h+1)*hd], q[h*hd:(h+1)*hd], l.QNorm, c.RMSEps)
				}
				for h := range c.KVHeads {
					kernels.RMSNorm(k[h*hd:(h+1)*hd], k[h*hd:(h+1)*hd], l.KNorm, c.RMSEps)
				}
			}
			pos := sc.tokPos[t]
			m.rope.RoPE(q, c.Heads, pos)
			m.rope.RoPE(k, c.KVHeads, pos)
			m.storeKV(seqs[sc.tokSeq[t]].Blocks[pos/BlockSize], li, pos%BlockSize, k, v)
		}
	})
}

// attention sets the rows of sc.att (T, heads·headDim) that tasks cover
// (ap.tasks: every new token; ap.out: the output rows) to the causal
// attention of those tokens over their sequence's cache at layer li (their
// own k and v already stored). Tasks are claimed dynamically: contexts
// differ in length.
func (m *Model) attention(li int, seqs []*Seq, scale float32, tasks []attnTask) {
	c, sc := &m.Config, &m.sc
	ap := &sc.ap
	hd, qd := c.HeadDim, c.QDim()
	group := c.Heads / c.KVHeads
	m.layerViews(li, seqs)
	m.pool.ForEach(len(tasks), 1, func(lo, hi int) {
		for _, tk := range tasks[lo:hi] {
			nb := ap.nblk[tk.seq]
			vo := ap.viewOff[tk.seq] + tk.g*nb
			off := tk.t0*qd + tk.g*group*hd
			q := sc.q[off:]     // token i's (group, headDim) rows at i·qd
			out := sc.att[off:] // likewise
			p0 := sc.tokPos[tk.t0]
			switch m.kv {
			case KVF32:
				kernels.AttendCausalF32(out, q, qd, tk.nt, group, hd, ap.k32[vo:vo+nb], ap.v32[vo:vo+nb], BlockSize, p0, scale)
			case KVQ8_0:
				kernels.AttendCausalQ8_0(out, q, qd, tk.nt, group, hd, ap.k8[vo:vo+nb], ap.v8[vo:vo+nb], BlockSize, p0, scale)
			default:
				kernels.AttendCausalF16(out, q, qd, tk.nt, group, hd, ap.k16[vo:vo+nb], ap.v16[vo:vo+nb], BlockSize, p0, scale)
			}
		}
	})
}

// rmsNormRows sets dst row t to RMSNorm(src row t) for T rows of width
// hidden, rows split over the pool.
func (m *Model) rmsNormRows(dst, src, w []float32, T int) {
	h, eps := m.Hidden, m.RMSEps
	m.pool.ForEach(T, rowGrain, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			kernels.RMSNorm(dst[t*h:(t+1)*h], src[t*h:(t+1)*h], w, eps)
		}
	})
}

// siluMulRows sets gate = silu(gate)·up over T rows of width intermediate,
// rows split over the pool.
func (m *Model) siluMulRows(gate, up []float32, T int) {
	n := m.Intermediate
	m.pool.ForEach(T, rowGrain, func(lo, hi int) {
		kernels.SiLUMul(gate[lo*n:hi*n], gate[lo*n:hi*n], up[lo*n:hi*n])
	})
}

// addRows sets dst += src over T rows of width hidden, rows split over the
// pool.
func (m *Model) addRows(dst, src []float32, T int) {
	h := m.Hidden
	m.pool.ForEach(T, 4*rowGrain, func(lo, hi int) {
		addTo(dst[lo*h:hi*h], src[lo*h:hi*h])
	})
}

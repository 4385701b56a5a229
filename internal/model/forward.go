// The forward pass shared by every model family: a ragged batch of
// sequences, each with some new tokens at known positions, through every
// layer at once; the K/V of the new tokens are written into the caller's
// blocks, and the last token of each sequence gets a greedy id. The
// family's optional parts (q/k/v bias, q/k norm) are present as weights or
// nil; nothing here switches on a family.
package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/kernels"
)

// Seq is one sequence's part of a forward step.
type Seq struct {
	Tokens []int    // (n) new token ids, at positions Pos … Pos+n-1
	Pos    int      // number of positions already in Blocks
	Blocks []*Block // cover positions [0, Pos+n); written at [Pos, Pos+n)

	// Next is set to the greedy id (argmax, ties to the lowest id) after the
	// last new token.
	Next int

	// ArgmaxAll asks for the greedy id after every new token, not only the
	// last (the hybrid strategy verifies proposed tokens this way); the ids
	// go into NextAll.
	ArgmaxAll bool
	NextAll   []int // (n) with ArgmaxAll: greedy id after each new token

	// Alts asks for the runner-up after the last new token: Alt is the
	// most likely id other than Next, and PNext and PAlt are the softmax
	// probabilities of Next and Alt. With ArgmaxAll, RowAlts holds the same
	// after every new token (n; its last is Alt, PNext, PAlt). They come
	// from the logits the LM-head argmax kernel compared to choose Next
	// (alts.go), so asking for them never changes a draft.
	Alts    bool
	Alt     int
	PNext   float32
	PAlt    float32
	RowAlts []RowAlt
}

// RowAlt is the runner-up after one new token of an ArgmaxAll sequence
// (see Seq.Alts).
type RowAlt struct {
	Alt         int
	PNext, PAlt float32
}

// ErrInput marks a Forward call with inconsistent sequences (a caller bug or
// unchecked outside input).
var ErrInput = errors.New("model: bad forward input")

// scratch holds the activations of one step, grown as needed.
type scratch struct {
	x, xb    []float32   // (T, hidden)
	q, att   []float32   // (T, heads·headDim)
	k, v     []float32   // (T, kvHeads·headDim)
	gate, up []float32   // (T, intermediate)
	out      []float32   // (R, hidden) last token of each sequence
	tokSeq   []int       // (T) sequence of each token
	tokPos   []int       // (T) absolute position of each token
	ids      []int       // (R) greedy ids
	altY     []float32   // (A, head rows) logits of the output rows of the Alts sequences
	keep     [][]float32 // (R) nil, or the row of altY an output row's logits go to
	altTasks []altTask   // (A) the output row of each row of altY
	row      []float32   // (hidden) embedding row
	ap       attnPlan    // attention tasks and cache views (prefill.go)
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func growInt(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}

// check validates seqs against the model before any work is done; it
// returns the number of new tokens and the end of the furthest position.
func (m *Model) check(seqs []*Seq) (total, end int, err error) {
	for i, s := range seqs {
		n := len(s.Tokens)
		if n == 0 {
			return 0, 0, fmt.Errorf("%w: sequence %d has no new tokens", ErrInput, i)
		}
		if s.Pos < 0 || s.Pos+n > m.MaxContext {
			return 0, 0, fmt.Errorf("%w: sequence %d positions [%d, %d) exceed the context of %d", ErrInput, i, s.Pos, s.Pos+n, m.MaxContext)
		}
		if need := (s.Pos + n + BlockSize - 1) / BlockSize; len(s.Blocks) < need {
			return 0, 0, fmt.Errorf("%w: sequence %d has %d KV blocks for %d positions; need %d", ErrInput, i, len(s.Blocks), s.Pos+n, need)
		}
		for _, b := range s.Blocks {
			if b == nil || !m.ownBlock(b) {
				return 0, 0, fmt.Errorf("%w: sequence %d has a missing or wrong-type KV block", ErrInput, i)
			}
		}
		for j, t := range s.Tokens {
			if t < 0 || t >= m.Vocab {
				return 0, 0, fmt.Errorf("%w: sequence %d token %d = %d is outside the vocabulary [0, %d)", ErrInput, i, j, t, m.Vocab)
			}
		}
		total += n
		end = max(end, s.Pos+n)
	}
	return total, end, nil
}

// Forward runs one step over seqs (see Seq).
func (m *Model) Forward(seqs []*Seq) error { return m.forward(seqs, nil, nil) }

// ErrStopped is ForwardStop's answer when its stop function ended the step.
var ErrStopped = errors.New("model: forward step stopped")

// ForwardStop is Forward that asks stop before each layer and before the LM
// head, and ends the step with ErrStopped as soon as stop reports true (the
// engine stops pre-draft steps this way when a request arrives). A stopped
// step sets no result in seqs; the K/V it wrote at [Pos, Pos+n) for the
// layers it ran are the values any step over the same tokens writes there,
// so running the same step again later gives the same bits as if it had
// never been stopped.
func (m *Model) ForwardStop(seqs []*Seq, stop func() bool) error { return m.forward(seqs, nil, stop) }

// ForwardLogits runs one step over seqs like Forward, but instead of greedy
// ids it writes the logits of every new token of every sequence into logits,
// (total new tokens, vocab) in sequence order: the view in which a model is
// compared with an independent reference (the numpy golden files, a
// converted copy of the same model). The serving path never materialises
// logits.
func (m *Model) ForwardLogits(seqs []*Seq, logits []float32) error {
	if logits == nil {
		return fmt.Errorf("%w: ForwardLogits without a logits buffer", ErrInput)
	}
	return m.forward(seqs, logits, nil)
}

// forward runs one step; allLogits selects ForwardLogits's output.
func (m *Model) forward(seqs []*Seq, allLogits []float32, stop func() bool) error {
	T, end, err := m.check(seqs)
	if err != nil || T == 0 {
		return err
	}
	if allLogits != nil && len(allLogits) != T*m.Vocab {
		return fmt.Errorf("%w: logits buffer of %d floats for %d new tokens; want %d", ErrInput, len(allLogits), T, T*m.Vocab)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ropeUpTo(end)
	c := &m.Config
	sc := &m.sc
	hd, qd, kvd := c.HeadDim, c.QDim(), c.KVDim()
	sc.x = grow(sc.x, T*c.Hidden)
	sc.xb = grow(sc.xb, T*c.Hidden)
	sc.q = grow(sc.q, T*qd)
	sc.att = grow(sc.att, T*qd)
	sc.k = grow(sc.k, T*kvd)
	sc.v = grow(sc.v, T*kvd)
	sc.gate = grow(sc.gate, T*c.Intermediate)
	sc.up = grow(sc.up, T*c.Intermediate)
	sc.tokSeq = growInt(sc.tokSeq, T)
	sc.tokPos = growInt(sc.tokPos, T)

	// Embeddings.
	t := 0
	for i, s := range seqs {
		for j, id := range s.Tokens {
			sc.tokSeq[t], sc.tokPos[t] = i, s.Pos+j
			if err := dtype.Dequantize(m.Embed.Type, sc.x[t*c.Hidden:(t+1)*c.Hidden], m.Embed.Row(id)); err != nil {
				return err
			}
			t++
		}
	}

	// R output rows: the last token of each sequence (every token of an
	// ArgmaxAll sequence, every token for ForwardLogits). The last layer
	// stores K/V for every token but computes the rest (attention output,
	// o_proj, MLP) only for the output rows, compacted to rows [0, R) of the
	// activations: nothing else reads them, and every row is computed by
	// the same operations whatever the other rows are.
	R := T
	if allLogits == nil {
		R = 0
		for _, s := range seqs {
			R += outRows(s)
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	m.planAttention(seqs)
	compacted := R == T
	for li := range m.Layer {
		if stop != nil && stop() {
			return ErrStopped
		}
		l := &m.Layer[li]
		m.rmsNormRows(sc.xb, sc.x, l.AttnNorm, T)
		qkvY, qkvW := [3][]float32{sc.q, sc.k, sc.v}, [3]*kernels.Matrix{l.Q, l.K, l.V}
		kernels.MatMuls(m.pool, qkvY[:], qkvW[:], sc.xb, T) // one activation quantization
		m.prepQKV(li, seqs, T)
		n := T // rows carried through the rest of the layer
		if li == len(m.Layer)-1 && !compacted {
			m.attention(li, seqs, scale, sc.ap.out)
			m.compactOutRows(seqs)
			compacted, n = true, R
		} else {
			m.attention(li, seqs, scale, sc.ap.tasks)
		}
		kernels.MatMul(m.pool, sc.xb, l.O, sc.att, n)
		m.addRows(sc.x, sc.xb, n)
		m.rmsNormRows(sc.xb, sc.x, l.FFNNorm, n)
		guY, guW := [2][]float32{sc.gate, sc.up}, [2]*kernels.Matrix{l.Gate, l.Up}
		kernels.MatMuls(m.pool, guY[:], guW[:], sc.xb, n)
		m.siluMulRows(sc.gate, sc.up, n)
		kernels.MatMul(m.pool, sc.xb, l.Down, sc.gate, n)
		m.addRows(sc.x, sc.xb, n)
	}
	if !compacted { // a model without layers
		m.compactOutRows(seqs)
	}

	if allLogits != nil {
		for t := range T {
			kernels.RMSNorm(sc.x[t*c.Hidden:(t+1)*c.Hidden], sc.x[t*c.Hidden:(t+1)*c.Hidden], m.OutNorm, c.RMSEps)
		}
		kernels.MatMul(m.pool, allLogits, m.Output, sc.x, T)
		return nil
	}
	if stop != nil && stop() {
		return ErrStopped
	}
	// Final norm and LM head on the output rows; greedy ids only: the LM
	// head never materialises the logits.
	sc.out = grow(sc.out, R*c.Hidden)
	for r := range R {
		kernels.RMSNorm(sc.out[r*c.Hidden:(r+1)*c.Hidden], sc.x[r*c.Hidden:(r+1)*c.Hidden], m.OutNorm, c.RMSEps)
	}
	sc.ids = growInt(sc.ids, R)
	head := m.Output
	if m.draftHead != nil {
		head = m.draftHead
	}
	kernels.MatMulArgmaxKeep(m.pool, sc.ids, m.altRows(seqs, R, head.Rows), head, sc.out, R)
	if m.draftHead != nil {
		for i, j := range sc.ids {
			sc.ids[i] = m.draftIDs[j]
		}
	}
	r := 0
	for _, s := range seqs {
		n := outRows(s)
		if s.ArgmaxAll {
			s.NextAll = append(s.NextAll[:0], sc.ids[r:r+n]...)
		}
		r += n
		s.Next = sc.ids[r-1]
	}
	m.alts(seqs, m.draftIDs, head.Rows)
	return nil
}

// compactOutRows moves the output rows (outRows of each sequence, in
// order) of sc.x and sc.att to rows [0, R): row r comes from a token i ≥ r,
// so copying in order never overwrites a row still to be moved.
func (m *Model) compactOutRows(seqs []*Seq) {
	sc := &m.sc
	h, qd := m.Hidden, m.QDim()
	t, r := 0, 0
	for _, s := range seqs {
		t += len(s.Tokens)
		for i := t - outRows(s); i < t; i++ {
			if i != r {
				copy(sc.x[r*h:(r+1)*h], sc.x[i*h:(i+1)*h])
				copy(sc.att[r*qd:(r+1)*qd], sc.att[i*qd:(i+1)*qd])
			}
			r++
		}
	}
}

// outRows is the number of LM-head rows s asks for: 1, or every new token
// with ArgmaxAll.
func outRows(s *Seq) int {
	if s.ArgmaxAll {
		return len(s.Tokens)
	}
	return 1
}

// ownBlock reports whether b holds the model's cache type.
func (m *Model) ownBlock(b *Block) bool {
	switch m.kv {
	case KVF32:
		return b.K32 != nil
	case KVQ8_0:
		return b.K8 != nil
	}
	return b.K != nil
}

// storeKV writes one position's k and v (kvHeads, headDim) into block b at
// offset slot of layer li.
func (m *Model) storeKV(b *Block, li, slot int, k, v []float32) {
	hd := m.HeadDim
	for g := range m.KVHeads {
		off := ((li*m.KVHeads+g)*BlockSize + slot) * hd
		switch m.kv {
		case KVF32:
			copy(b.K32[off:off+hd], k[g*hd:(g+1)*hd])
			copy(b.V32[off:off+hd], v[g*hd:(g+1)*hd])
			continue
		case KVQ8_0:
			rb := kvRowBytes(KVQ8_0, hd)
			o8 := off / hd * rb
			// Quantized once, here, as ggml's quantize_row_q8_0_ref (in place:
			// the slices have exactly rb bytes of capacity).
			dtype.Quantize(dtype.Q8_0, b.K8[o8:o8:o8+rb], k[g*hd:(g+1)*hd])
			dtype.Quantize(dtype.Q8_0, b.V8[o8:o8:o8+rb], v[g*hd:(g+1)*hd])
			continue
		}
		kernels.F32ToF16(b.K[off:off+hd], k[g*hd:(g+1)*hd])
		kernels.F32ToF16(b.V[off:off+hd], v[g*hd:(g+1)*hd])
	}
}

func addTo(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

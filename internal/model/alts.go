// The runner-up of a greedy step (Seq.Alts), for pre-drafting: the engine
// drafts ahead for "the target rejected position i and produced the
// drafter's second choice there", ranked by the drafter's probabilities.
// The LM-head argmax kernel keeps the logits of the rows that ask
// (kernels.MatMulArgmaxKeep): the very values it compared to choose
// Seq.Next, so no second product runs and Next is what it is without Alts.
// Serving without pre-drafting never runs this.
package model

import (
	"math"
	"slices"

	"github.com/draftd/draftd/internal/kernels"
)

// altRows returns, for each of the R LM-head rows of seqs (outRows each, in
// order), nil or the row of sc.altY the argmax kernel stores that row's
// logits into (V floats): every output row of each sequence that asks for
// Alts (one, or each new token's with ArgmaxAll). nil if no sequence asks.
func (m *Model) altRows(seqs []*Seq, R, V int) [][]float32 {
	sc := &m.sc
	A := 0
	for _, s := range seqs {
		if s.Alts {
			A += outRows(s)
		}
	}
	if A == 0 {
		return nil
	}
	sc.altY = grow(sc.altY, A*V)
	if cap(sc.keep) < R {
		sc.keep = make([][]float32, R)
	}
	sc.keep = sc.keep[:R]
	clear(sc.keep)
	a, r := 0, 0
	for _, s := range seqs {
		n := outRows(s)
		if s.Alts {
			for i := range n {
				sc.keep[r+i] = sc.altY[(a+i)*V : (a+i+1)*V]
			}
			a += n
		}
		r += n
	}
	return sc.keep
}

// altTask is one kept LM-head row: its sequence and the new token it
// follows (0 without ArgmaxAll).
type altTask struct {
	s *Seq
	i int
}

// alts fills Alt, PNext and PAlt (and RowAlts with ArgmaxAll) of the
// sequences that ask for them from the logits altRows pointed the kernel at
// (over ids, nil: the identity), once Next and NextAll are set; the rows
// are spread over the pool.
func (m *Model) alts(seqs []*Seq, ids []int, V int) {
	rows := m.sc.altTasks[:0] // (A) in the order of sc.altY's rows
	for _, s := range seqs {
		if !s.Alts {
			continue
		}
		if s.ArgmaxAll {
			s.RowAlts = slices.Grow(s.RowAlts[:0], len(s.Tokens))[:len(s.Tokens)]
		}
		for i := range outRows(s) {
			rows = append(rows, altTask{s, i})
		}
	}
	m.sc.altTasks = rows
	if len(rows) == 0 {
		return
	}
	m.pool.ForEach(len(rows), 1, func(lo, hi int) {
		for a := lo; a < hi; a++ {
			t := rows[a]
			s := t.s
			if !s.ArgmaxAll {
				s.Alt, s.PNext, s.PAlt = altOf(m.sc.altY[a*V:(a+1)*V], ids, s.Next)
				continue
			}
			r := &s.RowAlts[t.i]
			r.Alt, r.PNext, r.PAlt = altOf(m.sc.altY[a*V:(a+1)*V], ids, s.NextAll[t.i])
			if t.i == len(s.Tokens)-1 {
				s.Alt, s.PNext, s.PAlt = r.Alt, r.PNext, r.PAlt
			}
		}
	})
}

// altOf returns the most likely id other than next (ties to the lowest id)
// of the logits y (over ids, ascending; nil: the identity) and the softmax
// probabilities of next and of it. next must be the argmax of y (as the
// kernel chose it), so y[next] is the maximum and no pass looks for it;
// the runner-up is the argmax with next's logit set to -Inf for the
// moment (y is restored). A vocabulary of one id, or one whose other
// logits are all -Inf or NaN, has no runner-up: −1, p(next) = 1; so does a
// maximum that is not finite (no meaningful softmax).
func altOf(y []float32, ids []int, next int) (alt int, pNext, pAlt float32) {
	jn := next
	if ids != nil {
		jn, _ = slices.BinarySearch(ids, next)
	}
	mx := y[jn]
	if math.IsInf(float64(mx), 0) || mx != mx {
		return -1, 1, 0
	}
	y[jn] = float32(math.Inf(-1))
	ja := kernels.Argmax(y)
	y[jn] = mx
	if ja == jn || !(y[ja] > float32(math.Inf(-1))) {
		return -1, 1, 0
	}
	sum := kernels.SumExp(y, mx)
	alt = ja
	if ids != nil {
		alt = ids[ja]
	}
	return alt, float32(1 / sum), float32(math.Exp(float64(y[ja]-mx)) / sum)
}

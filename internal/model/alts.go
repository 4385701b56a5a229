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
// logits into (V floats): the last row of each sequence that asks for Alts
// (none with ArgmaxAll). nil if no sequence asks.
func (m *Model) altRows(seqs []*Seq, R, V int) [][]float32 {
	sc := &m.sc
	A := 0
	for _, s := range seqs {
		if s.Alts && !s.ArgmaxAll {
			A++
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
		r += outRows(s)
		if s.Alts && !s.ArgmaxAll {
			sc.keep[r-1] = sc.altY[a*V : (a+1)*V]
			a++
		}
	}
	return sc.keep
}

// alts fills Alt, PNext and PAlt of the sequences that ask for them from
// the logits altRows pointed the kernel at (over ids, nil: the identity),
// once Next is set; the rows are spread over the pool.
func (m *Model) alts(seqs []*Seq, ids []int, V int) {
	var ask []*Seq // (A) in the order of sc.altY's rows
	for _, s := range seqs {
		if s.Alts && !s.ArgmaxAll {
			ask = append(ask, s)
		}
	}
	if len(ask) == 0 {
		return
	}
	m.pool.ForEach(len(ask), 1, func(lo, hi int) {
		for a := lo; a < hi; a++ {
			s := ask[a]
			s.Alt, s.PNext, s.PAlt = altOf(m.sc.altY[a*V:(a+1)*V], ids, s.Next)
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

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
)

// altSpan: logits more than altSpan below the maximum are left out of the
// softmax sum. Each is below e^-altSpan ≈ 2e-9 of the largest term, so with
// the 152k-id vocabulary of Qwen the sum (and the probabilities) are off by
// less than 3e-4 relative — enough to rank branches — and only the few
// logits near the top cost an exp.
const altSpan = 20

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
// of the logits y (over ids, nil: the identity) and the softmax
// probabilities of next and of it. A vocabulary of one id has no runner-up:
// −1, p(next) = 1.
func altOf(y []float32, ids []int, next int) (alt int, pNext, pAlt float32) {
	id := func(j int) int {
		if ids == nil {
			return j
		}
		return ids[j]
	}
	mx := float32(math.Inf(-1))
	best, bestJ := float32(math.Inf(-1)), -1
	yNext := float32(math.Inf(-1))
	for j, v := range y {
		if v > mx {
			mx = v
		}
		if id(j) == next {
			yNext = v
			continue
		}
		if v > best || (v == best && bestJ >= 0 && id(j) < id(bestJ)) {
			best, bestJ = v, j
		}
	}
	if bestJ < 0 {
		return -1, 1, 0
	}
	lo := mx - altSpan
	var sum float64
	for _, v := range y {
		if v >= lo {
			sum += math.Exp(float64(v - mx))
		}
	}
	p := func(v float32) float32 {
		if v < lo {
			return 0
		}
		return float32(math.Exp(float64(v-mx)) / sum)
	}
	return id(bestJ), p(yNext), p(best)
}

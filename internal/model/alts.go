// The runner-up of a greedy step (Seq.Alts), for pre-drafting: the engine
// drafts ahead for "the target rejected position i and produced the
// drafter's second choice there", ranked by the drafter's probabilities.
// The argmax kernel never materialises logits, so the sequences that ask
// get a second, plain LM-head product over their output rows; the greedy id
// (Seq.Next) is not touched. Serving without pre-drafting never runs this.
package model

import (
	"math"

	"github.com/draftd/draftd/internal/kernels"
)

// altSpan: logits more than altSpan below the maximum are left out of the
// softmax sum. Each is below e^-altSpan ≈ 2e-9 of the largest term, so with
// the 152k-id vocabulary of Qwen the sum (and the probabilities) are off by
// less than 3e-4 relative — enough to rank branches — and only the few
// logits near the top cost an exp.
const altSpan = 20

// alts fills Alt, PNext and PAlt of the sequences that ask for them (none
// with ArgmaxAll), from sc.out, the final-normed output rows (in sequence
// order).
func (m *Model) alts(seqs []*Seq) {
	sc := &m.sc
	h := m.Hidden
	A := 0
	for _, s := range seqs {
		if s.Alts && !s.ArgmaxAll {
			A++
		}
	}
	if A == 0 {
		return
	}
	head, ids := m.Output, []int(nil)
	if m.draftHead != nil {
		head, ids = m.draftHead, m.draftIDs
	}
	V := head.Rows
	sc.altX = grow(sc.altX, A*h)
	sc.altY = grow(sc.altY, A*V)
	a, r := 0, 0
	for _, s := range seqs {
		r += outRows(s)
		if s.Alts && !s.ArgmaxAll {
			copy(sc.altX[a*h:(a+1)*h], sc.out[(r-1)*h:r*h])
			a++
		}
	}
	kernels.MatMul(m.pool, sc.altY, head, sc.altX, A)
	a = 0
	for _, s := range seqs {
		if !s.Alts || s.ArgmaxAll {
			continue
		}
		s.Alt, s.PNext, s.PAlt = altOf(sc.altY[a*V:(a+1)*V], ids, s.Next)
		a++
	}
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

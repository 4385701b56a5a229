// How the engine drives a drafting strategy (internal/draft): model-free
// strategies are answered at once, without the batch; a guided one's
// proposal rides in the sequence's forward step after its last known token,
// the model's greedy token after every position comes back to the strategy,
// and the KV of rejected proposal tokens is dropped by moving the sequence's
// write position back (it is overwritten later and never committed to the
// prefix cache, which only takes positions [0, pos)). The scheduling itself
// (admission, budgets, cancellation) is loop.go's and knows no strategy.
package engine

import (
	"fmt"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/model"
)

// strategyState is the part of a seq that belongs to its strategy.
type strategyState struct {
	drafter draft.Drafter
	pre     model.Seq // the known tokens before the last one, when a proposal follows several
	feed    []int     // (1 + nprop) the last known token, then the proposal
	known   int       // known tokens run in this step (pre + the first of feed)
	nprop   int       // proposal tokens run in this step
	greedy  [1]int    // Accept's argument without a proposal
}

// checkStrategy accepts a strategy the engine can drive.
func checkStrategy(s draft.Strategy) error {
	_, free := s.(draft.ModelFree)
	_, guided := s.(draft.Guided)
	if free == guided {
		return fmt.Errorf("engine: strategy %q must be exactly one of draft.ModelFree and draft.Guided", s.Name())
	}
	return nil
}

// route answers a request of a model-free strategy (g == nil) or returns the
// guided strategy that drafts it in the batch.
func (e *Engine) route(tokens []int, n int, s draft.Strategy) (g draft.Guided, _ Result, _ error) {
	if s == nil {
		s = e.opt.Strategy
	} else if err := checkStrategy(s); err != nil {
		return nil, Result{}, err
	}
	if g, ok := s.(draft.Guided); ok {
		return g, Result{}, nil
	}
	e.mu.RLock()
	closed := e.closed
	e.mu.RUnlock()
	if closed {
		return nil, Result{}, ErrClosed
	}
	d := s.(draft.ModelFree).Draft(tokens, e.Rules().Fit(len(tokens), n))
	e.requests.Add(1)
	return nil, Result{
		Draft: d, Strategy: s.Name(),
		Sources: draft.Stats{FromLookup: len(d), Kept: len(d)},
	}, nil
}

// propose adds s's model.Seq(s) for this step to seqs; batch is the number
// of sequences in the running batch. s's known tokens all
// run in this step (s.ms.Tokens), so its strategy may append a proposal: the
// last known token and the proposal then form s.ms (all their greedy ids
// are needed); the known tokens before it, if any, form s.pre, which comes
// first in the same forward pass (its KV is written before any attention of
// the layer reads it).
func (s *seq) propose(seqs []*model.Seq, batch int) []*model.Seq {
	s.known, s.nprop = len(s.ms.Tokens), 0
	room := s.req.n - (len(s.all) - s.L) - 1 // tokens that may precede the model's own
	var p []int
	if room > 0 {
		if b, ok := s.drafter.(draft.BatchSizer); ok {
			b.Batch(batch)
		}
		p = s.drafter.Propose(room)
	}
	if len(p) == 0 {
		return append(seqs, &s.ms)
	}
	s.nprop = min(len(p), room)
	last := s.pos + s.known - 1
	s.feed = append(append(s.feed[:0], s.all[last]), p[:s.nprop]...)
	if s.known > 1 {
		s.pre = model.Seq{Tokens: s.ms.Tokens[:s.known-1], Pos: s.pos, Blocks: s.lease.Blocks}
		seqs = append(seqs, &s.pre)
	}
	s.ms.Tokens, s.ms.Pos, s.ms.ArgmaxAll = s.feed, last, true
	return append(seqs, &s.ms)
}

// advance takes in the result of a step s ran in: its KV now covers the
// tokens it ran; when it reached the end of its known tokens, the strategy
// decides which proposal tokens stay, the model's token follows them, and
// the write position moves back over the rejected ones.
func (s *seq) advance() {
	if s.nprop == 0 {
		s.pos += len(s.ms.Tokens)
		if s.pos == len(s.all) {
			if !s.take(s.ms.Alts, s.ms.PNext) {
				return // the token is not taken: no KV, not committed
			}
			s.all = append(s.all, s.ms.Next)
			s.greedy[0] = s.ms.Next
			s.drafter.Accept(s.greedy[:])
			if s.req.alts {
				a := Alt{ID: -1, P: -1, PAlt: -1}
				if s.ms.Alts {
					a = Alt{ID: s.ms.Alt, P: s.ms.PNext, PAlt: s.ms.PAlt}
				}
				s.alts = append(s.alts, a)
			}
		}
		return
	}
	g := s.ms.NextAll // (1 + nprop)
	kept := s.drafter.Accept(g)
	kept = max(0, min(kept, s.nprop))
	// The step's tokens are the kept proposals and the model's token
	// g[kept]; row j's distribution chose g[j], so it measured proposal j
	// when the two agree (a trusted proposal the model disagreed with is
	// unmeasured). A bound may stop the chain before any of them.
	take := kept + 1
	for j := range kept + 1 {
		var p float32
		measured := s.ms.Alts && (j == kept || s.feed[1+j] == g[j])
		if measured {
			p = s.ms.RowAlts[j].PNext
		}
		if !s.take(measured, p) {
			take, s.cut = j, kept+1-j
			break
		}
		if s.req.alts {
			a := Alt{ID: -1, P: -1, PAlt: -1}
			if measured {
				r := s.ms.RowAlts[j]
				a = Alt{ID: r.Alt, P: r.PNext, PAlt: r.PAlt}
			}
			s.alts = append(s.alts, a)
		}
	}
	s.all = append(s.all, s.feed[1:1+min(take, kept)]...)
	if take > kept {
		s.all = append(s.all, g[kept])
	}
	// The KV covers the last known token and the kept proposals taken
	// (a stopped chain: every token of s.all).
	s.pos += s.known + min(take, kept)
	s.nprop, s.ms.ArgmaxAll, s.pre.Tokens = 0, false, nil
}

// take reports whether the next draft token, whose drafter probability is
// p (measured: false when the step did not ask for it), stays under the
// request's confidence bound, and records its confidence (the signal the
// request chose, see ConfidenceSignal); false sets s.stopped. A token
// without a measured probability has confidence 1 (chain_prob: the
// product so far) and is always taken.
func (s *seq) take(measured bool, p float32) bool {
	if !s.req.conf {
		return true
	}
	if !measured {
		p = 1
	}
	prev := float32(1)
	if len(s.conf) > 0 {
		prev = s.conf[len(s.conf)-1]
	}
	c := NextConfidence(s.req.signal, prev, p)
	if c < s.req.minConf {
		s.stopped = true
		return false
	}
	s.conf = append(s.conf, c)
	return true
}

// sources reports where the draft's tokens came from.
// A chain stopped inside a step with proposals drops the s.cut tokens
// the strategy counted last (the model's token, then kept proposals); its
// counts of checked proposals (Kept, Rejected, Recalled…) stay.
func (s *seq) sources() draft.Stats {
	if c, ok := s.drafter.(draft.Counter); ok {
		st := c.Stats()
		if s.cut > 0 {
			st.FromModel--
			st.FromLookup -= s.cut - 1
		}
		return st
	}
	return draft.Stats{FromModel: len(s.all) - s.L}
}

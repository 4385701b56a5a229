// Pre-drafting (docs/protocol.md, pre-drafting; --predraft-branches B):
// after a session's draft is answered, the server drafts ahead for the B
// most likely next requests of that session while the engine has slots no
// request needs — "all accepted" (the chain continued past its end: the
// bonus is the drafter's own next token) and "rejected at position i" with
// the drafter's runner-up at i as the bonus — ranked by the drafter's
// probabilities. A next request whose accepted and bonus match a branch is
// answered from it (a hit), or waits for it, promoted to a request's
// priority, where it got to (a partial hit: it has drafted part of its
// tokens; one not started is a miss); every other branch is
// cancelled. Branches are engine background items (engine.Background):
// the engine runs them below every request. A pre-drafted answer is the
// engine's draft for exactly the context the request names, so it is the
// on-demand answer (the engine's drafts depend on the context only). This
// file does not parse requests or touch the session store.

package server

import (
	"container/list"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/draftd/draftd/internal/engine"
)

// Outcomes of an incremental session request with pre-drafting on (the
// outcome label of draftd_predraft_requests_total).
const (
	predraftHit     = "hit"         // answered from a finished branch
	predraftPartial = "partial_hit" // a branch that has drafted part of its tokens, promoted and waited for
	predraftMiss    = "miss"        // branches existed; none matched (or the matching one failed or had not started)
	predraftNone    = "none"        // no branch for the session (none launched, or dropped)
)

// MaxPredraftBranches bounds --predraft-branches.
const MaxPredraftBranches = 64

// Back-off: when none of the last backoffWindow branch sets had drafted a
// token by the time their session's next request came (an engine never
// idle, or a target that verifies at once), pre-drafting only costs — the
// runner-up pass and the launches — and is then asked for one session draft
// in backoffProbe only, until a set's branches run again.
const (
	backoffWindow = 32
	backoffProbe  = 16
)

// predrafter holds the branches of every session that has some.
type predrafter struct {
	b       int // branches per session
	maxSets int // sessions with branches at once (the oldest set is dropped beyond)
	met     *metrics

	mu   sync.Mutex
	sets map[string]*branchSet
	lru  list.List // of *branchSet, front: newest

	// The back-off's window, guarded by mu: whether each of the last n ≤
	// backoffWindow sets had run (ran[i] is the newest), how many of them
	// had, and the drafts skipped since the last probe.
	ran     [backoffWindow]bool
	i, n    int
	runs    int
	skipped int
}

// record notes whether a set's branches had drafted anything when its
// session's next request came.
func (p *predrafter) record(ran bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == backoffWindow && p.ran[p.i] {
		p.runs--
	}
	p.ran[p.i] = ran
	if ran {
		p.runs++
	}
	p.i = (p.i + 1) % backoffWindow
	p.n = min(p.n+1, backoffWindow)
}

// wanted reports whether a session draft should ask for the runner-up and
// launch branches: yes while the window is not full or one of its sets ran,
// else for one draft in backoffProbe (counted as skipped otherwise).
func (p *predrafter) wanted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n < backoffWindow || p.runs > 0 {
		p.skipped = 0
		return true
	}
	if p.skipped++; p.skipped == backoffProbe {
		p.skipped = 0
		return true
	}
	p.met.predraftSkipped.Inc()
	return false
}

// branchSet is the branches drafted after one answer of one session.
type branchSet struct {
	id       string
	n        int    // the n of the answer they follow
	strategy string // its strategy name as the request gave it
	elem     *list.Element
	br       []*branch
}

// branch is one pre-drafted guess of the next request.
type branch struct {
	k     int // accepted
	bonus int // the bonus it guesses; −1 for all-accepted (the draft's first token)
	all   bool
	fit   int // draft tokens the on-demand answer has
	bg    *engine.Background

	cancel context.CancelFunc
	done   chan struct{} // closed when res/err are set
	res    engine.Result
	err    error

	mu       sync.Mutex
	decided  bool // taken or dropped
	used     bool
	finished bool
	met      *metrics
}

func newPredrafter(b, maxSets int, met *metrics) *predrafter {
	p := &predrafter{b: b, maxSets: maxSets, met: met, sets: map[string]*branchSet{}}
	p.lru.Init()
	return p
}

// candidate is a branch before it is chosen.
type candidate struct {
	k, bonus int
	all      bool
	score    float64
}

// rank lists the branches of a draft from their probabilities under the
// drafter: rejected at i with the runner-up as the bonus,
// Π_{j<i} p(draft_j) · p(alt_i); all accepted, Π_j p(draft_j) (the bonus
// is the drafter's own next token, whose probability is not known yet: an
// upper bound). Best first; ties go to all-accepted, then to the smaller i.
// A position without a distribution (ID −1) ends the list there.
func rank(draft []int, alts []engine.Alt) []candidate {
	var out []candidate
	pre := 1.0
	complete := len(alts) == len(draft)
	for i := range min(len(draft), len(alts)) {
		a := alts[i]
		if a.ID < 0 || a.P < 0 {
			complete = false
			break
		}
		if a.PAlt > 0 {
			out = append(out, candidate{k: i, bonus: a.ID, score: pre * float64(a.PAlt)})
		}
		pre *= float64(a.P)
	}
	if complete && pre > 0 {
		out = append(out, candidate{k: len(draft), bonus: -1, all: true, score: pre})
	}
	slices.SortStableFunc(out, func(a, b candidate) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		case a.all != b.all:
			if a.all {
				return -1
			}
			return 1
		}
		return a.k - b.k
	})
	return out
}

// launch drafts ahead for session id, whose context is ctx and whose last
// answer (n asked, strategy as named) is draft with alts. The caller holds
// the session's lock.
func (p *predrafter) launch(b *backend, id string, ctx, draft []int, alts []engine.Alt, n int, strategy string) {
	p.drop(id)
	lim := b.lim
	var chosen []*branch
	var items []BatchItem
	for _, c := range rank(draft, alts) {
		if len(chosen) == p.b {
			break
		}
		var toks []int
		var br *branch
		if c.all {
			// The chain continued: its first token is the bonus guess, the
			// rest the draft after it.
			L := len(ctx) + len(draft)
			if n+1 > lim.MaxDraftLen || !lim.ContextOK(L+1) {
				continue
			}
			toks = append(append(make([]int, 0, L), ctx...), draft...)
			br = &branch{k: len(draft), bonus: -1, all: true, fit: lim.Fit(L+1, n)}
			items = append(items, BatchItem{Tokens: toks, N: lim.Fit(L, n+1), Strategy: strategy})
		} else {
			L := len(ctx) + c.k + 1
			if !lim.ContextOK(L) {
				continue
			}
			toks = append(append(append(make([]int, 0, L), ctx...), draft[:c.k]...), c.bonus)
			br = &branch{k: c.k, bonus: c.bonus, fit: lim.Fit(L, n)}
			items = append(items, BatchItem{Tokens: toks, N: br.fit, Strategy: strategy})
		}
		chosen = append(chosen, br)
	}
	if len(chosen) == 0 {
		return
	}
	set := &branchSet{id: id, n: n, strategy: strategy, br: chosen}
	p.mu.Lock()
	p.sets[id] = set
	set.elem = p.lru.PushFront(set)
	var old []*branchSet
	for p.lru.Len() > p.maxSets {
		o := p.lru.Remove(p.lru.Back()).(*branchSet)
		delete(p.sets, o.id)
		old = append(old, o)
	}
	p.mu.Unlock()
	for _, o := range old {
		o.discard()
	}
	p.met.predraftBranches.WithLabelValues("started").Add(float64(len(chosen)))
	for i, br := range chosen {
		it := items[i]
		// Every confidence, so that a request with a bound is answered
		// from the branch cut where the on-demand draft stops (truncate).
		it.Alts, it.Confidences, br.bg, br.met = true, true, engine.NewBackground(), p.met
		it.Background = br.bg
		bctx, cancel := context.WithCancel(context.Background())
		br.cancel, br.done = cancel, make(chan struct{})
		go br.run(b, bctx, it)
	}
}

// run drafts the branch as a background item of the engine.
func (br *branch) run(b *backend, ctx context.Context, it BatchItem) {
	res, errs, err := b.d.DraftBatch(ctx, []BatchItem{it})
	if err == nil {
		err = errs[0]
	}
	if err == nil {
		br.res = res[0]
		if br.all && len(br.res.Draft) > 0 { // the first token is the bonus guess
			br.bonus = br.res.Draft[0]
			br.res.Draft = br.res.Draft[1:]
			if len(br.res.Alts) > 0 {
				br.res.Alts = br.res.Alts[1:]
			}
			if len(br.res.Confidences) > 0 {
				br.res.Confidences = br.res.Confidences[1:]
			}
		}
	}
	br.err = err
	br.mu.Lock()
	br.finished = true
	br.account()
	br.mu.Unlock()
	close(br.done)
	br.met.predraftBranches.WithLabelValues("finished").Inc()
	br.cancel() // the engine is done with it
}

// account counts the branch's tokens as wasted once it is both finished
// and dropped unused (br.mu held).
func (br *branch) account() {
	if !br.finished || !br.decided || br.used {
		return
	}
	n, _ := br.bg.Drafted()
	br.met.predraftWasted.Add(float64(n))
}

// decide marks the branch taken (used) or dropped, cancelling a dropped
// one.
func (br *branch) decide(used bool) {
	br.mu.Lock()
	br.decided, br.used = true, used
	br.account()
	br.mu.Unlock()
	if !used {
		br.cancel()
	}
}

// matches reports whether the branch is the request "k accepted, then
// bonus"; an all-accepted branch is known only once it has its first
// token.
func (br *branch) matches(k, bonus int) bool {
	if br.k != k {
		return false
	}
	if !br.all {
		return br.bonus == bonus
	}
	select {
	case <-br.done:
		return br.err == nil && br.bonus == bonus
	default:
	}
	n, first := br.bg.Drafted()
	return n > 0 && first == bonus
}

func (set *branchSet) discard() {
	for _, br := range set.br {
		br.decide(false)
	}
}

// drop discards the branches of session id (its context changed or it is
// gone).
func (p *predrafter) drop(id string) {
	p.mu.Lock()
	set := p.sets[id]
	if set != nil {
		delete(p.sets, id)
		p.lru.Remove(set.elem)
	}
	p.mu.Unlock()
	if set != nil {
		set.discard()
	}
}

// take finds the branch of session id for the request "k accepted, then
// bonus" of n tokens by strategy, drops every other branch of the session,
// and returns it with the outcome (hit: finished; partial: started, now
// promoted, wait on its done; a match not started yet is a miss, dropped).
// The caller holds the session's lock.
func (p *predrafter) take(id string, k, bonus, n int, strategy string) (*branch, string) {
	p.mu.Lock()
	set := p.sets[id]
	if set != nil {
		delete(p.sets, id)
		p.lru.Remove(set.elem)
	}
	p.mu.Unlock()
	if set == nil {
		return nil, predraftNone
	}
	ran := false
	for _, br := range set.br {
		if n, _ := br.bg.Drafted(); n > 0 {
			ran = true
		}
	}
	p.record(ran)
	var hit *branch
	if set.n == n && set.strategy == strategy {
		for _, br := range set.br {
			if hit == nil && br.matches(k, bonus) {
				hit = br
			}
		}
	}
	for _, br := range set.br {
		if br != hit {
			br.decide(false)
		}
	}
	if hit == nil {
		return nil, predraftMiss
	}
	select {
	case <-hit.done:
		if hit.err != nil {
			hit.decide(false)
			return nil, predraftMiss
		}
		hit.decide(true)
		return hit, predraftHit
	default:
	}
	if n, _ := hit.bg.Drafted(); n == 0 {
		// Not started: no head start to continue from; drafting on demand
		// is the same work.
		hit.decide(false)
		return nil, predraftMiss
	}
	hit.bg.Promote()
	hit.decide(true)
	return hit, predraftPartial
}

// since is the predraft answer-time observation of one outcome.
func (p *predrafter) since(outcome string, t0 time.Time) {
	p.met.predraftAnswer.WithLabelValues(outcome).Observe(time.Since(t0).Seconds())
}

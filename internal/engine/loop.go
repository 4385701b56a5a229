// The engine goroutine: admission from the queue into the running batch,
// one forward step over every active sequence (chunked ragged prefill plus
// one decode token each), and the bookkeeping of leases in the prefix cache.
// It is the only code that touches the model and the cache. It does not
// validate input (Draft does) or know about HTTP.
package engine

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/kvcache"
	"github.com/draftd/draftd/internal/model"
)

// seq is one admitted request in the running batch.
type seq struct {
	req    *request
	lease  *kvcache.Lease
	all    []int // (L + drafted so far) context, then the draft tokens
	L      int   // context length
	pos    int   // positions whose KV is written: all[:pos]
	cached int   // positions [0, cached) came from the cache
	ms     model.Seq
	alts   []Alt     // (drafted so far) with req.alts
	conf   []float32 // (drafted so far) with req.conf
	// stopped: the chain stopped before a token below req.minConf; cut:
	// tokens of its last step the strategy counted and the stop dropped
	stopped bool
	cut     int
	strategyState
}

// low reports whether s is background work (not promoted): it yields its
// batch slot and its KV to any request.
func (s *seq) low() bool { return s.req.low() }

func (r *request) low() bool { return r.bg != nil && !r.bg.promoted.Load() }

// loopState is what the loop goroutine holds between steps.
type loopState struct {
	active []*seq     // in the batch
	parked []*seq     // background sequences taken out of the batch for a request, KV kept
	pend   []*request // taken from the queue, not yet admitted (see loop)
	// bgStart, bgEnd: the last step that held only background sequences
	// (zero: none yet); a request queued within it waited for it.
	bgStart, bgEnd time.Time
	lastReq        time.Time // end of the last step that held a request
}

func (st *loopState) idle() bool {
	return len(st.active) == 0 && len(st.parked) == 0 && len(st.pend) == 0
}

// loop runs until Close has drained the queue (or aborted it). pend holds
// the drafts taken from the queue and not yet admitted, in order: the head
// waiting for KV space, and the rest of a DraftBatch entry whose first
// drafts were admitted. Background drafts (lowq, parked) run only in the
// slots and KV no request needs; once Close is called they are failed with
// ErrClosed.
func (e *Engine) loop() {
	defer close(e.done)
	st := &loopState{}
	for {
		if st.idle() && e.queue.empty() && e.lowq.empty() {
			select {
			case <-e.queue.ready:
			case <-e.lowq.ready:
			case <-e.abort:
			case <-e.closing:
				if e.queue.empty() && e.lowq.empty() {
					return // closed and drained
				}
			}
		}
		e.holdBackground(st) // before the checks below: Close may end the wait
		select {
		case <-e.abort:
			e.failAll(st, ErrClosed)
			return
		default:
		}
		select {
		case <-e.closing:
			e.failLow(st, ErrClosed)
		default:
		}
		e.iterate(st)
		e.gauges(st)
	}
}

// holdBackground waits while only background work is ready and less than
// Options.BackgroundDelay has passed since the last step that held a
// request; a request (or a promotion) arriving meanwhile ends the wait.
func (e *Engine) holdBackground(st *loopState) {
	for {
		d := e.opt.BackgroundDelay - time.Since(st.lastReq)
		if d <= 0 || !e.onlyBackground(st) {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-e.queue.ready:
		case <-e.lowq.ready:
		case <-t.C:
		case <-e.abort:
			t.Stop()
			return
		case <-e.closing:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// onlyBackground reports whether the work ready is background work alone:
// no request queued, pending, promoted or in the batch, and some background
// draft queued, parked or in the batch.
func (e *Engine) onlyBackground(st *loopState) bool {
	if len(st.pend) > 0 || !e.queue.empty() || e.lowq.anyPromoted() {
		return false
	}
	if holdsRequest(st.active) || holdsRequest(st.parked) {
		return false
	}
	return len(st.active) > 0 || len(st.parked) > 0 || !e.lowq.empty()
}

// gauges publishes the batch's and the background's sizes.
func (e *Engine) gauges(st *loopState) {
	e.active.Store(int64(len(st.active)))
	var low int64
	for _, s := range st.active {
		if s.req.bg != nil {
			low++
		}
	}
	e.lowActive.Store(low + int64(len(st.parked)))
}

// expand appends the drafts of an entry popped from the queue (nil: none).
func expand(pend []*request, r *request) []*request {
	switch {
	case r == nil:
		return pend
	case r.members != nil:
		return append(pend, r.members...)
	}
	return append(pend, r)
}

// pop removes the first of pend (clearing its slot for the collector).
func pop(pend []*request) []*request {
	pend[0] = nil
	if len(pend) == 1 {
		return nil
	}
	return pend[1:]
}

// iterate admits what fits, drops cancelled requests and runs one step. A
// panic outside the forward pass (a bug in the bookkeeping) fails every
// active request and those waiting to be admitted, and resets the cache,
// whose state can no longer be trusted.
func (e *Engine) iterate(st *loopState) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("%w: panic in the engine loop: %v", ErrInternal, p)
			e.log.Error("engine loop panic; failing the batch and resetting the KV cache", "panic", p, "stack", string(debug.Stack()))
			for _, s := range st.active {
				e.respond(s.req, Result{}, err)
			}
			for _, s := range st.parked {
				e.respond(s.req, Result{}, err)
			}
			for _, r := range st.pend {
				e.queued.Add(-1)
				e.respond(r, Result{}, err)
			}
			e.cache.Reset()
			*st = loopState{}
		}
	}()
	e.admit(st)
	st.active = e.dropCancelled(st.active)
	st.parked = e.dropCancelled(st.parked)
	e.gauges(st) // as the step about to run sees them
	if len(st.active) > 0 {
		bg := !holdsRequest(st.active)
		t0 := time.Now()
		st.active = e.step(st.active)
		t1 := time.Now()
		e.observe(func(o Observer) { o.StepTime(t1.Sub(t0), bg) })
		if bg {
			st.bgStart, st.bgEnd = t0, t1
		} else {
			st.lastReq = t1
		}
	}
}

// admit moves requests from pend, then from the queue, into the batch while
// they fit, taking background sequences out of the batch (parked) for their
// slots and ending them (parked first) for their KV. Background work runs
// only when no request waits or runs: then it fills the batch, parked
// sequences first, then the background queue; otherwise every background
// sequence is parked at this step boundary.
func (e *Engine) admit(st *loopState) {
	// Promoted background drafts are requests now, ahead of the queue.
	if pr := e.lowq.takePromoted(); len(pr) > 0 {
		e.lowQueued.Add(-int64(len(pr)))
		e.queued.Add(int64(len(pr)))
		st.pend = append(pr, st.pend...)
	}
	for i := 0; i < len(st.parked); {
		s := st.parked[i]
		if s.low() {
			i++
			continue
		}
		if len(st.active) >= e.opt.MaxBatch && !e.preempt(st) {
			break
		}
		st.parked = slices.Delete(st.parked, i, i+1)
		st.active = append(st.active, s)
	}
	for {
		if len(st.pend) == 0 && e.queue.empty() {
			break
		}
		// A slot first, then the queue's head: a request is taken from
		// the queue only when it can be admitted, so that until then it can
		// still leave it (its caller gone, or --queue-timeout reached).
		if len(st.active) >= e.opt.MaxBatch && !e.preempt(st) {
			return
		}
		if len(st.pend) == 0 {
			r := e.queue.pop()
			if r == nil {
				break // withdrawn since
			}
			if r.enq.After(st.bgStart) && r.enq.Before(st.bgEnd) {
				w := st.bgEnd.Sub(r.enq)
				for range r.size() {
					e.observe(func(o Observer) { o.BackgroundWait(w) })
				}
			}
			st.pend = expand(st.pend, r)
		}
		r := st.pend[0]
		if err := r.ctx.Err(); err != nil {
			st.pend = pop(st.pend)
			e.queued.Add(-1)
			e.respond(r, Result{}, err)
			continue
		}
		L := len(r.tokens)
		lease, err := e.cache.Acquire(r.tokens, L+r.n-1)
		if errors.Is(err, kvcache.ErrNoSpace) {
			if e.evictLow(st) {
				continue // retry with the freed KV
			}
			if len(st.active) > 0 {
				return // wait for a running sequence to free blocks
			}
			err = fmt.Errorf("%w: %v with no active sequence", ErrInternal, err)
		}
		st.pend = pop(st.pend)
		e.queued.Add(-1)
		if errors.Is(err, kvcache.ErrTooLarge) {
			err = inputErr(CodeContextOverKV, "context of %d tokens plus %d draft tokens needs more KV cache than the server's budget of %d bytes holds",
				L, r.n, e.opt.KVCacheBytes)
		}
		if err != nil {
			e.respond(r, Result{}, err)
			continue
		}
		st.active = append(st.active, e.start(r, lease))
	}
	// Background work runs only in steps without requests, so that it
	// never makes a request's step longer: a request in the batch parks it.
	if holdsRequest(st.active) {
		for e.preempt(st) {
		}
		return
	}
	for len(st.active) < e.opt.MaxBatch && len(st.parked) > 0 {
		st.active = append(st.active, st.parked[0])
		st.parked = slices.Delete(st.parked, 0, 1)
	}
	for len(st.active) < e.opt.MaxBatch {
		r := e.lowq.pop()
		if r == nil {
			return
		}
		if err := r.ctx.Err(); err != nil {
			e.lowQueued.Add(-1)
			e.respond(r, Result{}, err)
			continue
		}
		L := len(r.tokens)
		lease, err := e.cache.Acquire(r.tokens, L+r.n-1)
		if errors.Is(err, kvcache.ErrNoSpace) {
			e.lowq.pushFront(r) // background work never frees KV for itself
			return
		}
		e.lowQueued.Add(-1)
		if err != nil {
			e.respond(r, Result{}, err)
			continue
		}
		st.active = append(st.active, e.start(r, lease))
	}
}

// start makes the admitted r, holding lease, a sequence of the batch.
func (e *Engine) start(r *request, lease *kvcache.Lease) *seq {
	L := len(r.tokens)
	all := r.tokens // Draft made it with room for the draft
	r.tokens = nil
	s := &seq{req: r, lease: lease, all: all, L: L, pos: lease.Cached, cached: lease.Cached}
	if rs, ok := r.strat.(draft.Recaller); ok && len(r.recall) > 0 {
		s.drafter = rs.StartRecall(all[:L], r.n, r.recall)
	} else {
		s.drafter = r.strat.Start(all[:L], r.n)
	}
	r.recall = nil
	if s.cached > 0 {
		e.hit.Add(uint64(s.cached))
		e.observe(func(o Observer) { o.CacheHit(s.cached) })
	}
	return s
}

// preempt takes the last background sequence of the batch out of it (its
// KV and state kept, parked, to resume later); false when the batch holds
// requests only.
func (e *Engine) preempt(st *loopState) bool {
	for i := len(st.active) - 1; i >= 0; i-- {
		if s := st.active[i]; s.low() {
			st.active = slices.Delete(st.active, i, i+1)
			s.ms.Tokens = nil
			st.parked = append(st.parked, s)
			e.preempts.Add(1)
			return true
		}
	}
	return false
}

// evictLow ends one background sequence (the last parked one, else the last
// in the batch) with ErrEvicted, its KV committed to the prefix cache
// (where a request may take it over); false when there is none.
func (e *Engine) evictLow(st *loopState) bool {
	take := func(list []*seq) ([]*seq, bool) {
		for i := len(list) - 1; i >= 0; i-- {
			if s := list[i]; s.low() {
				e.cache.Commit(s.lease, s.all, s.pos)
				e.respond(s.req, Result{}, ErrEvicted)
				e.bgEvicts.Add(1)
				return slices.Delete(list, i, i+1), true
			}
		}
		return list, false
	}
	var ok bool
	if st.parked, ok = take(st.parked); ok {
		return true
	}
	st.active, ok = take(st.active)
	return ok
}

// failLow fails every background draft (queued, parked or in the batch)
// with err.
func (e *Engine) failLow(st *loopState, err error) {
	keep := st.active[:0]
	for _, s := range st.active {
		if s.low() {
			e.cache.Commit(s.lease, s.all, s.pos)
			e.respond(s.req, Result{}, err)
			continue
		}
		keep = append(keep, s)
	}
	clear(st.active[len(keep):])
	st.active = keep
	keep = st.parked[:0]
	for _, s := range st.parked {
		if s.low() {
			e.cache.Commit(s.lease, s.all, s.pos)
			e.respond(s.req, Result{}, err)
			continue
		}
		keep = append(keep, s)
	}
	clear(st.parked[len(keep):])
	st.parked = keep
	for r := e.lowq.pop(); r != nil; r = e.lowq.pop() {
		e.lowQueued.Add(-1)
		e.respond(r, Result{}, err)
	}
}

// dropCancelled removes sequences whose caller has gone, keeping the KV
// they computed (it is valid) in the cache.
func (e *Engine) dropCancelled(active []*seq) []*seq {
	out := active[:0]
	for _, s := range active {
		if err := s.req.ctx.Err(); err != nil {
			e.cache.Commit(s.lease, s.all, s.pos)
			e.respond(s.req, Result{}, err)
			continue
		}
		out = append(out, s)
	}
	clear(active[len(out):])
	return out
}

// step runs one forward pass over the batch and returns the sequences still
// running. Sequences in prefill get up to PrefillChunk tokens in total (in
// admission order); decoding sequences get their last drafted token.
func (e *Engine) step(active []*seq) []*seq {
	batch, seqs := e.batch[:0], e.seqs[:0]
	defer func() {
		clear(batch)
		clear(seqs)
		e.batch, e.seqs = batch[:0], seqs[:0]
	}()
	// Requests first: they take the prefill budget before background work.
	slices.SortStableFunc(active, func(a, b *seq) int {
		switch al, bl := a.low(), b.low(); {
		case al == bl:
			return 0
		case bl:
			return -1
		}
		return 1
	})
	budget := e.opt.PrefillChunk
	prefill, decode := 0, 0
	for _, s := range active {
		k := len(s.all) - s.pos // known tokens without KV
		if s.pos >= s.L {
			decode += k // == 1
		} else {
			if budget == 0 {
				continue
			}
			k = min(k, budget)
			budget -= k
			prefill += k
		}
		s.ms.Tokens = s.all[s.pos : s.pos+k]
		s.ms.Pos = s.pos
		s.ms.Blocks = s.lease.Blocks
		batch = append(batch, s)
		if s.pos+k == len(s.all) { // the strategy may add a proposal
			seqs = s.propose(seqs, len(active))
			decode += s.nprop
			s.ms.Alts = s.req.alts || s.req.conf
		} else {
			seqs = append(seqs, &s.ms)
		}
	}
	// A step of pre-draft sequences only is stopped between layers when a
	// request arrives, so that the request waits for at most one layer of
	// it, not the whole step. Not with strategy proposals: their state
	// would have to be undone.
	var stop func() bool
	if bgOnly(batch) {
		stop = func() bool { return !e.queue.empty() }
	}
	if err := e.forward(seqs, stop); errors.Is(err, model.ErrStopped) {
		e.bgStops.Add(1)
		return active // nothing advanced: the next step runs them again
	} else if err != nil {
		e.log.Error("forward step failed; failing its requests", "err", err, "batch", len(batch))
		out := active[:0]
		for _, s := range active {
			if len(s.ms.Tokens) == 0 { // not in this step
				out = append(out, s)
				continue
			}
			e.cache.Release(s.lease)
			e.respond(s.req, Result{}, err)
		}
		clear(active[len(out):])
		return out
	}
	e.steps.Add(1)
	e.prefill.Add(uint64(prefill))
	e.decode.Add(uint64(decode))
	e.observe(func(o Observer) { o.Step(len(batch), prefill, decode) })

	out := active[:0]
	for _, s := range active {
		if len(s.ms.Tokens) > 0 { // ran in this step
			n0 := len(s.all)
			s.advance()
			if s.low() {
				e.bgTokens.Add(uint64(len(s.all) - n0))
			}
			if bg := s.req.bg; bg != nil && len(s.all) > s.L {
				bg.first.Store(int64(s.all[s.L]))
				bg.drafted.Store(int64(len(s.all) - s.L))
			}
		}
		s.ms.Tokens, s.ms.Alts = nil, false
		if len(s.all)-s.L == s.req.n || s.stopped {
			e.finish(s)
			continue
		}
		out = append(out, s)
	}
	clear(active[len(out):])
	return out
}

// forward runs the model, turning a panic into an error.
func (e *Engine) forward(seqs []*model.Seq, stop func() bool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("panic in forward", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: panic in forward step: %v", ErrInternal, p)
		}
	}()
	if err := e.fwd(seqs, stop); err != nil {
		if errors.Is(err, model.ErrStopped) {
			return err
		}
		// model.ErrInput here is the engine's own bug: keep the chain.
		return fmt.Errorf("%w: %w", ErrInternal, err)
	}
	return nil
}

// bgOnly reports whether every sequence of a step's batch is background
// work without strategy proposals (a step that may be stopped).
func bgOnly(batch []*seq) bool {
	return len(batch) > 0 && !slices.ContainsFunc(batch, func(s *seq) bool { return !s.low() || s.nprop != 0 })
}

// holdsRequest reports whether one of seqs is a request's (not background
// work, or background work promoted to a request).
func holdsRequest(seqs []*seq) bool {
	return slices.ContainsFunc(seqs, func(s *seq) bool { return !s.low() })
}

// finish answers a sequence that has its n tokens and keeps the KV of its
// context and of every draft token but the last (never fed) in the cache.
func (e *Engine) finish(s *seq) {
	e.cache.Commit(s.lease, s.all, s.pos)
	e.requests.Add(1)
	res := Result{
		Draft:         append([]int(nil), s.all[s.L:]...),
		PrefillTokens: s.L - s.cached,
		CachedTokens:  s.cached,
		Strategy:      s.req.strat.Name(),
		Sources:       s.sources(),
	}
	if s.req.alts {
		res.Alts = s.alts
	}
	if s.req.conf {
		res.Confidences, res.Stopped = s.conf, s.stopped
	}
	e.respond(s.req, res, nil)
}

// failAll answers every active, parked, pending and queued request and
// background draft with err (on abort).
func (e *Engine) failAll(st *loopState, err error) {
	for _, s := range append(st.active, st.parked...) {
		e.cache.Release(s.lease)
		e.respond(s.req, Result{}, err)
	}
	e.active.Store(0)
	e.lowActive.Store(0)
	for _, r := range st.pend {
		e.queued.Add(-1)
		e.respond(r, Result{}, err)
	}
	for q := e.queue.pop(); q != nil; q = e.queue.pop() {
		for _, r := range expand(nil, q) {
			e.queued.Add(-1)
			e.respond(r, Result{}, err)
		}
	}
	for r := e.lowq.pop(); r != nil; r = e.lowq.pop() {
		e.lowQueued.Add(-1)
		e.respond(r, Result{}, err)
	}
	*st = loopState{}
}

// respond delivers the answer; reply has room for it even when the caller
// has already gone. A second answer (possible only on a panic path that
// fails a batch some of whose requests were already answered) is dropped
// rather than blocking the loop.
func (e *Engine) respond(r *request, res Result, err error) {
	select {
	case r.reply <- reply{res: res, err: err}:
	default:
		e.log.Error("request answered twice; dropping the second answer", "err", err)
	}
}

// observe calls the observer, if any, without letting it break the loop.
func (e *Engine) observe(f func(Observer)) {
	if e.opt.Observer == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("observer panic", "panic", p)
		}
	}()
	f(e.opt.Observer)
}

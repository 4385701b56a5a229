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
	strategyState
}

// loop runs until Close has drained the queue (or aborted it). pend holds
// the drafts taken from the queue and not yet admitted, in order: the head
// waiting for KV space, and the rest of a DraftBatch entry whose first
// drafts were admitted.
func (e *Engine) loop() {
	defer close(e.done)
	var active []*seq
	var pend []*request
	for {
		if len(active) == 0 && len(pend) == 0 {
			r := e.queue.pop()
			if r == nil {
				select {
				case <-e.queue.ready:
					continue
				case <-e.abort:
				case <-e.closing:
					if r = e.queue.pop(); r == nil {
						return // closed and drained
					}
				}
			}
			pend = expand(pend, r)
		}
		select {
		case <-e.abort:
			e.failAll(active, pend, ErrClosed)
			return
		default:
		}
		active, pend = e.iterate(active, pend)
		e.active.Store(int64(len(active)))
	}
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
func (e *Engine) iterate(active []*seq, pend []*request) (_ []*seq, _ []*request) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("%w: panic in the engine loop: %v", ErrInternal, p)
			e.log.Error("engine loop panic; failing the batch and resetting the KV cache", "panic", p, "stack", string(debug.Stack()))
			for _, s := range active {
				e.respond(s.req, Result{}, err)
			}
			for _, r := range pend {
				e.queued.Add(-1)
				e.respond(r, Result{}, err)
			}
			e.cache.Reset()
			// The blank results return (nil, nil): an empty batch, nothing pending.
		}
	}()
	active, pend = e.admit(active, pend)
	active = e.dropCancelled(active)
	if len(active) > 0 {
		active = e.step(active)
	}
	return active, pend
}

// admit moves requests from pend, then from the queue, into the batch while
// they fit.
func (e *Engine) admit(active []*seq, pend []*request) ([]*seq, []*request) {
	for len(active) < e.opt.MaxBatch {
		if len(pend) == 0 {
			r := e.queue.pop()
			if r == nil {
				return active, nil
			}
			pend = expand(pend, r)
		}
		r := pend[0]
		if err := r.ctx.Err(); err != nil {
			pend = pop(pend)
			e.queued.Add(-1)
			e.respond(r, Result{}, err)
			continue
		}
		L := len(r.tokens)
		lease, err := e.cache.Acquire(r.tokens, L+r.n-1)
		if errors.Is(err, kvcache.ErrNoSpace) {
			if len(active) > 0 {
				return active, pend // wait for a running sequence to free blocks
			}
			err = fmt.Errorf("%w: %v with no active sequence", ErrInternal, err)
		}
		pend = pop(pend)
		e.queued.Add(-1)
		if errors.Is(err, kvcache.ErrTooLarge) {
			err = inputErr(CodeContextOverKV, "context of %d tokens plus %d draft tokens needs more KV cache than the server's budget of %d bytes holds",
				L, r.n, e.opt.KVCacheBytes)
		}
		if err != nil {
			e.respond(r, Result{}, err)
			continue
		}
		all := r.tokens // Draft made it with room for the draft
		r.tokens = nil
		s := &seq{req: r, lease: lease, all: all, L: L, pos: lease.Cached, cached: lease.Cached}
		s.drafter = r.strat.Start(all[:L], r.n)
		if s.cached > 0 {
			e.hit.Add(uint64(s.cached))
			e.observe(func(o Observer) { o.CacheHit(s.cached) })
		}
		active = append(active, s)
	}
	return active, pend
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
			seqs = s.propose(seqs)
			decode += s.nprop
		} else {
			seqs = append(seqs, &s.ms)
		}
	}
	if err := e.forward(seqs); err != nil {
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
			s.advance()
		}
		s.ms.Tokens = nil
		if len(s.all)-s.L == s.req.n {
			e.finish(s)
			continue
		}
		out = append(out, s)
	}
	clear(active[len(out):])
	return out
}

// forward runs the model, turning a panic into an error.
func (e *Engine) forward(seqs []*model.Seq) (err error) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("panic in forward", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: panic in forward step: %v", ErrInternal, p)
		}
	}()
	if err := e.fwd(seqs); err != nil {
		// model.ErrInput here is the engine's own bug: keep the chain.
		return fmt.Errorf("%w: %w", ErrInternal, err)
	}
	return nil
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
	e.respond(s.req, res, nil)
}

// failAll answers every active, pending and queued request with err (on
// abort).
func (e *Engine) failAll(active []*seq, pend []*request, err error) {
	for _, s := range active {
		e.cache.Release(s.lease)
		e.respond(s.req, Result{}, err)
	}
	e.active.Store(0)
	for _, r := range pend {
		e.queued.Add(-1)
		e.respond(r, Result{}, err)
	}
	for q := e.queue.pop(); q != nil; q = e.queue.pop() {
		for _, r := range expand(nil, q) {
			e.queued.Add(-1)
			e.respond(r, Result{}, err)
		}
	}
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

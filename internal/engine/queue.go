// queue.go: the engine's wait queue, a bounded FIFO from which a waiting
// Draft withdraws its request at once when it gives up (queue timeout, or a
// caller gone), so that dead requests never hold a place. The loop pops from
// its front. It does not admit, order by priority or know about KV space.

package engine

import (
	"container/list"
	"sync"
)

type queue struct {
	mu    sync.Mutex
	l     list.List // of *request, oldest first
	n     int       // drafts in l (a DraftBatch entry counts its members)
	max   int
	ready chan struct{} // (cap 1) a push since the loop last looked
}

func newQueue(max int) *queue {
	q := &queue{max: max, ready: make(chan struct{}, 1)}
	q.l.Init()
	return q
}

// push appends r; false when its drafts do not fit beside the max waiting.
func (q *queue) push(r *request) bool {
	q.mu.Lock()
	if q.n+r.size() > q.max {
		q.mu.Unlock()
		return false
	}
	q.n += r.size()
	r.elem = q.l.PushBack(r)
	q.mu.Unlock()
	q.wake()
	return true
}

// wake tells the loop to look (a push, or a background draft promoted).
func (q *queue) wake() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// empty reports whether nothing waits.
func (q *queue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.l.Len() == 0
}

// pushFront puts r (popped just now) back at the front, beyond the bound.
func (q *queue) pushFront(r *request) {
	q.mu.Lock()
	q.n += r.size()
	r.elem = q.l.PushFront(r)
	q.mu.Unlock()
}

// anyPromoted reports whether a background draft waiting here was promoted.
func (q *queue) anyPromoted() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for el := q.l.Front(); el != nil; el = el.Next() {
		if !el.Value.(*request).low() {
			return true
		}
	}
	return false
}

// takePromoted removes and returns, oldest first, the background drafts
// whose Promote was called.
func (q *queue) takePromoted() []*request {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*request
	for e := q.l.Front(); e != nil; {
		next := e.Next()
		if r := e.Value.(*request); r.bg != nil && r.bg.promoted.Load() {
			q.l.Remove(e)
			r.elem = nil
			q.n -= r.size()
			out = append(out, r)
		}
		e = next
	}
	return out
}

// pop removes and returns the oldest request; nil when none waits.
func (q *queue) pop() *request {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.l.Front()
	if e == nil {
		return nil
	}
	q.l.Remove(e)
	r := e.Value.(*request)
	r.elem = nil
	q.n -= r.size()
	return r
}

// withdraw removes r if it still waits; false when the loop has taken it.
func (q *queue) withdraw(r *request) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if r.elem == nil {
		return false
	}
	q.l.Remove(r.elem)
	r.elem = nil
	q.n -= r.size()
	return true
}

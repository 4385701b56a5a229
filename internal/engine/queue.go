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
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
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

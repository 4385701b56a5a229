// Pool is the set of worker goroutines that split one kernel call across
// --threads cores. It lives as long as the model that owns it. It is not a
// general task queue: one caller at a time runs one parallel loop.
package kernels

import (
	"runtime"
	"sync"
)

// Pool runs parallel loops on a fixed set of worker goroutines.
type Pool struct {
	n     int
	mu    sync.Mutex // one parallel loop at a time
	work  []chan job
	wg    sync.WaitGroup
	close sync.Once
}

type job struct {
	fn     func(lo, hi int)
	lo, hi int
}

// NewPool starts a pool of n workers (n ≤ 0 means runtime.NumCPU()).
// The calling goroutine counts as one worker, so n-1 goroutines are started.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{n: n, work: make([]chan job, n-1)}
	for i := range p.work {
		ch := make(chan job)
		p.work[i] = ch
		go func() {
			for j := range ch {
				j.fn(j.lo, j.hi)
				p.wg.Done()
			}
		}()
	}
	return p
}

// Threads is the number of workers, including the caller.
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.n
}

// For splits [0, n) into at most Threads() contiguous chunks whose starts are
// multiples of align (align ≥ 1) and runs fn on each chunk concurrently,
// returning when all are done. A nil Pool runs fn(0, n) on the caller.
func (p *Pool) For(n, align int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if p == nil || p.n == 1 || n <= align {
		fn(0, n)
		return
	}
	units := (n + align - 1) / align
	parts := min(p.n, units)
	p.mu.Lock()
	defer p.mu.Unlock()
	lo := 0
	for i := range parts {
		hi := min(n, (units*(i+1)/parts)*align)
		if i == parts-1 {
			hi = n
		}
		if i == parts-1 {
			fn(lo, hi) // the caller does the last chunk
		} else {
			p.wg.Add(1)
			p.work[i] <- job{fn: fn, lo: lo, hi: hi}
		}
		lo = hi
	}
	p.wg.Wait()
}

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.close.Do(func() {
		for _, ch := range p.work {
			close(ch)
		}
	})
}

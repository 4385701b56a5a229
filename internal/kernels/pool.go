// Pool is the set of worker goroutines that split one kernel call across
// --threads cores. It lives as long as the model that owns it. It is not a
// general task queue: one caller at a time runs one parallel loop.
//
// Hand-off is by short busy polling: a worker that has just finished a loop
// spins on an atomic epoch counter for spinFor (a decode step issues
// hundreds of loops a few microseconds apart, and waking a parked goroutine
// costs tens of microseconds), then parks on a channel, so an idle pool
// burns no CPU and a pool between decode steps burns at most spinFor per
// worker. The caller, once its own share is done, polls for the workers
// for at most joinSpinFor and then parks too, woken by the last worker to
// finish: on a shared host a worker the OS has descheduled gets the
// caller's CPU instead of waiting behind a spinning caller. Work inside a
// loop is claimed from atomic counters, so a worker that wakes late finds
// the work already done and costs the caller nothing.
package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// spinFor is how long an idle worker polls before parking; joinSpinFor is
// how long the caller polls for workers still running their share.
const (
	spinFor     = 100 * time.Microsecond
	joinSpinFor = 50 * time.Microsecond
)

// Pool runs parallel loops on a fixed set of worker goroutines.
type Pool struct {
	n  int
	mu sync.Mutex // one parallel loop at a time; guards task, arena and forJob

	task    task
	epoch   atomic.Uint32 // bumped to publish task
	join    atomic.Int32  // workers that joined task | joinClosed once the caller stopped accepting
	done    atomic.Int32  // joined workers that finished task
	closed  atomic.Bool
	workers []*worker
	waiting atomic.Bool   // the caller is parked (or parking) on wake
	wake    chan struct{} // to the caller: a worker finished

	forJob forTask
	arena  arena
	once   sync.Once
}

const joinClosed = 1 << 30

// task is one parallel loop. run is called once by the caller (worker 0) and
// by each worker that joins in time (1 … n-1); it must claim its work from
// shared counters, so any subset of workers may run it, and it must return
// once no work is left to claim.
type task interface{ run(worker int) }

type worker struct {
	parked atomic.Bool
	wake   chan struct{}
}

// NewPool starts a pool of n workers (n ≤ 0 means runtime.NumCPU()).
// The calling goroutine counts as one worker, so n-1 goroutines are started.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{n: n, workers: make([]*worker, n-1), wake: make(chan struct{}, 1)}
	for i := range p.workers {
		w := &worker{wake: make(chan struct{}, 1)}
		p.workers[i] = w
		go p.work(i+1, w)
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

func (p *Pool) work(id int, w *worker) {
	var seen uint32
	for {
		seen = p.wait(w, seen)
		if p.closed.Load() {
			return
		}
		if p.join.Add(1)&joinClosed == 0 {
			p.task.run(id)
			p.done.Add(1)
			if p.waiting.Load() && p.waiting.CompareAndSwap(true, false) {
				p.wake <- struct{}{}
			}
		}
	}
}

// wait returns the first epoch other than seen: it polls for spinFor, then
// parks until the caller wakes it.
func (p *Pool) wait(w *worker, seen uint32) uint32 {
	start := time.Now()
	for i := 1; ; i++ {
		if e := p.epoch.Load(); e != seen {
			return e
		}
		if i%256 == 0 {
			if time.Since(start) > spinFor {
				break
			}
			if i%4096 == 0 {
				runtime.Gosched() // let other goroutines of this P run
			}
		}
	}
	for {
		w.parked.Store(true)
		if e := p.epoch.Load(); e != seen {
			if !w.parked.CompareAndSwap(true, false) {
				<-w.wake // a waker claimed us and is sending
			}
			return e
		}
		<-w.wake
		if e := p.epoch.Load(); e != seen {
			return e
		}
	}
}

// run runs t on all workers and returns when every worker that joined is
// done. p.mu must be held.
func (p *Pool) run(t task) {
	if len(p.workers) == 0 {
		t.run(0)
		return
	}
	p.task = t
	p.done.Store(0)
	p.join.Store(0)
	p.epoch.Add(1)
	for _, w := range p.workers {
		if w.parked.Load() && w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
	t.run(0)
	joined := p.join.Or(joinClosed) // late workers now skip t
	p.awaitWorkers(joined)
	p.task = nil
}

// awaitWorkers returns once joined workers have finished the current task: it
// polls for joinSpinFor, then parks until a finishing worker wakes it.
func (p *Pool) awaitWorkers(joined int32) {
	start := time.Now()
	for i := 1; p.done.Load() != joined; i++ {
		if i%64 != 0 {
			continue
		}
		if time.Since(start) < joinSpinFor {
			continue
		}
		p.waiting.Store(true)
		if p.done.Load() == joined {
			if !p.waiting.CompareAndSwap(true, false) {
				<-p.wake // a worker claimed the wake-up and is sending
			}
			return
		}
		<-p.wake
	}
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
	p.mu.Lock()
	defer p.mu.Unlock()
	units := (n + align - 1) / align
	j := &p.forJob
	*j = forTask{fn: fn, n: n, align: align, units: units, parts: int32(min(p.n, units))}
	p.run(j)
	j.fn = nil
}

// ForEach runs fn over [0, n) in chunks of grain (grain ≥ 1; the last one
// may be shorter) that the workers claim one at a time, returning when all
// are done. Unlike For, the number of chunks is n/grain and a worker that
// is slow to start (or is descheduled by the OS) leaves its share to the
// others, so uneven items, like attention over sequences of different
// lengths, balance out. A nil Pool runs every chunk on the caller.
func (p *Pool) ForEach(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if p == nil || p.n == 1 || n <= grain {
		for lo := 0; lo < n; lo += grain {
			fn(lo, min(n, lo+grain))
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	units := (n + grain - 1) / grain
	j := &p.forJob
	*j = forTask{fn: fn, n: n, align: grain, units: units, parts: int32(units)}
	p.run(j)
	j.fn = nil
}

type forTask struct {
	fn              func(lo, hi int)
	n, align, units int
	parts           int32
	next            atomic.Int32
}

func (j *forTask) run(int) {
	for {
		i := int(j.next.Add(1) - 1)
		if i >= int(j.parts) {
			return
		}
		parts := int(j.parts)
		lo := j.units * i / parts * j.align
		hi := min(j.n, j.units*(i+1)/parts*j.align)
		j.fn(lo, hi)
	}
}

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.closed.Store(true)
		p.epoch.Add(1)
		for _, w := range p.workers {
			if w.parked.CompareAndSwap(true, false) {
				w.wake <- struct{}{}
			}
		}
	})
}

// arena is per-pool scratch memory for kernels, reused across calls so the
// hot path does not allocate. Guarded by Pool.mu.
type arena struct {
	bytes  []byte      // activations quantized or padded for the current call
	worker [][]float32 // per-worker output tiles
	job    any         // the platform's reusable matmul job
}

// alignedBytes returns n bytes of a.bytes, 64-byte aligned, growing it if needed.
func (a *arena) alignedBytes(n int) []byte {
	if cap(a.bytes) < n+64 {
		a.bytes = make([]byte, n+64+n/4)
	}
	b := a.bytes[:cap(a.bytes)]
	off := alignOff(b)
	return b[off : off+n]
}

// workerScratch makes sure each of nworkers workers has n floats of scratch
// and returns them, indexed by worker id. Call it before Pool.run.
func (a *arena) workerScratch(nworkers, n int) [][]float32 {
	if len(a.worker) < nworkers {
		a.worker = append(a.worker, make([][]float32, nworkers-len(a.worker))...)
	}
	for i := range nworkers {
		if cap(a.worker[i]) < n {
			a.worker[i] = make([]float32, n)
		}
		a.worker[i] = a.worker[i][:n]
	}
	return a.worker
}

// alignOff is the offset of the first 64-byte aligned element of b.
func alignOff(b []byte) int { return alignOffN(b, 64) }

// alignOffN is the offset of the first element of b aligned to a (a power of 2).
func alignOffN(b []byte, a uintptr) int {
	if len(b) == 0 {
		return 0
	}
	return int(-uintptr(unsafe.Pointer(&b[0])) & (a - 1))
}

// serialPools lend a one-thread Pool (no goroutines, just an arena) to calls
// made with a nil *Pool.
var serialPools = sync.Pool{New: func() any { return NewPool(1) }}

// holdPool locks p for one kernel call (its arena and job are then the
// caller's), or a lent serial pool when p is nil (lent reports which).
func holdPool(p *Pool) (held *Pool, lent bool) {
	if p == nil {
		p, lent = serialPools.Get().(*Pool), true
	}
	p.mu.Lock()
	return p, lent
}

// releasePool undoes holdPool.
func releasePool(p *Pool, lent bool) {
	p.mu.Unlock()
	if lent {
		serialPools.Put(p)
	}
}

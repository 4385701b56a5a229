package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolFor checks that For covers [0, n) exactly once in at most
// Threads() aligned chunks, for every pool size including nil.
func TestPoolFor(t *testing.T) {
	for _, threads := range []int{0, 1, 2, 3, 5} {
		var p *Pool
		if threads > 0 {
			p = NewPool(threads)
		}
		for _, n := range []int{0, 1, 2, 7, 64, 1000} {
			for _, align := range []int{1, 3, 32} {
				hits := make([]atomic.Int32, n)
				var chunks atomic.Int32
				p.For(n, align, func(lo, hi int) {
					chunks.Add(1)
					if lo%align != 0 || lo >= hi {
						t.Errorf("threads=%d n=%d align=%d: chunk [%d, %d)", threads, n, align, lo, hi)
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if hits[i].Load() != 1 {
						t.Fatalf("threads=%d n=%d align=%d: index %d run %d times", threads, n, align, i, hits[i].Load())
					}
				}
				if c := int(chunks.Load()); c > p.Threads() {
					t.Fatalf("threads=%d n=%d align=%d: %d chunks", threads, n, align, c)
				}
			}
		}
		p.Close()
	}
}

// TestPoolConcurrentCallers runs loops from several goroutines at once on
// one pool (they are serialized) while the GC runs.
func TestPoolConcurrentCallers(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum := make([]int64, 100)
			for it := range 300 {
				if it%50 == 0 {
					runtime.GC()
				}
				p.For(len(sum), 1, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						sum[i] += int64(i + g)
					}
				})
			}
			for i, s := range sum {
				if s != int64(300*(i+g)) {
					t.Errorf("goroutine %d: sum[%d] = %d", g, i, s)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestPoolFewProcs checks that a pool with more workers than GOMAXPROCS
// does not deadlock and covers every loop exactly (a worker spinning
// without yielding would hold the only P; BenchmarkPoolForFewProcs shows
// what a loop costs there).
func TestPoolFewProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := NewPool(4)
	defer p.Close()
	var n atomic.Int64
	for range 200 {
		p.For(64, 1, func(lo, hi int) { n.Add(int64(hi - lo)) })
	}
	if n.Load() != 200*64 {
		t.Fatalf("covered %d indices; want %d", n.Load(), 200*64)
	}
}

// TestPoolParks checks that idle workers stop polling, so an idle pool burns
// no CPU, and that parked workers wake up for the next loop: each chunk of
// that loop waits until all of them have started, which only happens if
// every worker took one (the caller alone runs one chunk at a time).
func TestPoolParks(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	p.For(3, 1, func(lo, hi int) {})
	deadline := time.Now().Add(spinFor + 5*time.Second)
	for {
		parked := 0
		for _, w := range p.workers {
			if w.parked.Load() {
				parked++
			}
		}
		if parked == len(p.workers) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers parked %v after the last loop", parked, len(p.workers), spinFor+5*time.Second)
		}
		time.Sleep(time.Millisecond)
	}
	var started atomic.Int32
	var missing atomic.Int32
	p.For(3, 1, func(lo, hi int) {
		started.Add(1)
		limit := time.Now().Add(10 * time.Second) // a bound, not an ordering
		for started.Load() < 3 {
			if time.Now().After(limit) {
				missing.Store(3 - started.Load())
				return
			}
			runtime.Gosched()
		}
	})
	if m := missing.Load(); m != 0 {
		t.Fatalf("%d of 3 chunks never started concurrently: parked workers did not wake", m)
	}
}

// TestPoolClose checks that Close stops the worker goroutines.
func TestPoolClose(t *testing.T) {
	before := runtime.NumGoroutine()
	p := NewPool(4)
	p.For(8, 1, func(lo, hi int) {})
	p.Close()
	p.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close; %d before NewPool", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkPoolFor is the cost of handing one small loop to the workers.
func BenchmarkPoolFor(b *testing.B) {
	p := NewPool(0)
	defer p.Close()
	var sink atomic.Int64
	for b.Loop() {
		p.For(p.Threads(), 1, func(lo, hi int) { sink.Add(int64(hi - lo)) })
	}
}

// BenchmarkPoolForFewProcs is the cost of a small loop on a pool with
// more workers than GOMAXPROCS (it must not wait for the scheduler's 10 ms
// preemption of a spinning worker).
func BenchmarkPoolForFewProcs(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := NewPool(4)
	defer p.Close()
	var sink atomic.Int64
	for b.Loop() {
		p.For(64, 1, func(lo, hi int) { sink.Add(int64(hi - lo)) })
	}
}

// TestPoolForEach checks that ForEach covers [0, n) exactly once in chunks
// of grain.
func TestPoolForEach(t *testing.T) {
	for _, threads := range []int{0, 1, 3} {
		var p *Pool
		if threads > 0 {
			p = NewPool(threads)
		}
		for _, n := range []int{0, 1, 5, 64, 1001} {
			for _, grain := range []int{0, 1, 4, 100} {
				hits := make([]atomic.Int32, n)
				p.ForEach(n, grain, func(lo, hi int) {
					g := max(grain, 1)
					if lo%g != 0 || hi-lo > g || (hi-lo < g && hi != n) {
						t.Errorf("n=%d grain=%d: chunk [%d, %d)", n, grain, lo, hi)
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if hits[i].Load() != 1 {
						t.Fatalf("threads=%d n=%d grain=%d: index %d run %d times", threads, n, grain, i, hits[i].Load())
					}
				}
			}
		}
		p.Close()
	}
}

package kernels

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/cputime"
)

// BenchmarkPoolGap is a pool used as a decode loop with pauses uses it: one
// small loop, then 1 ms with nothing to do (a step's Go code, a request
// arriving). It reports the CPU time the whole process spends per pause
// beyond the loop itself (cpu-µs/gap): what polling workers take from other
// work on a shared host.
func BenchmarkPoolGap(b *testing.B) {
	p := NewPool(0)
	defer p.Close()
	var sink atomic.Int64
	c0 := cputime.Process()
	for b.Loop() {
		p.For(p.Threads(), 1, func(lo, hi int) { sink.Add(int64(hi - lo)) })
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64((cputime.Process()-c0).Microseconds())/float64(b.N), "cpu-µs/gap")
}

// Benchmark of the engine under a replay-like load: C concurrent
// conversations, each request = previous context + accepted drafts + bonus.
// Uses the shipped tiny model, or the GGUF in $DRAFTD_BENCH_MODEL (e.g. a
// Qwen3-0.6B-shaped random model from `draftd testmodel`). Not a test of
// exactness (engine_test.go is).
package engine

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
)

func BenchmarkReplay(b *testing.B) {
	path := os.Getenv("DRAFTD_BENCH_MODEL")
	if path == "" {
		path = tinyModel
	}
	m := loadModel(b, path)
	for _, conc := range []int{1, 32} {
		b.Run("conc="+strconv.Itoa(conc), func(b *testing.B) {
			e := newEngine(b, m, Options{})
			const n, accept, ctxLen = 16, 4, 512
			maxCtx := min(m.MaxContext-n-accept-2, 4*ctxLen)
			start := min(ctxLen, m.MaxContext/2)
			convs := make([][]int, conc)
			r := rand.New(rand.NewPCG(1, 1))
			for i := range convs {
				convs[i] = randTokens(r, start, m.Vocab)
			}
			var prefill, requests, drafted int
			var mu sync.Mutex
			round := func(count bool) {
				var wg sync.WaitGroup
				for i := range convs {
					wg.Go(func() {
						res, err := e.Draft(context.Background(), convs[i], n)
						if err != nil {
							b.Error(err)
							return
						}
						a := min(accept, len(res.Draft))
						c := append(convs[i], res.Draft[:a]...)
						c = append(c, (res.Draft[0]+1)%m.Vocab)
						if len(c) >= maxCtx {
							c = c[:start]
						}
						convs[i] = c
						if count {
							mu.Lock()
							prefill += res.PrefillTokens
							requests++
							drafted += len(res.Draft)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
			}
			round(false) // prefill the contexts; b.Loop resets the timer
			steps0 := e.Stats().Steps
			for b.Loop() {
				round(true)
			}
			b.ReportMetric(float64(drafted)/b.Elapsed().Seconds(), "drafttok/s")
			b.ReportMetric(float64(prefill)/float64(requests), "prefill/req")
			b.ReportMetric(float64(requests*n)/float64(e.Stats().Steps-steps0), "seqs/step")
		})
	}
}

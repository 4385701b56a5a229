// This file is the synthetic load of `draftd bench`: conversations of random
// token ids that grow the way a speculative-decoding loop grows them, so the
// drafter's serving cost can be measured without a target model or dataset.
// It measures throughput and latency, not acceptance (the drafts are scored
// by a random draw, not by a target).

package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// BenchOptions configures Bench.
type BenchOptions struct {
	Concurrency int           // conversations in flight (≥ 1)
	Requests    int           // total draft requests (≥ 1)
	ContextLen  int           // random tokens that open each conversation (≥ 1)
	N           int           // draft tokens asked per request (≥ 1)
	AcceptMean  float64       // mean accepted draft tokens per step before clipping (≥ 0)
	Vocab       int           // token ids are drawn from [0, Vocab)
	MaxContext  int           // start a new conversation when context + N would pass it; 0 = no limit
	Seed        uint64        // the same seed gives the same conversations
	Timeout     time.Duration // per request; ≤ 0 means none
	Progress    func(requests int)
}

// BenchReport is the outcome of Bench; its JSON form is what
// `draftd bench --json` writes.
type BenchReport struct {
	Backend     string  `json:"backend,omitempty"`
	URL         string  `json:"url,omitempty"`
	Concurrency int     `json:"concurrency"`
	ContextLen  int     `json:"context_len"`
	N           int     `json:"n"`
	AcceptMean  float64 `json:"accept_mean"` // asked for
	Vocab       int     `json:"vocab"`
	Seed        uint64  `json:"seed"`

	Requests      int64          `json:"requests"`
	Failures      int64          `json:"failures"`
	FailureKinds  map[string]int `json:"failure_kinds,omitempty"`
	FirstError    string         `json:"first_error,omitempty"`
	Conversations int64          `json:"conversations"`

	WallS           float64 `json:"wall_s"`
	DraftTokens     int64   `json:"draft_tokens"` // Σ len(draft) returned
	DraftTokensPerS float64 `json:"draft_tokens_per_s"`
	RequestsPerS    float64 `json:"requests_per_s"`
	AcceptedMean    float64 `json:"accepted_mean"` // realized mean accepted per step (after clipping)
	// LatencyMS is over all successful requests; LatencyOpenMS over the
	// first request of each conversation (a full prefill of ContextLen
	// tokens), LatencyNextMS over the others (prefix-cache hits).
	LatencyMS     Latency `json:"latency_ms"`
	LatencyOpenMS Latency `json:"latency_open_ms"`
	LatencyNextMS Latency `json:"latency_next_ms"`
}

// Bench runs the synthetic load against d. Each of Concurrency workers runs
// one conversation at a time and its share of Requests in total:
//
//	ctx = ContextLen random ids in [0, Vocab)
//	repeat:
//	    draft = d.Draft(ctx, N)                 # failed/timed out = empty draft
//	    k = accepted count, drawn as below, at most len(draft)
//	    ctx += draft[:k] + one random bonus id
//
// k is geometric: each draft position is accepted with probability
// q = A/(1+A) given that the ones before it were, so P(k ≥ j) = q^j and
// E[k] = A before clipping to len(draft) (clipping lowers the realized mean
// a little when A is not small against N; AcceptedMean reports it). The
// accepted tokens are the draft's own, so the next request shares the prefix
// the server has just drafted, as in real speculative decoding. A
// conversation whose next context + N would pass MaxContext (so the server
// would shorten the draft or refuse) is replaced by a new one.
//
// When ctx ends, Bench returns the report so far with ctx's error.
func Bench(ctx context.Context, d Drafter, opt BenchOptions) (*BenchReport, error) {
	switch {
	case opt.N < 1:
		return nil, errors.New("n must be at least 1")
	case opt.Requests < 1:
		return nil, errors.New("requests must be at least 1")
	case opt.ContextLen < 1:
		return nil, errors.New("context length must be at least 1")
	case opt.Vocab < 1:
		return nil, errors.New("vocab must be at least 1")
	case opt.AcceptMean < 0:
		return nil, errors.New("accept mean must not be negative")
	case opt.MaxContext > 0 && opt.ContextLen+opt.N > opt.MaxContext:
		return nil, fmt.Errorf("context length %d + n %d exceeds the server's maximum context %d", opt.ContextLen, opt.N, opt.MaxContext)
	}
	conc := max(min(opt.Concurrency, opt.Requests), 1)
	progress := opt.Progress
	if progress == nil {
		progress = func(int) {}
	}
	q := opt.AcceptMean / (1 + opt.AcceptMean)

	type workerTally struct {
		requests, convs, draftTokens, accepted, okSteps int64
		open, next                                      []time.Duration
		fails                                           failures
	}
	tallies := make([]workerTally, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		share := opt.Requests / conc
		if w < opt.Requests%conc {
			share++
		}
		wg.Go(func() {
			t := &tallies[w]
			rng := rand.New(rand.NewPCG(opt.Seed, uint64(w)))
			var conv []int // (len) the conversation's context
			for range share {
				if ctx.Err() != nil {
					return
				}
				opening := conv == nil || (opt.MaxContext > 0 && len(conv)+opt.N > opt.MaxContext)
				if opening {
					conv = make([]int, opt.ContextLen, opt.ContextLen+64*(opt.N+1))
					for i := range conv {
						conv[i] = rng.IntN(opt.Vocab)
					}
					t.convs++
				}
				rctx, cancel := ctx, context.CancelFunc(func() {})
				if opt.Timeout > 0 {
					rctx, cancel = context.WithTimeout(ctx, opt.Timeout)
				}
				t0 := time.Now()
				draft, err := d.Draft(rctx, conv, opt.N)
				lat := time.Since(t0)
				cancel()
				if err != nil && ctx.Err() != nil {
					return
				}
				t.requests++
				if err != nil {
					t.fails.add(err)
					draft = nil
				} else {
					draft = draft[:min(len(draft), opt.N)]
					t.draftTokens += int64(len(draft))
					if opening {
						t.open = append(t.open, lat)
					} else {
						t.next = append(t.next, lat)
					}
				}
				k := 0
				for k < len(draft) && rng.Float64() < q {
					k++
				}
				if err == nil {
					t.accepted += int64(k)
					t.okSteps++
				}
				conv = append(conv, draft[:k]...)
				conv = append(conv, rng.IntN(opt.Vocab))
				progress(1)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)

	r := &BenchReport{
		Concurrency: conc, ContextLen: opt.ContextLen, N: opt.N, AcceptMean: opt.AcceptMean,
		Vocab: opt.Vocab, Seed: opt.Seed, WallS: wall.Seconds(),
	}
	var fails failures
	var open, next, all []time.Duration
	var accepted, okSteps int64
	for _, t := range tallies {
		r.Requests += t.requests
		r.Conversations += t.convs
		r.DraftTokens += t.draftTokens
		accepted += t.accepted
		okSteps += t.okSteps
		open = append(open, t.open...)
		next = append(next, t.next...)
		fails.merge(t.fails)
	}
	all = append(append(all, open...), next...)
	r.Failures, r.FailureKinds, r.FirstError = int64(fails.n), fails.kinds, fails.first
	if okSteps > 0 {
		r.AcceptedMean = float64(accepted) / float64(okSteps)
	}
	if s := wall.Seconds(); s > 0 {
		r.DraftTokensPerS = float64(r.DraftTokens) / s
		r.RequestsPerS = float64(r.Requests) / s
	}
	r.LatencyMS, r.LatencyOpenMS, r.LatencyNextMS = summarize(all), summarize(open), summarize(next)
	return r, ctx.Err()
}

// WriteText prints the report for people.
func (r *BenchReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "bench")
	if r.URL != "" {
		fmt.Fprintf(&b, " against %s (%s)", r.URL, r.Backend)
	}
	fmt.Fprintf(&b, ": concurrency %d, context %d, n=%d, accept mean %.2f, vocab %d, seed %d\n\n",
		r.Concurrency, r.ContextLen, r.N, r.AcceptMean, r.Vocab, r.Seed)
	fmt.Fprintf(&b, "  requests         %d   failures %d   conversations %d\n", r.Requests, r.Failures, r.Conversations)
	if r.Failures > 0 {
		fmt.Fprintf(&b, "  failure kinds    %s\n  first error      %s\n", formatKinds(r.FailureKinds), r.FirstError)
	}
	fmt.Fprintf(&b, "  wall time        %.2f s\n", r.WallS)
	fmt.Fprintf(&b, "  draft tokens/s   %.1f   (%d draft tokens)\n", r.DraftTokensPerS, r.DraftTokens)
	fmt.Fprintf(&b, "  requests/s       %.2f\n", r.RequestsPerS)
	fmt.Fprintf(&b, "  accepted/step    %.3f   (realized)\n", r.AcceptedMean)
	for _, l := range []struct {
		name string
		l    Latency
	}{{"latency (ms)", r.LatencyMS}, {"  opening", r.LatencyOpenMS}, {"  following", r.LatencyNextMS}} {
		fmt.Fprintf(&b, "  %-15s  p50 %.1f   p90 %.1f   p99 %.1f   mean %.1f   max %.1f\n", l.name, l.l.P50, l.l.P90, l.l.P99, l.l.Mean, l.l.Max)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

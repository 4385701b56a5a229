// This file is the replay of docs/evaluation.md, the definition of τ: every sample is
// walked through its continuation, one draft request per verification step,
// samples concurrently and each sample's requests in order. It is not the
// report's formatting (report.go) nor the HTTP clients (client.go).

package eval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ReplayOptions configures Replay.
type ReplayOptions struct {
	N           int           // draft tokens asked per request (≥ 1)
	Concurrency int           // samples replayed at once (≥ 1)
	Timeout     time.Duration // per request; ≤ 0 means none
	// Progress, if set, is called (from many goroutines) with the number of
	// continuation tokens each step covered; they sum to Σ len(continuation).
	Progress func(tokens int)
	// Protocol is how drafts are asked for (docs/protocol.md, batched and incremental drafting): ProtocolFull (""
	// too: POST /draft with the whole context), ProtocolSession or
	// ProtocolBatch; the last two need a *DraftdClient.
	Protocol string
	// SessionPrefix starts every session id (the sample's index follows),
	// so that two replays against one server do not share sessions; at
	// most 100 bytes of [A-Za-z0-9._:-].
	SessionPrefix string
	// TargetLatency is waited after each draft (after each round of
	// ProtocolBatch), as a target's verification would take.
	TargetLatency time.Duration
	// ClipN asks at each step at most the tokens the continuation has left
	// after the step's bonus token, min(N, len(continuation) − p − 1), as a
	// target that stops at the continuation's end (its max_tokens) can use
	// no more; a step with one token left sends no request and scores an
	// empty draft. Not with ProtocolBatch.
	ClipN bool
	// Confidences, when set, asks a *DraftdClient for each draft token's
	// confidence ("confidences":true; ProtocolFull and ProtocolSession)
	// and is called (from many goroutines) with one row per draft token
	// of every successful request.
	Confidences func(ConfidenceRow)

	now func() time.Time // the request latencies' clock (nil: time.Now); tests set it
}

// clock returns the clock of request latencies.
func (o *ReplayOptions) clock() func() time.Time {
	if o.now != nil {
		return o.now
	}
	return time.Now
}

// ConfidenceRow is one draft token of a replay with its confidence: the
// calibration data of docs/performance.md (acceptance against the
// drafter's confidence, per position).
type ConfidenceRow struct {
	Sample     string  `json:"sample"`
	Step       int     `json:"step"`     // the sample's verification step (0: the first)
	Position   int     `json:"position"` // 0-based position in the draft
	Confidence float64 `json:"confidence"`
	Accepted   bool    `json:"accepted"` // the target accepted the token (position < accepted length)
}

// SampleResult is the replay of one sample.
type SampleResult struct {
	ID       string  `json:"id"`
	Tokens   int     `json:"tokens"`
	Steps    int     `json:"steps"`
	Tau      float64 `json:"tau"`
	Failures int     `json:"failures"`
}

// tally accumulates the counters of Report; one per worker, merged at the end.
type tally struct {
	tokens, steps int64
	requests      int64   // draft requests sent (steps less those ClipN left without one)
	draftTokens   int64   // Σ len(draft) over successful requests (after clipping to n)
	hist          []int64 // (n+1) steps by accepted length
	reached       []int64 // (n) steps whose draft had a token at position i
	accepted      []int64 // (n) steps whose draft token at position i was accepted
	latencies     []time.Duration
	warmNS        int64 // Σ latency of the requests after each sample's first (draft_ms_per_accepted)
	acceptedToks  int64 // Σ accepted draft tokens
	fails         failures
	resends       int64 // 409 unknown_session answered by resending the context
}

func newTally(n int) *tally {
	return &tally{hist: make([]int64, n+1), reached: make([]int64, n), accepted: make([]int64, n)}
}

func (t *tally) merge(u *tally) {
	t.tokens += u.tokens
	t.steps += u.steps
	t.requests += u.requests
	t.draftTokens += u.draftTokens
	for i := range t.hist {
		t.hist[i] += u.hist[i]
	}
	for i := range t.reached {
		t.reached[i] += u.reached[i]
		t.accepted[i] += u.accepted[i]
	}
	t.latencies = append(t.latencies, u.latencies...)
	t.warmNS += u.warmNS
	t.acceptedToks += u.acceptedToks
	t.fails.merge(u.fails)
	t.resends += u.resends
}

// errInterrupted marks a sample whose replay was cut short by ctx.
var errInterrupted = errors.New("interrupted")

// Replay replays samples against d as docs/evaluation.md defines:
//
//	p = 0; steps = 0
//	while p < len(continuation):
//	    draft = d.Draft(prompt + continuation[:p], n)   # failed/timed out = empty draft
//	    a = longest common prefix of draft and continuation[p:]
//	    p += a + 1; steps += 1
//
// A failed request (transport error, non-200, unusable answer, or no answer
// within Timeout) is counted in Failures and scored as an empty draft: the
// step accepts 0 tokens and the target contributes its bonus token. A draft
// longer than n is clipped to n.
//
// When ctx ends, Replay stops and returns the report over the samples that
// were replayed to the end, together with ctx's error.
func Replay(ctx context.Context, d Drafter, samples []Sample, opt ReplayOptions) (*Report, error) {
	if opt.N < 1 {
		return nil, errors.New("n must be at least 1")
	}
	conc := max(opt.Concurrency, 1)
	progress := opt.Progress
	if progress == nil {
		progress = func(int) {}
	}
	dc, isDraftd := d.(*DraftdClient)
	switch opt.Protocol {
	case "", ProtocolFull:
	case ProtocolSession, ProtocolBatch:
		if !isDraftd {
			return nil, fmt.Errorf("protocol %s needs a draftd server (one --url, --backend draftd)", opt.Protocol)
		}
	default:
		return nil, fmt.Errorf("unknown protocol %q (want %s, %s or %s)", opt.Protocol, ProtocolFull, ProtocolSession, ProtocolBatch)
	}
	if opt.Confidences != nil && (!isDraftd || opt.Protocol == ProtocolBatch) {
		return nil, errors.New("confidences need a draftd server (one --url, --backend draftd) and protocol full or session")
	}
	if opt.Protocol == ProtocolBatch {
		start := time.Now()
		total := newTally(opt.N)
		results, err := replayBatch(ctx, dc, samples, opt, total, progress)
		return finishReport(total, results, time.Since(start), opt, len(samples)), err
	}

	jobs := make(chan int)
	results := make([]*SampleResult, len(samples)) // index written by one worker
	tallies := make([]*tally, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		tallies[w] = newTally(opt.N)
		wg.Go(func() {
			for i := range jobs {
				s := newTally(opt.N)
				if err := replaySample(ctx, d, samples[i], sessionID(opt.SessionPrefix, i), opt, s, progress); err != nil {
					continue // interrupted: the partial sample is dropped
				}
				tallies[w].merge(s)
				results[i] = &SampleResult{
					ID: samples[i].ID, Tokens: int(s.tokens), Steps: int(s.steps),
					Tau: float64(s.tokens) / float64(s.steps), Failures: s.fails.n,
				}
			}
		})
	}
feed:
	for i := range samples {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	wall := time.Since(start)

	total := newTally(opt.N)
	for _, t := range tallies {
		total.merge(t)
	}
	return finishReport(total, results, wall, opt, len(samples)), ctx.Err()
}

// finishReport makes the report of a replay: the merged tally and the
// samples replayed to the end (nil entries were interrupted).
func finishReport(total *tally, results []*SampleResult, wall time.Duration, opt ReplayOptions, samplesTotal int) *Report {
	r := newReport(total, wall, opt)
	r.SamplesTotal = samplesTotal
	var tauSum float64
	for _, sr := range results {
		if sr != nil {
			r.PerSample = append(r.PerSample, *sr)
			tauSum += sr.Tau
		}
	}
	r.Samples = len(r.PerSample)
	if r.Samples > 0 {
		r.TauMacro = tauSum / float64(r.Samples)
	}
	return r
}

// replaySample replays one sample into t. It returns errInterrupted when
// ctx ends first.
func replaySample(ctx context.Context, d Drafter, s Sample, session string, opt ReplayOptions, t *tally, progress func(int)) error {
	cont := s.Continuation
	full := make([]int, 0, len(s.Prompt)+len(cont)) // (promptLen+contLen) prompt, then continuation
	full = append(append(full, s.Prompt...), cont...)
	dc, _ := d.(*DraftdClient)
	st := sessionState{id: session}
	ask := opt.Confidences != nil
	sent := false // the first request (which carries the prompt) was sent
	for p := 0; p < len(cont); {
		if ctx.Err() != nil {
			return errInterrupted
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if opt.Timeout > 0 {
			rctx, cancel = context.WithTimeout(ctx, opt.Timeout)
		}
		n := opt.N
		if opt.ClipN {
			n = min(n, len(cont)-p-1)
		}
		now := opt.clock()
		t0 := now()
		var draft []int
		var conf []float64
		var err error
		switch {
		case n == 0: // ClipN: one token left, nothing to ask
		case opt.Protocol == ProtocolSession:
			draft, conf, err = sessionStep(rctx, dc, &st, full, len(s.Prompt)+p, n, &t.resends, ask)
		case ask:
			draft, conf, err = dc.draft(rctx, full[:len(s.Prompt)+p], n, true)
		default:
			draft, err = d.Draft(rctx, full[:len(s.Prompt)+p], n)
		}
		lat := now().Sub(t0)
		cancel()
		if err != nil && ctx.Err() != nil {
			return errInterrupted
		}
		if n == 0 {
			lat = -1 // no request: no latency to record
		}
		a := scoreStep(t, draft, err, lat, !sent, cont, p, n, progress)
		if ask && err == nil {
			for i := range min(len(draft), len(conf), n) {
				opt.Confidences(ConfidenceRow{Sample: s.ID, Step: int(t.steps) - 1, Position: i, Confidence: conf[i], Accepted: i < a})
			}
		}
		sent = sent || lat >= 0
		if p+a < len(cont) {
			st.accepted, st.bonus = a, cont[p+a]
		}
		p += a + 1
		if opt.TargetLatency > 0 && p < len(cont) {
			select {
			case <-time.After(opt.TargetLatency):
			case <-ctx.Done():
				return errInterrupted
			}
		}
	}
	t.tokens = int64(len(cont))
	return nil
}

// scoreStep scores one verification step at position p of cont into t and
// returns the accepted length: a failed request (err) is an empty draft, a
// draft is clipped to n; lat < 0 marks a step that sent no request (an
// empty draft with no latency); first marks the sample's first request
// (which carries the prompt), whose latency draft_ms_per_accepted leaves
// out.
func scoreStep(t *tally, draft []int, err error, lat time.Duration, first bool, cont []int, p, n int, progress func(int)) int {
	if lat >= 0 {
		t.requests++
		if !first {
			t.warmNS += int64(lat)
		}
	}
	if err != nil {
		t.fails.add(err)
		draft = nil
	} else if lat >= 0 {
		t.latencies = append(t.latencies, lat)
		draft = draft[:min(len(draft), n)]
		t.draftTokens += int64(len(draft))
	}
	a := commonPrefix(draft, cont[p:])
	t.acceptedToks += int64(a)
	t.hist[a]++
	for i := range draft {
		t.reached[i]++
	}
	for i := range a {
		t.accepted[i]++
	}
	progress(min(a+1, len(cont)-p))
	t.steps++
	return a
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

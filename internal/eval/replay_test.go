package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

const x = 999 // a token no continuation in these tests contains

// want is what a replay must report; every number is worked out by hand or
// by the independent simulation in TestReplayRandom.
type want struct {
	tokens, steps, failures, draftTokens int64
	tau, tauMacro                        float64
	hist, reached, accepted              []int64
	rates                                []float64
	kinds                                map[string]int
	okRequests                           int   // requests with a latency
	requests                             int64 // when not all steps sent one (ClipN); 0: steps
}

func check(t *testing.T, r *Report, w want) {
	t.Helper()
	wantReq := w.requests
	if wantReq == 0 {
		wantReq = w.steps
	}
	if r.Tokens != w.tokens || r.Steps != w.steps || r.Requests != wantReq || r.Failures != w.failures {
		t.Errorf("tokens/steps/requests/failures: have %d/%d/%d/%d; want %d/%d/%d/%d",
			r.Tokens, r.Steps, r.Requests, r.Failures, w.tokens, w.steps, wantReq, w.failures)
	}
	if r.DraftTokens != w.draftTokens {
		t.Errorf("draft tokens: have %d; want %d", r.DraftTokens, w.draftTokens)
	}
	if math.Abs(r.Tau-w.tau) > 1e-12 || math.Abs(r.TauMacro-w.tauMacro) > 1e-12 {
		t.Errorf("tau, tau_macro: have %v, %v; want %v, %v", r.Tau, r.TauMacro, w.tau, w.tauMacro)
	}
	if !reflect.DeepEqual(r.AcceptHist, w.hist) {
		t.Errorf("accept_hist: have %v; want %v", r.AcceptHist, w.hist)
	}
	if !reflect.DeepEqual(r.PositionReached, w.reached) || !reflect.DeepEqual(r.PositionAccepted, w.accepted) {
		t.Errorf("position reached/accepted: have %v/%v; want %v/%v", r.PositionReached, r.PositionAccepted, w.reached, w.accepted)
	}
	if w.rates != nil && !reflect.DeepEqual(r.AcceptByPosition, w.rates) {
		t.Errorf("accept_by_position: have %v; want %v", r.AcceptByPosition, w.rates)
	}
	if w.kinds != nil && !reflect.DeepEqual(r.FailureKinds, w.kinds) {
		t.Errorf("failure kinds: have %v; want %v", r.FailureKinds, w.kinds)
	}
	if w.okRequests > 0 && (r.LatencyMS.P50 <= 0 || r.LatencyMS.P99 < r.LatencyMS.P50) {
		t.Errorf("latency: have %+v; want 0 < p50 ≤ p99", r.LatencyMS)
	}
}

// scripted is a two-sample dataset whose every draft is fixed (n = 4).
//
//	A: continuation 10 11 12 13 14
//	   p=0 draft 10 11 x x   → a=2, p=3
//	   p=3 draft x x x       → a=0, p=4
//	   p=4 draft 14 x x x    → a=1, p=6     3 steps, τ_A = 5/3
//	B: continuation 20 21 22
//	   p=0 draft 20 21 22 x x x (6 > n: clipped to 4) → a=3   1 step, τ_B = 3
//
// hist over a = 2,0,1,3: [1 1 1 1 0]; drafts of length 4,3,4,4 reach
// positions 0..3 = 4,4,4,3 times; a > i for i = 0..3: 3,2,1,0.
func scripted() ([]Sample, map[string]reply, want) {
	a := Sample{ID: "A", Prompt: []int{1}, Continuation: []int{10, 11, 12, 13, 14}}
	b := Sample{ID: "B", Prompt: []int{2}, Continuation: []int{20, 21, 22}}
	script := map[string]reply{
		key(ctxOf(a, 0)): {draft: []int{10, 11, x, x}},
		key(ctxOf(a, 3)): {draft: []int{x, x, x}},
		key(ctxOf(a, 4)): {draft: []int{14, x, x, x}},
		key(ctxOf(b, 0)): {draft: []int{20, 21, 22, x, x, x}},
	}
	return []Sample{a, b}, script, want{
		tokens: 8, steps: 4, draftTokens: 4 + 3 + 4 + 4,
		tau: 2, tauMacro: (5.0/3 + 3) / 2,
		hist:     []int64{1, 1, 1, 1, 0},
		reached:  []int64{4, 4, 4, 3},
		accepted: []int64{3, 2, 1, 0},
		rates:    []float64{0.75, 0.5, 0.25, 0},
		kinds:    map[string]int{}, okRequests: 4,
	}
}

func TestReplayScripted(t *testing.T) {
	for _, backend := range []string{BackendDraftd, BackendLlamaServer} {
		for _, conc := range []int{1, 2, 8} {
			t.Run(fmt.Sprintf("%s/concurrency=%d", backend, conc), func(t *testing.T) {
				samples, script, w := scripted()
				fake, srv := newFakeServer(t, 4, script)
				hc := NewHTTPClient(conc)
				d, err := NewDrafter(backend, hc, srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				if err := CheckHealth(t.Context(), hc, srv.URL); err != nil {
					t.Fatal(err)
				}
				r, err := Replay(t.Context(), d, samples, ReplayOptions{N: 4, Concurrency: conc, Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				w.kinds = nil // nil map when nothing failed
				check(t, r, w)
				if r.Samples != 2 || r.SamplesTotal != 2 {
					t.Errorf("samples: have %d of %d; want 2 of 2", r.Samples, r.SamplesTotal)
				}
				for k, c := range fake.seen {
					if c != 1 {
						t.Errorf("context %s: have %d requests; want 1", k, c)
					}
				}
				wantPer := []SampleResult{{ID: "A", Tokens: 5, Steps: 3, Tau: 5.0 / 3}, {ID: "B", Tokens: 3, Steps: 1, Tau: 3}}
				if !reflect.DeepEqual(r.PerSample, wantPer) {
					t.Errorf("per sample: have %+v; want %+v", r.PerSample, wantPer)
				}
			})
		}
	}
}

// TestReplayClipN replays scripted() with ClipN (n = 4): each step asks
// min(4, tokens left − 1) and the step with one token left asks nothing.
//
//	A: p=0 asks 4: 10 11 x x → a=2, p=3; p=3 asks 1: x → a=0, p=4;
//	   p=4 asks nothing → a=0, p=5               3 steps, 2 requests
//	B: p=0 asks 2: 20 21 (the script's 6 clipped) → a=2, p=3   1 step
//
// hist over a = 2,0,0,2: [2 0 2 0 0]; drafts of length 4,1,2 reach positions
// 0..3 = 3,2,1,1 times; accepted at 0..3: 2,2,0,0.
func TestReplayClipN(t *testing.T) {
	samples, script, _ := scripted()
	fake, srv := newFakeServer(t, 4, script)
	fake.upToN = true
	d, _ := NewDrafter(BackendDraftd, NewHTTPClient(2), srv.URL)
	r, err := Replay(t.Context(), d, samples, ReplayOptions{N: 4, Concurrency: 2, Timeout: 5 * time.Second, ClipN: true})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, want{
		tokens: 8, steps: 4, requests: 3, draftTokens: 4 + 1 + 2,
		tau: 2, tauMacro: (5.0/3 + 3) / 2,
		hist:       []int64{2, 0, 2, 0, 0},
		reached:    []int64{3, 2, 1, 1},
		accepted:   []int64{2, 2, 0, 0},
		okRequests: 3,
	})
	a, b := samples[0], samples[1]
	wantAsked := map[string]int{key(ctxOf(a, 0)): 4, key(ctxOf(a, 3)): 1, key(ctxOf(b, 0)): 2}
	if !reflect.DeepEqual(fake.asked, wantAsked) {
		t.Errorf("n asked per context: have %v; want %v", fake.asked, wantAsked)
	}
}

// TestReplayFailures checks that a 500, a request that hangs past the
// timeout, a connection that cannot be made and an unusable answer all score
// as an empty draft (accepted 0, the target's bonus token still advances)
// and are counted by kind.
func TestReplayFailures(t *testing.T) {
	// C: continuation 30 31 32 33
	//   p=0 500              → a=0, p=1  (failure)
	//   p=1 hangs            → a=0, p=2  (failure: timeout)
	//   p=2 draft 32 x       → a=1, p=4  3 steps, τ_C = 4/3
	c := Sample{ID: "C", Prompt: []int{3}, Continuation: []int{30, 31, 32, 33}}
	// D: continuation 40 41; p=0 unscripted → 500, p=1 draft 41 → a=1, p=3.
	d := Sample{ID: "D", Prompt: []int{4}, Continuation: []int{40, 41}}
	script := map[string]reply{
		key(ctxOf(c, 0)): {status: 500},
		key(ctxOf(c, 1)): {hang: true},
		key(ctxOf(c, 2)): {draft: []int{32, x}},
		key(ctxOf(d, 1)): {draft: []int{41}},
	}
	_, srv := newFakeServer(t, 4, script)
	dr, _ := NewDrafter(BackendDraftd, NewHTTPClient(2), srv.URL)
	r, err := Replay(t.Context(), dr, []Sample{c, d}, ReplayOptions{N: 4, Concurrency: 2, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, want{
		tokens: 6, steps: 5, failures: 3, draftTokens: 2 + 1,
		tau: 6.0 / 5, tauMacro: (4.0/3 + 1) / 2,
		hist:     []int64{3, 2, 0, 0, 0},
		reached:  []int64{2, 1, 0, 0},
		accepted: []int64{2, 0, 0, 0},
		rates:    []float64{1, 0, 0, 0},
		kinds:    map[string]int{"HTTP 500": 2, "timeout": 1},
	})

	t.Run("connection refused", func(t *testing.T) {
		_, dead := newFakeServer(t, 4, nil)
		dead.Close()
		dr, _ := NewDrafter(BackendDraftd, NewHTTPClient(1), dead.URL)
		r, err := Replay(t.Context(), dr, []Sample{d}, ReplayOptions{N: 4, Concurrency: 1, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		check(t, r, want{tokens: 2, steps: 2, failures: 2, tau: 1, tauMacro: 1,
			hist: []int64{2, 0, 0, 0, 0}, reached: make([]int64, 4), accepted: make([]int64, 4),
			kinds: map[string]int{"connection": 2}})
		if err := CheckHealth(t.Context(), NewHTTPClient(1), dead.URL); err == nil {
			t.Errorf("CheckHealth on a closed server: have nil error; want one")
		}
	})
}

// TestDrafterErrors checks the errors a Drafter returns for answers it
// cannot use.
func TestDrafterErrors(t *testing.T) {
	_, srv := newFakeServer(t, 4, map[string]reply{"[7]": {status: 400}, "[8]": {null: true}})
	tests := []struct {
		name    string
		backend string
		tokens  []int
		status  int
		code    string
		bad     bool
	}{
		{"draftd 400", BackendDraftd, []int{7}, 400, "scripted", false},
		{"draftd unscripted", BackendDraftd, []int{9}, 500, "unscripted", false},
		{"draftd null draft", BackendDraftd, []int{8}, 0, "", true},
		{"llama 400", BackendLlamaServer, []int{7}, 400, "scripted", false},
		{"llama no tokens", BackendLlamaServer, []int{8}, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := NewDrafter(tt.backend, NewHTTPClient(1), srv.URL)
			_, err := d.Draft(t.Context(), tt.tokens, 4)
			var se *StatusError
			switch {
			case tt.bad:
				if !errors.Is(err, ErrBadResponse) {
					t.Errorf("have %v; want ErrBadResponse", err)
				}
			case !errors.As(err, &se):
				t.Errorf("have %v; want a *StatusError", err)
			case se.Status != tt.status || se.Code != tt.code:
				t.Errorf("have status %d code %q; want %d %q", se.Status, se.Code, tt.status, tt.code)
			}
		})
	}
}

// TestReplayRandom replays many random samples at concurrency 8 against a
// server whose drafts follow a per-step rule, and compares with a direct
// sequential simulation of docs/evaluation.md.
func TestReplayRandom(t *testing.T) {
	const n = 6
	rng := rand.New(rand.NewPCG(7, 8))
	var samples []Sample
	script := map[string]reply{}
	type step struct{ draftLen, a int }
	var steps [][]step // per sample, what the simulation expects
	for i := range 60 {
		s := Sample{ID: "s", Prompt: []int{1000 + i, rng.IntN(50)}}
		for range 1 + rng.IntN(40) {
			s.Continuation = append(s.Continuation, rng.IntN(50))
		}
		samples = append(samples, s)
		var ss []step
		for p := 0; p < len(s.Continuation); {
			k := rng.IntN(n + 3) // may be > n or > remaining
			extra := rng.IntN(3)
			rep := reply{}
			if rng.IntN(10) == 0 {
				rep.status = 503
			} else {
				for j := 0; j < k && p+j < len(s.Continuation); j++ {
					rep.draft = append(rep.draft, s.Continuation[p+j])
				}
				for range extra {
					rep.draft = append(rep.draft, x)
				}
			}
			script[key(ctxOf(s, p))] = rep
			// The simulation: clip to n, then the longest common prefix.
			dl := min(len(rep.draft), n)
			a := 0
			for a < dl && p+a < len(s.Continuation) && rep.draft[a] == s.Continuation[p+a] {
				a++
			}
			if rep.status != 0 {
				dl, a = -1, 0
			}
			ss = append(ss, step{dl, a})
			p += a + 1
		}
		steps = append(steps, ss)
	}
	w := want{hist: make([]int64, n+1), reached: make([]int64, n), accepted: make([]int64, n)}
	var macro float64
	for i, ss := range steps {
		w.tokens += int64(len(samples[i].Continuation))
		w.steps += int64(len(ss))
		macro += float64(len(samples[i].Continuation)) / float64(len(ss))
		for _, st := range ss {
			w.hist[st.a]++
			if st.draftLen < 0 {
				w.failures++
				continue
			}
			w.draftTokens += int64(st.draftLen)
			for j := range st.draftLen {
				w.reached[j]++
			}
			for j := range st.a {
				w.accepted[j]++
			}
		}
	}
	w.tau = float64(w.tokens) / float64(w.steps)
	w.tauMacro = macro / float64(len(samples))
	w.kinds = map[string]int{"HTTP 503": int(w.failures)}

	_, srv := newFakeServer(t, n, script)
	d, _ := NewDrafter(BackendDraftd, NewHTTPClient(8), srv.URL)
	var progressed atomic.Int64
	r, err := Replay(t.Context(), d, samples, ReplayOptions{N: n, Concurrency: 8, Timeout: 5 * time.Second,
		Progress: func(k int) { progressed.Add(int64(k)) }})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, w)
	if progressed.Load() != w.tokens {
		t.Errorf("progress: have %d tokens; want %d", progressed.Load(), w.tokens)
	}
}

// TestReplayInterrupted cancels the replay while sample 1 is in flight: the
// report covers sample 0 only and the cancelled request is not a failure.
func TestReplayInterrupted(t *testing.T) {
	samples, script, _ := scripted()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	b := samples[1]
	script[key(ctxOf(b, 0))] = reply{hang: true}
	fake, srv := newFakeServer(t, 4, script)
	d, _ := NewDrafter(BackendDraftd, NewHTTPClient(1), srv.URL)
	go func() {
		// Sample A takes 3 requests; cancel once B's request hangs.
		select {
		case <-fake.hung:
			cancel()
		case <-ctx.Done():
		}
	}()
	r, err := Replay(ctx, d, samples, ReplayOptions{N: 4, Concurrency: 1, Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("have error %v; want context.Canceled", err)
	}
	if r.Samples != 1 || r.Failures != 0 || r.Steps != 3 {
		t.Errorf("samples, failures, steps: have %d, %d, %d; want 1, 0, 3", r.Samples, r.Failures, r.Steps)
	}
}

func TestReportJSON(t *testing.T) {
	samples, script, _ := scripted()
	_, srv := newFakeServer(t, 4, script)
	d, _ := NewDrafter(BackendDraftd, NewHTTPClient(1), srv.URL)
	r, err := Replay(t.Context(), d, samples, ReplayOptions{N: 4, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.Project(8000)
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tau", "tau_macro", "tokens", "steps", "requests", "failures", "wall_s",
		"latency_ms", "accept_hist", "accept_by_position", "projection"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q: missing from %s", k, data)
		}
	}
	lat, _ := m["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_ms.%s: missing", k)
		}
	}
	if h, _ := m["accept_hist"].([]any); len(h) != 5 {
		t.Errorf("accept_hist: have %d entries; want n+1 = 5", len(h))
	}
	if p, _ := m["accept_by_position"].([]any); len(p) != 4 {
		t.Errorf("accept_by_position: have %d entries; want n = 4", len(p))
	}
	if r.Projection.Requests != 4000 || math.Abs(r.Projection.WallS-r.WallS*1000) > 1e-9*r.WallS*1000 {
		t.Errorf("projection: have %+v; want 4000 requests and wall_s ×1000 (%v)", r.Projection, r.WallS*1000)
	}
}

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		ds := make([]time.Duration, len(v))
		for i, x := range v {
			ds[i] = time.Duration(x) * time.Millisecond
		}
		return ds
	}
	seq := make([]int, 100)
	for i := range seq {
		seq[i] = 100 - i // 100..1, unsorted
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", ms(7), Latency{7, 7, 7, 7, 7}},
		{"two", ms(20, 10), Latency{10, 20, 20, 15, 20}},
		{"1..100", ms(seq...), Latency{50, 90, 99, 50.5, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if have := summarize(tt.in); have != tt.want {
				t.Errorf("have %+v; want %+v", have, tt.want)
			}
		})
	}
}

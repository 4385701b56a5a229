// Tests of pre-drafting (--predraft-branches) on real servers over
// loopback: through chains of accepted/bonus steps, answers from finished
// branches (hits), from branches still waiting (partial hits) and on
// demand (misses) all equal model.Generate and a plain server's full-context
// /draft; the outcome and wasted-token counters are exact; a request that
// arrives while pre-draft work runs is admitted at the next step boundary
// (by the order of gated engine steps, never by time); bad values of the
// option are refused.

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/model"
)

// holdBackend holds background (pre-draft) items before they reach the
// engine while hold is open, so that a test can catch branches waiting.
type holdBackend struct {
	Backend
	mu   sync.Mutex
	hold chan struct{} // nil: pass; else wait until closed
}

func (h *holdBackend) DraftBatch(ctx context.Context, items []BatchItem) ([]engine.Result, []error, error) {
	if len(items) == 1 && items[0].Background != nil {
		h.mu.Lock()
		ch := h.hold
		h.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
	}
	return h.Backend.DraftBatch(ctx, items)
}

func (h *holdBackend) setHold(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case on && h.hold == nil:
		h.hold = make(chan struct{})
	case !on && h.hold != nil:
		close(h.hold)
		h.hold = nil
	}
}

// metricOf reads one sample (summed over the labels not given).
func metricOf(t *testing.T, ts *testServer, name string, match ...string) float64 {
	t.Helper()
	v, ok := value(scrape(t, ts), name, match...)
	if !ok {
		t.Fatalf("/metrics has no %s", name)
	}
	return v
}

// waitBranches waits until every branch started has finished (a state of
// the server, polled; not a time).
func waitBranches(t *testing.T, ts *testServer, finished float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := metricOf(t, ts, "draftd_predraft_branches_total", "state", "started")
		fi := metricOf(t, ts, "draftd_predraft_branches_total", "state", "finished")
		if st == fi && fi >= finished {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("branches: %g started, %g finished after 30 s", st, fi)
		}
		time.Sleep(time.Millisecond)
	}
}

// runnerUp is the reference second choice after ctx: the best id other
// than greedy in the full logits of PrefillLogits, and whether it is clear
// of a near-tie (the server's second product may round one the other way).
func runnerUp(t *testing.T, m *model.Model, ctx []int, greedy int) (int, bool) {
	t.Helper()
	logits, err := m.PrefillLogits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := logits[(len(ctx)-1)*m.Vocab:]
	alt, third := -1, -1
	for id, v := range last {
		if id == greedy {
			continue
		}
		switch {
		case alt < 0 || v > last[alt]:
			alt, third = id, alt
		case third < 0 || v > last[third]:
			third = id
		}
	}
	return alt, third < 0 || last[alt]-last[third] > 1e-3
}

// sessionDraft posts one session body to /draft and returns the draft.
func sessionDraft(t *testing.T, ts *testServer, body string) []int {
	t.Helper()
	st, _, b := ts.sessionPost(body, "")
	if st != http.StatusOK {
		t.Fatalf("POST /draft %s: status %d %s", body, st, b)
	}
	return decodeDraft(t, b)
}

// TestPredraftChainsEqualOnDemand drives sessions through steps of three
// kinds — all accepted with the drafter's next token as the bonus, rejected
// at a random position with the drafter's runner-up as the bonus, and a
// random guess no branch holds — waiting before each step until every
// branch has finished. With n = 4 and B = 8 every branch is drafted (four
// rejections and all-accepted), so the first two kinds must be hits and the
// third a miss; every draft must equal model.Generate and the full-context
// /draft of a server without pre-drafting, and the wasted tokens must be
// exactly the tokens of the branches not used.
func TestPredraftChainsEqualOnDemand(t *testing.T) {
	m := loadModel(t)
	pre := startHealthy(t, Config{PredraftBranches: 8})
	plain := startHealthy(t, Config{})
	r := rand.New(rand.NewPCG(41, 42))
	const n = 4
	want := map[string]float64{}
	wasted := 0.0
	finished := 0.0
	for sess := range 3 {
		id := fmt.Sprintf("pre-%d", sess)
		ctx := seq(r.IntN(tinyVocab), 12+r.IntN(20))
		have := sessionDraft(t, pre, fmt.Sprintf(`{"session":%q,"tokens":%s,"n":%d}`, id, idsJSON(ctx), n))
		for step := range 12 {
			if w, err := m.Generate(ctx, n); err != nil || !slices.Equal(have, w) {
				t.Fatalf("%s step %d: draft %v; Generate %v (%v)", id, step, have, w, err)
			}
			if p := plain.draft(ctx, n); !slices.Equal(have, p) {
				t.Fatalf("%s step %d: draft %v; full-context /draft %v", id, step, have, p)
			}
			finished += n + 1 // every branch of the last answer
			waitBranches(t, pre, finished)
			kind := []string{"all", "reject", "miss"}[r.IntN(3)]
			k := r.IntN(len(have))
			var bonus int
			switch kind {
			case "all":
				k = len(have)
				next, err := m.Generate(append(slices.Clip(ctx), have...), 1)
				if err != nil {
					t.Fatal(err)
				}
				bonus = next[0]
			case "reject":
				alt, clear := runnerUp(t, m, append(slices.Clip(ctx), have[:k]...), have[k])
				if !clear {
					kind, bonus = "skip", alt // a near-tie: no expectation
				} else {
					bonus = alt
				}
			case "miss":
				alt, _ := runnerUp(t, m, append(slices.Clip(ctx), have[:k]...), have[k])
				for bonus = r.IntN(tinyVocab); bonus == alt; bonus = r.IntN(tinyVocab) {
				}
			}
			ctx = append(append(slices.Clip(ctx), have[:k]...), bonus)
			before := metricOf(t, pre, "draftd_predraft_wasted_tokens_total")
			have = sessionDraft(t, pre, fmt.Sprintf(`{"session":%q,"accepted":%d,"bonus":%d,"n":%d}`, id, k, bonus, n))
			got := metricOf(t, pre, "draftd_predraft_wasted_tokens_total") - before
			all := float64(4*n + n + 1) // four rejection branches, all-accepted drafts n+1
			switch kind {
			case "all":
				want[predraftHit]++
				wasted = all - (n + 1)
			case "reject":
				want[predraftHit]++
				wasted = all - n
			case "miss":
				want[predraftMiss]++
				wasted = all
			case "skip":
				continue
			}
			if got != wasted {
				t.Errorf("%s step %d (%s): %g tokens wasted; want %g", id, step, kind, got, wasted)
			}
		}
		finished += n + 1
	}
	for _, o := range []string{predraftHit, predraftMiss, predraftPartial, predraftNone} {
		if have := metricOf(t, pre, "draftd_predraft_requests_total", "outcome", o); have != want[o] && !(o == predraftHit && have >= want[o]) {
			t.Errorf("predraft_requests_total{outcome=%q} = %g; want %g", o, have, want[o])
		}
	}
	if want[predraftHit] == 0 || want[predraftMiss] == 0 {
		t.Fatalf("the chains had %v: no hit or no miss tested", want)
	}
	if v := metricOf(t, pre, "draftd_predraft_answer_seconds", "outcome", predraftHit); v < want[predraftHit] {
		t.Errorf("predraft_answer_seconds{hit} has %g samples; want ≥ %g", v, want[predraftHit])
	}
	if v := metricOf(t, plain, "draftd_predraft_branches_total"); v != 0 {
		t.Errorf("a server without --predraft-branches started %g branches", v)
	}
}

// TestPredraftPartialHit: the engine is stopped after each step once the
// five branches are released; one step after the first step that holds all
// five, each has drafted a token. A request matching one (the runner-up at
// position 1) then finds it part-drafted, promotes it and is answered by it
// once the engine goes on (partial_hit), equal to Generate. Then, with the
// branches held before the engine (none started), a matching request is a
// miss: there is no head start to continue from.
func TestPredraftPartialHit(t *testing.T) {
	m := loadModel(t)
	pre, hb, g := startGated(t, engine.Options{})
	const n = 4
	// The runner-up at position 1 of both contexts below (this one and the
	// one the first match leads to) is clear of the third token by 0.54 and
	// 0.82 logits on every kernel path (avx512, avx2, generic; measured
	// 2026-12-06 on the Ice Lake Xeon): a tie there would make the branch
	// that matches ambiguous, so it fails the test rather than skip it.
	ctx := seq(5, 30)
	// match sends the request for the runner-up at position 1 of the last
	// draft have after ctx, and returns its answer channel and context.
	match := func(have []int) (chan []int, []int) {
		alt, clear := runnerUp(t, m, append(slices.Clip(ctx), have[:1]...), have[1])
		if !clear {
			t.Fatalf("near-tie at position 1 of context %v: its runner-up and third token are within 1e-3; choose a context without one", ctx)
		}
		done := make(chan []int, 1)
		go func() {
			done <- sessionDraft(t, pre, fmt.Sprintf(`{"session":"p","accepted":1,"bonus":%d,"n":%d}`, alt, n))
		}()
		return done, append(append(slices.Clip(ctx), have[0]), alt)
	}
	hb.setHold(true)
	have := sessionDraft(t, pre, fmt.Sprintf(`{"session":"p","tokens":%s,"n":%d}`, idsJSON(ctx), n))
	// A plain request keeps the engine busy (no background step beside it)
	// while the five branches queue, so that they start together.
	g.set(true)
	busy := make(chan []int, 1)
	go func() { busy <- pre.draft(seq(9, 20), 8) }()
	<-g.stepped
	hb.setHold(false)
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("five queued branches", func() bool { return g.eng.Stats().BackgroundQueued == 5 })
	g.gate <- struct{}{}
	for {
		<-g.stepped
		all := g.eng.Stats().BackgroundActive == 5
		g.gate <- struct{}{}
		if all {
			break
		}
	}
	<-g.stepped // held: every branch has drafted a token
	done, next := match(have)
	// The request has taken its branch once the other four are dropped.
	waitMetric(t, pre, "draftd_predraft_branches_total", 4, "state", "finished")
	g.set(false)
	g.gate <- struct{}{}
	got := <-done
	if w, _ := m.Generate(next, n); !slices.Equal(got, w) {
		t.Fatalf("partial hit %v; Generate %v", got, w)
	}
	if b, w := <-busy, must(m.Generate(seq(9, 20), 8)); !slices.Equal(b, w) {
		t.Fatalf("plain request %v; Generate %v", b, w)
	}
	if v := metricOf(t, pre, "draftd_predraft_requests_total", "outcome", predraftPartial); v != 1 {
		t.Errorf("partial hits %g; want 1", v)
	}

	waitBranches(t, pre, 10) // the answer above started five more: let them end
	ctx = next
	hb.setHold(true)
	have = sessionDraft(t, pre, fmt.Sprintf(`{"session":"p","tokens":%s,"n":%d}`, idsJSON(ctx), n))
	done, next = match(have)
	got = <-done
	hb.setHold(false)
	if w, _ := m.Generate(next, n); !slices.Equal(got, w) {
		t.Fatalf("miss %v; Generate %v", got, w)
	}
	if v := metricOf(t, pre, "draftd_predraft_requests_total", "outcome", predraftMiss); v != 1 {
		t.Errorf("a match that had not started: %g misses; want 1", v)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// waitMetric waits until a sample reaches at least want (a state, polled).
func waitMetric(t *testing.T, ts *testServer, name string, want float64, match ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metricOf(t, ts, name, match...) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s %v below %g after 30 s", name, match, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// gated is a server whose engine can be stopped after each step (stepGate)
// and whose branches can be held before the engine (holdBackend).
type gated struct {
	*stepGate
	eng *engine.Engine
}

func (g *gated) set(on bool) { <-g.on; g.on <- on }

func startGated(t *testing.T, opt engine.Options) (*testServer, *holdBackend, *gated) {
	t.Helper()
	hb := &holdBackend{}
	g := &gated{stepGate: &stepGate{on: make(chan bool, 1), stepped: make(chan [3]int), gate: make(chan struct{})}}
	g.on <- false
	open := tinyOpen(opt, func(b Backend) Backend {
		g.eng = b.(*engineBackend).Engine
		hb.Backend = b
		return hb
	})
	ts := startHealthy(t, Config{PredraftBranches: 8, Open: func(ctx context.Context, obs engine.Observer) (Backend, error) {
		g.Observer = obs
		return open(ctx, g.stepGate)
	}})
	t.Cleanup(func() {
		// Runs before the server stops: let the engine go on whatever state
		// a failure left the gate in.
		g.set(false)
		hb.setHold(false)
		go func() {
			for {
				select {
				case <-g.stepped:
				case g.gate <- struct{}{}:
				}
			}
		}()
	})
	return ts, hb, g
}

// stepGate blocks the engine after each step while on, announcing the
// step on stepped.
type stepGate struct {
	engine.Observer
	on      chan bool // (cap 1) the gate's state
	stepped chan [3]int
	gate    chan struct{}
}

func (g *stepGate) Step(batch, prefill, decode int) {
	g.Observer.Step(batch, prefill, decode)
	on := <-g.on
	g.on <- on
	if on {
		g.stepped <- [3]int{batch, prefill, decode}
		<-g.gate
	}
}

// TestPredraftNeverAheadOfRequests: one batch slot, eight branches of
// eight tokens released into the engine, which is then stopped after each
// step. A plain request (context 37) arriving while a branch runs must be
// the very next step's sequence (its prefill of 37 tokens) and finish in
// its own eight steps, its answer delivered while the engine stays stopped
// after them. If pre-draft work were admitted or kept ahead of the request,
// the next step would be a branch's.
func TestPredraftNeverAheadOfRequests(t *testing.T) {
	m := loadModel(t)
	pre, hb, g := startGated(t, engine.Options{MaxBatch: 1})
	setGate := g.set
	const n = 8
	hb.setHold(true)
	sessionDraft(t, pre, fmt.Sprintf(`{"session":"s","tokens":%s,"n":%d}`, idsJSON(seq(3, 20)), n))
	setGate(true)
	hb.setHold(false)
	st := <-g.stepped // a branch's step, held
	if st[1] == 37 {
		t.Fatalf("first step %v", st)
	}
	reqCtx := seq(11, 37)
	body, _ := json.Marshal(map[string]any{"tokens": reqCtx, "n": n})
	ans := make(chan []int, 1)
	go func() {
		st, _, b := pre.do("POST", "/draft", string(body))
		if st != http.StatusOK {
			t.Errorf("POST /draft: %d %s", st, b)
			ans <- nil
			return
		}
		ans <- decodeDraft(t, b)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for g.eng.Stats().QueueDepth != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the request was not queued in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	seen := time.Now()   // the request was queued before this
	g.gate <- struct{}{} // the branch's step ends after this send
	held := time.Now()
	for i := range n {
		st := <-g.stepped
		if st[0] != 1 || (i == 0 && st[1] != 37) || (i > 0 && (st[1] != 0 || st[2] != 1)) {
			t.Fatalf("step %d after the request arrived: batch %d, prefill %d, decode %d; want the request's own step", i+1, st[0], st[1], st[2])
		}
		g.gate <- struct{}{}
	}
	<-g.stepped // the engine is stopped again; the request must be answered
	got := <-ans
	if w, _ := m.Generate(reqCtx, n); !slices.Equal(got, w) {
		t.Fatalf("request draft %v; Generate %v", got, w)
	}
	if s := g.eng.Stats(); s.Preemptions < 1 {
		t.Errorf("preemptions %d; want ≥ 1", s.Preemptions)
	}
	// The wait metric: exactly this request waited for a pre-draft step, at
	// least from when the test saw it queued to the release of the held
	// step, and at most as long as the background steps took.
	if c := metricOf(t, pre, "draftd_predraft_request_wait_seconds_count"); c != 1 {
		t.Fatalf("requests that waited for a pre-draft step: %g; want 1", c)
	}
	w := metricOf(t, pre, "draftd_predraft_request_wait_seconds_sum")
	if lo := held.Sub(seen).Seconds(); w < lo {
		t.Errorf("wait %g s; the step was held %g s after the request was queued", w, lo)
	}
	if bg := metricOf(t, pre, "draftd_step_seconds_sum", "kind", "background"); w > bg {
		t.Errorf("wait %g s; longer than all background steps together (%g s)", w, bg)
	}
	if c := metricOf(t, pre, "draftd_step_seconds_count", "kind", "request"); c < n {
		t.Errorf("request steps %g; want ≥ %d", c, n)
	}
}

// TestPredraftConfigBounds: negative and too large branch counts are
// refused by name.
func TestPredraftConfigBounds(t *testing.T) {
	for _, b := range []int{-1, MaxPredraftBranches + 1} {
		_, err := New(Config{Open: tinyOpen(engine.Options{}, nil), PredraftBranches: b})
		if err == nil || !strings.Contains(err.Error(), "pre-draft branches") {
			t.Errorf("PredraftBranches %d: %v; want a pre-draft branches error", b, err)
		}
	}
}

// TestRank checks the branch scores against products written out by hand:
// draft [a b c] with p = 0.5, 0.8, 0.9 and runner-ups of 0.3, 0.1, 0.05.
func TestRank(t *testing.T) {
	alts := []engine.Alt{{ID: 7, P: 0.5, PAlt: 0.3}, {ID: 8, P: 0.8, PAlt: 0.1}, {ID: 9, P: 0.9, PAlt: 0.05}}
	got := rank([]int{1, 2, 3}, alts)
	want := []candidate{
		{k: 3, bonus: -1, all: true, score: 0.5 * 0.8 * 0.9}, // 0.36
		{k: 0, bonus: 7, score: 0.3},
		{k: 1, bonus: 8, score: 0.5 * 0.1},        // 0.05
		{k: 2, bonus: 9, score: 0.5 * 0.8 * 0.05}, // 0.02
	}
	if len(got) != len(want) {
		t.Fatalf("rank: %+v; want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.k != w.k || g.bonus != w.bonus || g.all != w.all || math.Abs(g.score-w.score) > 1e-6 {
			t.Fatalf("rank[%d] = %+v; want %+v (all: %+v)", i, g, w, got)
		}
	}
	// A position without a distribution ends the list there: no branch at
	// or after it, no all-accepted.
	alts[1] = engine.Alt{ID: -1, P: -1, PAlt: -1}
	if got := rank([]int{1, 2, 3}, alts); len(got) != 1 || got[0].k != 0 {
		t.Fatalf("rank with an unknown position 1: %+v; want only k = 0", got)
	}
}

// TestMemoryBudgetMetrics: the memory budget is the KV cache's part plus
// what the sessions can hold at most (5 bytes × MaxSessionTokens, and 320 B
// + a 128-byte id + 32 B of rounding × MaxSessions), and what is in use
// counts the sessions: a session "m" of 100 context tokens (400 B, in the
// allocator's 416-byte size class) and 8 draft tokens (32 B, a size class of
// its own) adds 416 + 32 + 320 + 1 bytes to draftd_memory_bytes beside the KV
// blocks.
func TestMemoryBudgetMetrics(t *testing.T) {
	ts := startHealthy(t, Config{MaxSessionTokens: 1 << 16, MaxSessions: 10})
	kv := metricOf(t, ts, "draftd_kv_cache_budget_bytes")
	if b, want := metricOf(t, ts, "draftd_memory_budget_bytes"), kv+5<<16+10*(320+128+32); b != want {
		t.Errorf("memory budget %g; want the KV budget %g + %d", b, kv, 5<<16+10*(320+128+32))
	}
	sessionDraft(t, ts, fmt.Sprintf(`{"session":"m","tokens":%s,"n":8}`, idsJSON(seq(1, 100))))
	used, kvUsed := metricOf(t, ts, "draftd_memory_bytes"), metricOf(t, ts, "draftd_kv_cache_bytes")
	const sess = 416 + 32 + 320 + 1
	if used != kvUsed+sess {
		t.Errorf("memory in use %g; want the KV blocks' %g + %d bytes of the session", used, kvUsed, sess)
	}
	if sb := metricOf(t, ts, "draftd_session_bytes"); sb != sess {
		t.Errorf("draftd_session_bytes %g; want %d", sb, sess)
	}
}

// TestPredraftBackoff: branches held before the engine never draft a token,
// so after backoffWindow sets that never ran, session drafts are served
// without pre-drafting (draftd_predraft_skipped_total) except one in
// backoffProbe; once the hold is released, the probe's branches run and
// pre-drafting resumes for every draft.
func TestPredraftBackoff(t *testing.T) {
	pre, hb, _ := startGated(t, engine.Options{})
	const n = 4
	step := 0
	next := func() {
		step++
		sessionDraft(t, pre, fmt.Sprintf(`{"session":"b","accepted":0,"bonus":%d,"n":%d}`, (13*step)%tinyVocab, n))
	}
	started := func() float64 { return metricOf(t, pre, "draftd_predraft_branches_total", "state", "started") }
	skipped := func() float64 { return metricOf(t, pre, "draftd_predraft_skipped_total") }
	hb.setHold(true)
	sessionDraft(t, pre, fmt.Sprintf(`{"session":"b","tokens":%s,"n":%d}`, idsJSON(seq(5, 12)), n))
	for range backoffWindow - 1 {
		next()
	}
	if s := skipped(); s != 0 {
		t.Fatalf("skipped %g before the window is full; want 0", s)
	}
	next() // the window's 32nd set that never ran: this draft is skipped
	if s := skipped(); s != 1 {
		t.Fatalf("skipped %g after %d sets that never ran; want 1", s, backoffWindow)
	}
	b0 := started()
	for range backoffProbe - 2 {
		next()
	}
	if s, b := skipped(), started(); s != backoffProbe-1 || b != b0 {
		t.Fatalf("skipped %g, branches started %g → %g; want %d skipped and no branch", s, b0, b, backoffProbe-1)
	}
	next() // the probe
	if s, b := skipped(), started(); s != backoffProbe-1 || b <= b0 {
		t.Fatalf("probe: skipped %g, branches started %g → %g; want %d skipped and new branches", s, b0, b, backoffProbe-1)
	}
	hb.setHold(false)
	waitBranches(t, pre, started())
	for range 4 {
		b := started()
		next() // the probe's set ran: pre-drafting is on for each of these
		if s, b1 := skipped(), started(); s != backoffProbe-1 || b1 <= b {
			t.Fatalf("after the probe's branches ran: skipped %g, branches started %g → %g; want %d skipped and new branches", s, b, b1, backoffProbe-1)
		}
		waitBranches(t, pre, started())
	}
}

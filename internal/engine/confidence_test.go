// Confidence-bounded drafts (Item.MinConfidence, Item.Confidences) against
// a reference computed here from the model's full logits
// (model.PrefillLogits, the plain forward path that materialises every
// logit): each token's softmax probability in float64, and the position
// where it first falls below a bound — where the engine's chain must stop.
package engine

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/model"
)

// refConfidences returns the greedy chain of n tokens after ctx and the
// softmax probability of each chain token, from the full logits of
// ctx + chain (PrefillLogits), computed in float64.
func refConfidences(t *testing.T, m *model.Model, ctx []int, n int) ([]int, []float64) {
	t.Helper()
	chain, err := m.Generate(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(ctx), chain...)
	logits, err := m.PrefillLogits(all)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Vocab
	conf := make([]float64, len(chain))
	for i, tok := range chain {
		row := logits[(len(ctx)-1+i)*V : (len(ctx)+i)*V]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		conf[i] = math.Exp(float64(row[tok])-mx) / sum
	}
	return chain, conf
}

// boundCase finds a context whose reference confidences first fall below
// a bound at position k in [3, n−3], with a margin of at least gap on both
// sides of the bound (so that the engine's float32 values, which agree
// with the reference to ~1e-6, fall on the same side).
func boundCase(t *testing.T, m *model.Model, n int) (ctx, chain []int, ref []float64, k int, bound float32) {
	t.Helper()
	const gap = 0.05
	r := rand.New(rand.NewPCG(39, 1))
	for range 200 {
		ctx = randTokens(r, 10+r.IntN(30), m.Vocab)
		chain, ref = refConfidences(t, m, ctx, n)
		lo := ref[0]
		for k = 1; k < n-2; k++ {
			if k >= 3 && ref[k] < lo-2*gap {
				return ctx, chain, ref, k, float32((ref[k] + lo) / 2)
			}
			lo = math.Min(lo, ref[k])
		}
	}
	t.Fatal("no context of 200 has a confidence drop to bound")
	return
}

func TestConfidenceBoundStopsWhereReferenceFalls(t *testing.T) {
	m := loadModel(t, tinyModel)
	e := newEngine(t, m, Options{MaxBatch: 4})
	const n = 12
	ctx, chain, ref, k, bound := boundCase(t, m, n)
	t.Logf("context %d tokens; reference confidences %.3f; bound %.3f stops before token %d", len(ctx), ref, bound, k)
	draft1 := func(it Item) (Result, uint64) {
		t.Helper()
		steps := e.Stats().Steps
		res, errs, err := e.DraftBatch(t.Context(), []Item{it})
		if err == nil {
			err = errs[0]
		}
		if err != nil {
			t.Fatal(err)
		}
		return res[0], e.Stats().Steps - steps
	}

	// Without a bound: the chain, whole; confidences equal to the reference.
	res, _ := draft1(Item{Tokens: ctx, N: n, Confidences: true})
	if !slices.Equal(res.Draft, chain) || res.Stopped {
		t.Fatalf("confidences only: draft %v stopped %v; want %v, not stopped", res.Draft, res.Stopped, chain)
	}
	if len(res.Confidences) != n {
		t.Fatalf("%d confidences for %d tokens", len(res.Confidences), n)
	}
	for i, c := range res.Confidences {
		if d := math.Abs(float64(c) - ref[i]); d > 1e-4 {
			t.Errorf("confidence of token %d: have %.6f; reference %.6f", i, c, ref[i])
		}
	}
	plain, _ := draft1(Item{Tokens: ctx, N: n})
	if !slices.Equal(plain.Draft, chain) || plain.Confidences != nil || plain.Stopped {
		t.Errorf("no fields: draft %v confidences %v stopped %v; want %v and nothing else", plain.Draft, plain.Confidences, plain.Stopped, chain)
	}

	// With the bound: stops exactly before token k, after k+1 steps (the
	// prefill step drafts token 0, each step one more; token k's step is
	// the last): the stopped sequence runs no further pass.
	e2 := newEngine(t, m, Options{MaxBatch: 4}) // a cold cache: one prefill step
	e = e2
	res, steps := draft1(Item{Tokens: ctx, N: n, MinConfidence: bound})
	if !slices.Equal(res.Draft, chain[:k]) || !res.Stopped {
		t.Fatalf("bound %.3f: draft %v stopped %v; want %v (the chain before token %d), stopped", bound, res.Draft, res.Stopped, chain[:k], k)
	}
	if steps != uint64(k+1) {
		t.Errorf("bound %.3f: %d forward steps; want %d (no pass after the stop)", bound, steps, k+1)
	}
	if len(res.Confidences) != k {
		t.Errorf("%d confidences for %d tokens", len(res.Confidences), k)
	}
	for i, c := range res.Confidences {
		if c < bound {
			t.Errorf("token %d kept with confidence %.4f below the bound %.4f", i, c, bound)
		}
	}
	// The KV of the stopped chain is in the cache: the same request again
	// prefills nothing new beyond the cached context and gives the same.
	again, _ := draft1(Item{Tokens: ctx, N: n, MinConfidence: bound})
	if !slices.Equal(again.Draft, res.Draft) || !again.Stopped {
		t.Errorf("again: %v stopped %v; first %v", again.Draft, again.Stopped, res.Draft)
	}

	// A bound below every confidence never stops; one above the first
	// gives an empty draft.
	minRef := slices.Min(ref)
	res, _ = draft1(Item{Tokens: ctx, N: n, MinConfidence: float32(minRef / 2)})
	if !slices.Equal(res.Draft, chain) || res.Stopped {
		t.Errorf("bound %.3f below every confidence: draft %v stopped %v; want %v", minRef/2, res.Draft, res.Stopped, chain)
	}
	res, _ = draft1(Item{Tokens: ctx, N: n, MinConfidence: 1})
	if len(res.Draft) != 0 || !res.Stopped {
		t.Errorf("bound 1: draft %v stopped %v; want empty, stopped", res.Draft, res.Stopped)
	}
}

// TestConfidenceBoundInABatch: a stopped sequence leaves the batch while
// the others go on, each drafted as alone.
func TestConfidenceBoundInABatch(t *testing.T) {
	m := loadModel(t, tinyModel)
	e := newEngine(t, m, Options{MaxBatch: 8})
	const n = 12
	ctx, chain, _, k, bound := boundCase(t, m, n)
	r := rand.New(rand.NewPCG(5, 6))
	items := []Item{{Tokens: ctx, N: n, MinConfidence: bound}}
	for range 4 {
		items = append(items, Item{Tokens: randTokens(r, 20, m.Vocab), N: n})
	}
	items = append(items, Item{Tokens: ctx, N: n, Confidences: true})
	res, errs, err := e.DraftBatch(t.Context(), items)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if errs[i] != nil {
			t.Fatalf("item %d: %v", i, errs[i])
		}
		want, _ := m.Generate(it.Tokens, n)
		if it.MinConfidence > 0 {
			want = want[:k]
		}
		if !slices.Equal(res[i].Draft, want) {
			t.Errorf("item %d: %v; want %v", i, res[i].Draft, want)
		}
	}
	if !slices.Equal(res[len(items)-1].Draft, chain) {
		t.Errorf("unbounded twin: %v; want %v", res[len(items)-1].Draft, chain)
	}
}

// TestConfidenceModelFreeAndHybrid: tokens the model did not choose from
// its own distribution (lookup's) are reported as 1 and never stopped on;
// a hybrid draft with a bound is a prefix of its unbounded draft.
func TestConfidenceModelFreeAndHybrid(t *testing.T) {
	m := loadModel(t, tinyModel)
	e := newEngine(t, m, Options{})
	// A context that repeats itself: lookup has proposals.
	r := rand.New(rand.NewPCG(7, 8))
	base := randTokens(r, 12, m.Vocab)
	ctx := append(append(slices.Clone(base), base...), base[:4]...)
	lookup, err := draft.New(draft.NameLookup, draft.Options{Trust: draft.DefaultTrust, MinMatch: draft.DefaultMinMatch})
	if err != nil {
		t.Fatal(err)
	}
	res, errs, err := e.DraftBatch(t.Context(), []Item{{Tokens: ctx, N: 6, Strategy: lookup, MinConfidence: 0.99, Confidences: true}})
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs[0])
	}
	if want := base[4:10]; !slices.Equal(res[0].Draft, want) || res[0].Stopped {
		t.Errorf("lookup with a bound: %v stopped %v; want %v", res[0].Draft, res[0].Stopped, want)
	}
	if len(res[0].Confidences) != len(res[0].Draft) || slices.ContainsFunc(res[0].Confidences, func(c float32) bool { return c != 1 }) {
		t.Errorf("lookup confidences %v; want 1 for each of %d tokens", res[0].Confidences, len(res[0].Draft))
	}
	hybrid, err := draft.New(draft.NameHybrid, draft.Options{Trust: draft.DefaultTrust, MinMatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	full, errs, err := e.DraftBatch(t.Context(), []Item{{Tokens: ctx, N: 12, Strategy: hybrid, Confidences: true}})
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs[0])
	}
	conf := full[0].Confidences
	t.Logf("hybrid draft %v confidences %.3f", full[0].Draft, conf)
	if len(conf) != len(full[0].Draft) {
		t.Fatalf("hybrid: %d confidences for %d tokens", len(conf), len(full[0].Draft))
	}
	for _, b := range []float32{0.3, 0.6, 0.9} {
		want := len(conf)
		for i, c := range conf {
			if c < b {
				want = i
				break
			}
		}
		res, errs, err := e.DraftBatch(t.Context(), []Item{{Tokens: ctx, N: 12, Strategy: hybrid, MinConfidence: b}})
		if err != nil || errs[0] != nil {
			t.Fatal(err, errs[0])
		}
		if !slices.Equal(res[0].Draft, full[0].Draft[:want]) || res[0].Stopped != (want < 12) {
			t.Errorf("hybrid bound %.1f: %v stopped %v; want %v (confidences %v)", b, res[0].Draft, res[0].Stopped, full[0].Draft[:want], conf)
		}
	}
}

func TestConfidenceBoundInvalid(t *testing.T) {
	m := loadModel(t, tinyModel)
	e := newEngine(t, m, Options{})
	for _, b := range []float32{-0.1, 1.5, float32(math.NaN()), float32(math.Inf(1))} {
		_, errs, err := e.DraftBatch(context.Background(), []Item{{Tokens: []int{1, 2, 3}, N: 4, MinConfidence: b}})
		var ie *InputError
		if err != nil || !errors.As(errs[0], &ie) || ie.Code != CodeInvalidConfidence {
			t.Errorf("MinConfidence %v: err %v, item error %v; want an InputError %q", b, err, errs[0], CodeInvalidConfidence)
		}
	}
}

// TestConfidenceWithProposals: a hybrid step that checks proposals (eager
// recall, every proposal kept) measures each token's confidence from the
// row that chose it — equal to the reference, as the model strategy's —
// and a bound stops the chain before any token of such a step: before each
// position k in turn, with each signal (chain_prob: the running product of
// the reference's probabilities), the draft is the chain's first k tokens
// and its sources count them.
func TestConfidenceWithProposals(t *testing.T) {
	m := loadModel(t, tinyModel)
	e := newEngine(t, m, Options{MaxBatch: 4})
	hyb := draft.Hybrid{Opt: draft.Options{MinMatch: 4, Eager: true}}
	const n = 12
	r := rand.New(rand.NewPCG(41, 2))
	base := randTokens(r, 20, m.Vocab)
	prev, err := m.Generate(base, n+4)
	if err != nil {
		t.Fatal(err)
	}
	// The previous draft was prev; the target accepted prev[:3] and its
	// bonus is prev[3]: the recall is prev[3:], every proposal right.
	ctx := append(slices.Clone(base), prev[:4]...)
	chain, ref := refConfidences(t, m, ctx, n)
	prod := make([]float64, n)
	p := 1.0
	for i, c := range ref {
		p *= c
		prod[i] = p
	}
	draftOne := func(it Item) Result {
		t.Helper()
		it.Tokens, it.N, it.Strategy, it.Recall = ctx, n, hyb, prev[3:]
		res, errs, err := e.DraftBatch(t.Context(), []Item{it})
		if err == nil {
			err = errs[0]
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := res[0].Sources.FromModel + res[0].Sources.FromLookup; got != len(res[0].Draft) {
			t.Errorf("sources %+v count %d tokens; the draft has %d", res[0].Sources, got, len(res[0].Draft))
		}
		return res[0]
	}
	for _, sig := range []struct {
		name string
		want []float64
	}{{SignalTop1, ref}, {SignalChain, prod}} {
		res := draftOne(Item{Confidences: true, ConfidenceSignal: sig.name})
		if !slices.Equal(res.Draft, chain) || res.Stopped {
			t.Fatalf("%s: draft %v stopped %v; want the model's chain %v", sig.name, res.Draft, res.Stopped, chain)
		}
		if res.Sources.Recalled == 0 {
			t.Fatalf("%s: no recalled token kept (sources %+v): the test checks no proposal", sig.name, res.Sources)
		}
		for i, c := range res.Confidences {
			if d := math.Abs(float64(c) - sig.want[i]); d > 1e-4*max(sig.want[i], 1e-2) {
				t.Errorf("%s: confidence of token %d: have %.6g; reference %.6g", sig.name, i, c, sig.want[i])
			}
		}
		stops := 0
		for k := 1; k < n; k++ {
			// A bound between the confidences of tokens k−1 and k, clear
			// of both, below every earlier one: the chain stops before k.
			lo, hi := sig.want[k], slices.Min(sig.want[:k])
			if lo > 0.9*hi {
				continue
			}
			b := float32(math.Sqrt(lo * hi))
			res := draftOne(Item{MinConfidence: b, ConfidenceSignal: sig.name})
			if !slices.Equal(res.Draft, chain[:k]) || !res.Stopped {
				t.Errorf("%s bound %.4g: draft %v stopped %v; want %v (stopped before token %d)", sig.name, b, res.Draft, res.Stopped, chain[:k], k)
			}
			stops++
		}
		t.Logf("%s: stopped before %d positions", sig.name, stops)
		if stops == 0 {
			t.Errorf("%s: only %d positions to stop before (confidences %.3g)", sig.name, stops, sig.want)
		}
	}
	_, errs, err := e.DraftBatch(t.Context(), []Item{{Tokens: ctx, N: 4, ConfidenceSignal: "chain"}})
	var ie *InputError
	if err != nil || !errors.As(errs[0], &ie) || ie.Code != CodeInvalidConfidence {
		t.Errorf(`ConfidenceSignal "chain": err %v, item error %v; want an InputError %q`, err, errs[0], CodeInvalidConfidence)
	}
}

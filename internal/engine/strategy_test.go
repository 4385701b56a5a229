// Tests of the drafting strategies through the engine: hybrid, lookup and
// pld drafts are compared with a sequential reference written here from the
// strategies' definitions (brute-force lookup, model.Generate for every
// greedy token), under concurrency, shared prefixes, mixed strategies (a
// model draft after a hybrid one on the same prefix catches KV of rejected
// proposals left in the cache) and a tiny KV budget.
package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/model"
)

// refLookup is the longest suffix of t that ends earlier too (capped at
// draft.MaxMatch), the most recent such occurrence, and what followed it.
func refLookup(t []int) (next, length int, ok bool) {
	end := len(t) - 1
	best, at := 0, -1
	for i := end - 1; i >= 0; i-- {
		l := 0
		for l < draft.MaxMatch && l <= i && t[i-l] == t[end-l] {
			l++
		}
		if l > best {
			best, at = l, i
		}
	}
	if at < 0 {
		return 0, 0, false
	}
	return t[at+1], best, true
}

// refHybrid is the hybrid strategy done one token at a time over
// model.Forward on one sequence of its own, with no cache and no batch: only
// tokens that join the draft are ever fed to the model.
func refHybrid(t *testing.T, m *model.Model, ctx []int, n int, opt draft.Options) []int {
	var blocks []*model.Block
	seq := &model.Seq{}
	feed := func(tokens []int) int { // greedy id after tokens
		for len(blocks)*model.BlockSize < seq.Pos+len(tokens) {
			blocks = append(blocks, m.NewBlock())
		}
		seq.Tokens, seq.Blocks = tokens, blocks
		if err := m.Forward([]*model.Seq{seq}); err != nil {
			t.Fatal(err)
		}
		seq.Pos += len(tokens)
		return seq.Next
	}
	text := slices.Clone(ctx)
	g := feed(ctx)
	var out []int
	n = min(n, m.MaxContext-len(ctx))
	for len(out) < n {
		var prop, lens []int
		tent := slices.Clone(text)
		for len(prop) < n-len(out)-1 {
			next, l, ok := refLookup(tent)
			if !ok || l < opt.MinMatch || (len(lens) > 0 && len(prop) >= lens[0]) {
				break // no match, too short a match, or as long as the first match
			}
			prop, lens = append(prop, next), append(lens, l)
			tent = append(tent, next)
		}
		for i, p := range prop {
			if g != p && (opt.Trust == 0 || lens[i] < opt.Trust) {
				break
			}
			text, out = append(text, p), append(out, p)
			g = feed([]int{p})
		}
		text, out = append(text, g), append(out, g)
		if len(out) < n {
			g = feed([]int{g})
		}
	}
	return out
}

func refLookupDraft(ctx []int, n int) []int {
	text := slices.Clone(ctx)
	var out []int
	for len(out) < n {
		next, _, ok := refLookup(text)
		if !ok {
			break
		}
		out, text = append(out, next), append(text, next)
	}
	return out
}

// repetitive returns a context that repeats passages of itself, the way
// code and quoted text do, so that lookup has something to find.
func repetitive(r *rand.Rand, n, vocab int) []int {
	s := randTokens(r, min(n, 8), vocab)
	for len(s) < n {
		if r.IntN(3) == 0 {
			s = append(s, r.IntN(vocab))
			continue
		}
		a := r.IntN(len(s))
		s = append(s, s[a:min(len(s), a+1+r.IntN(12))]...)
	}
	return s[:n]
}

type stratCase struct {
	name string
	s    draft.Strategy
	ref  func(t *testing.T, m *model.Model, ctx []int, n int) []int
}

func strategies() []stratCase {
	hyb := func(opt draft.Options) stratCase {
		return stratCase{fmt.Sprintf("hybrid-trust%d-min%d", opt.Trust, opt.MinMatch), draft.Hybrid{Opt: opt},
			func(t *testing.T, m *model.Model, ctx []int, n int) []int { return refHybrid(t, m, ctx, n, opt) }}
	}
	generate := func(t *testing.T, m *model.Model, ctx []int, n int) []int {
		g, err := m.Generate(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	return []stratCase{
		{"model", draft.Model{}, generate},
		// Eager proposals (1-token matches in small batches) with trust 0:
		// the model's chain.
		{"hybrid-eager", draft.Hybrid{Opt: draft.Options{MinMatch: 4, Eager: true}}, generate},
		hyb(draft.Options{MinMatch: 1}),
		hyb(draft.Options{MinMatch: 1, Trust: 3}),
		{"lookup", draft.Lookup{}, func(t *testing.T, m *model.Model, ctx []int, n int) []int {
			return refLookupDraft(ctx, min(n, m.MaxContext-len(ctx)))
		}},
	}
}

// strategyConversation replays one conversation with strategy sc (as
// runConversation does) and checks every draft against sc's reference.
func strategyConversation(t *testing.T, e *Engine, m *model.Model, r *rand.Rand, prefix []int, n int, sc stratCase, kept *[2]int) {
	ctx := slices.Clone(prefix)
	for len(ctx) < m.MaxContext*3/4 {
		res, err := e.DraftWith(context.Background(), ctx, n, sc.s)
		if err != nil {
			t.Errorf("%s: Draft(len %d): %v", sc.name, len(ctx), err)
			return
		}
		if want := sc.ref(t, m, ctx, n); !slices.Equal(res.Draft, want) {
			t.Errorf("%s: context %v n %d:\nhave %v\nwant %v", sc.name, ctx, n, res.Draft, want)
			return
		}
		if res.Strategy != sc.s.Name() || res.Sources.FromModel+res.Sources.FromLookup != len(res.Draft) {
			t.Errorf("%s: result strategy %q, sources %+v for %d tokens", sc.name, res.Strategy, res.Sources, len(res.Draft))
		}
		kept[0] += res.Sources.Kept
		kept[1] += res.Sources.Rejected
		a := len(res.Draft)
		if r.IntN(2) == 0 {
			a = r.IntN(len(res.Draft) + 1)
		}
		ctx = append(ctx, res.Draft[:a]...)
		if r.IntN(2) == 0 && len(ctx) > 4 { // the bonus token repeats the context
			ctx = append(ctx, ctx[r.IntN(len(ctx))])
		} else {
			ctx = append(ctx, r.IntN(m.Vocab))
		}
	}
}

func TestStrategiesExactUnderConcurrency(t *testing.T) {
	m := loadModel(t, tinyModel)
	scs := strategies()
	run := func(t *testing.T, opt Options, conversations int) {
		e := newEngine(t, m, opt)
		r := rand.New(rand.NewPCG(11, 12))
		system := repetitive(r, 40, m.Vocab)
		var mu sync.Mutex
		kept := map[string]*[2]int{}
		var wg sync.WaitGroup
		for c := range conversations {
			sc := scs[c%len(scs)]
			cr := rand.New(rand.NewPCG(uint64(c), 5))
			// Conversations of different strategies share prefixes.
			prefix := append(slices.Clone(system), repetitive(rand.New(rand.NewPCG(uint64(c%3), 6)), 10+c%3*9, m.Vocab)...)
			n := []int{16, 8, 5, 33}[c%4]
			wg.Go(func() {
				var k [2]int
				strategyConversation(t, e, m, cr, prefix, n, sc, &k)
				mu.Lock()
				if kept[sc.name] == nil {
					kept[sc.name] = new([2]int)
				}
				kept[sc.name][0] += k[0]
				kept[sc.name][1] += k[1]
				mu.Unlock()
			})
		}
		wg.Wait()
		for name, k := range kept {
			t.Logf("%s: %d proposal tokens kept, %d rejected", name, k[0], k[1])
		}
		if k := kept["hybrid-trust0-min1"]; k != nil && (k[0] == 0 || k[1] == 0) {
			t.Errorf("hybrid kept %d and rejected %d proposal tokens: the test does not exercise both", k[0], k[1])
		}
		if s := e.Stats(); s.KVBytesInUse > s.KVBytesBudget {
			t.Errorf("KV bytes in use %d exceed the budget %d", s.KVBytesInUse, s.KVBytesBudget)
		}
	}
	t.Run("sequential", func(t *testing.T) { run(t, Options{MaxBatch: 1}, len(scs)) })
	t.Run("batch8", func(t *testing.T) { run(t, Options{MaxBatch: 8, PrefillChunk: 24}, scale(2*len(scs))) })
	t.Run("tiny-kv-budget", func(t *testing.T) {
		budget := int64(2*(m.MaxContext/model.BlockSize)+3) * int64(m.BlockBytes())
		run(t, Options{MaxBatch: 8, KVCacheBytes: budget}, scale(len(scs)))
	})
}

func TestEngineDefaultStrategy(t *testing.T) {
	m := loadModel(t, tinyModel)
	e := newEngine(t, m, Options{Strategy: draft.PLD{}})
	ctx := []int{1, 2, 3, 10, 11, 12, 1, 2, 3}
	res, err := e.Draft(context.Background(), ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{10, 11, 12}; !slices.Equal(res.Draft, want) || res.Strategy != "pld" || res.Sources.FromLookup != 3 {
		t.Errorf("have %v from %q (%+v); want %v from pld", res.Draft, res.Strategy, res.Sources, want)
	}
	if _, err := New(m, Options{Strategy: badStrategy{}}); err == nil {
		t.Error("a strategy that is neither model-free nor guided was accepted")
	}
}

type badStrategy struct{}

func (badStrategy) Name() string { return "bad" }

// TestRecallKeepsModelChain replays session-like conversations with hybrid's
// recall (the previous draft after the accepted tokens, Item.Recall): every
// draft must equal model.Generate's chain, whether the bonus continues the
// old chain (recalled tokens kept), replaces one of its tokens, leaves one
// out or is unrelated (recalled tokens rejected), concurrently in one batch.
func TestRecallKeepsModelChain(t *testing.T) {
	m := loadModel(t, tinyModel)
	e := newEngine(t, m, Options{MaxBatch: 4})
	hyb := draft.Hybrid{Opt: draft.Options{MinMatch: 4, Eager: true}}
	var mu sync.Mutex
	var total draft.Stats
	var wg sync.WaitGroup
	for c := range scale(8) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 77))
			ctx := repetitive(r, 12+r.IntN(40), m.Vocab)
			n := []int{8, 16, 5, 12}[c%4]
			var recall []int
			for len(ctx)+n+2 < m.MaxContext {
				res, errs, err := e.DraftBatch(context.Background(), []Item{{Tokens: ctx, N: n, Strategy: hyb, Recall: recall}})
				if err == nil {
					err = errs[0]
				}
				if err != nil {
					t.Errorf("conversation %d: %v", c, err)
					return
				}
				want, err := m.Generate(ctx, min(n, m.MaxContext-len(ctx)))
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.Equal(res[0].Draft, want) {
					t.Errorf("conversation %d, context %v, recall %v:\nhave %v\nwant %v (model)", c, ctx, recall, res[0].Draft, want)
					return
				}
				mu.Lock()
				st := res[0].Sources
				total.Recalled += st.Recalled
				total.RecallRejected += st.RecallRejected
				mu.Unlock()
				d := res[0].Draft
				k := r.IntN(len(d))
				var bonus int
				switch r.IntN(4) {
				case 0: // the old chain's own token: recall continues it
					bonus = d[k]
				case 1: // the one after it: the target left d[k] out
					bonus = d[min(k+1, len(d)-1)]
				default: // another token
					bonus = r.IntN(m.Vocab)
				}
				ctx = append(append(slices.Clone(ctx), d[:k]...), bonus)
				recall = d[k:]
			}
		})
	}
	wg.Wait()
	t.Logf("recalled tokens: %d kept, %d rejected", total.Recalled, total.RecallRejected)
	if total.Recalled == 0 || total.RecallRejected == 0 {
		t.Errorf("recalled tokens: %d kept, %d rejected; the test must exercise both", total.Recalled, total.RecallRejected)
	}
}

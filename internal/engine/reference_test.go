// The reference a conversation's drafts are checked against in the
// concurrency and eviction tests: model.Forward on a private, linear KV
// cache, one sequence at a time — none of what the engine adds (batching,
// the prefix tree, paged and shared blocks, eviction). A new context reuses
// the K/V of its common prefix with the tokens the reference computed last,
// so a conversation costs the reference O(context) tokens instead of a full
// model.Generate prefill per request (which made these tests most of the
// suite's time); the first context of each conversation is also checked
// against model.Generate itself.
package engine

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/draftd/draftd/internal/model"
)

type refConv struct {
	m      *model.Model
	blocks []*model.Block // linear: block i holds positions [16i, 16i+16)
	toks   []int          // the tokens whose K/V the blocks hold, positions [0, len)
	calls  int
}

// generate is model.Generate(ctx, n) computed incrementally.
func (r *refConv) generate(ctx []int, n int) ([]int, error) {
	m := r.m
	if len(ctx) == 0 || len(ctx) >= m.MaxContext {
		return m.Generate(ctx, n) // its error
	}
	n = min(n, m.MaxContext-len(ctx))
	p := 0
	for p < len(r.toks) && p < len(ctx)-1 && r.toks[p] == ctx[p] {
		p++
	}
	r.toks = r.toks[:p]
	s := &model.Seq{Tokens: slices.Clone(ctx[p:]), Pos: p}
	out := make([]int, 0, n)
	for len(out) < n {
		for len(r.blocks)*model.BlockSize < s.Pos+len(s.Tokens) {
			r.blocks = append(r.blocks, m.NewBlock())
		}
		s.Blocks = r.blocks
		if err := m.Forward([]*model.Seq{s}); err != nil {
			return out, err
		}
		r.toks = append(r.toks, s.Tokens...)
		out = append(out, s.Next)
		s.Pos += len(s.Tokens)
		s.Tokens = []int{s.Next}
	}
	return out, nil
}

// check compares a draft with the reference on the same context (and, on
// the conversation's first request, with model.Generate too).
func (r *refConv) check(t *testing.T, ctxTokens []int, n int, have []int) bool {
	t.Helper()
	r.calls++
	if r.calls == 1 && !checkDraft(t, r.m, ctxTokens, n, have) {
		return false
	}
	want, err := r.generate(ctxTokens, n)
	if err != nil {
		t.Errorf("reference(len %d, n %d): %v", len(ctxTokens), n, err)
		return false
	}
	if !slices.Equal(have, want) {
		t.Errorf("context len %d, n %d: draft differs from the reference:\nhave %v\nwant %v", len(ctxTokens), n, have, want)
		return false
	}
	return true
}

// TestReferenceMatchesGenerate checks the incremental reference itself
// against model.Generate on a conversation that extends, diverges inside a
// block, shrinks and reaches the context limit.
func TestReferenceMatchesGenerate(t *testing.T) {
	for _, opt := range []model.Options{{Threads: 2}, {Threads: 2, KVF32: true}, {Threads: 2, KV: model.KVQ8_0}} {
		m, err := model.Load(tinyModel, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		r := rand.New(rand.NewPCG(11, 12))
		ref := &refConv{m: m}
		ctx := randTokens(r, 20, m.Vocab)
		for step := range 12 {
			switch step % 4 {
			case 0: // accept a draft and add a bonus token
				d, _ := ref.generate(ctx, 8)
				ctx = append(append(ctx, d[:r.IntN(len(d)+1)]...), r.IntN(m.Vocab))
			case 1: // diverge inside the cached part
				ctx = append(ctx[:len(ctx)-5:len(ctx)-5], randTokens(r, 7, m.Vocab)...)
			case 2: // a prefix of what was computed
				ctx = ctx[:len(ctx)-3]
			case 3: // grow towards the context limit
				ctx = append(ctx, randTokens(r, m.MaxContext/8, m.Vocab)...)
			}
			ctx = ctx[:min(len(ctx), m.MaxContext-1)]
			want, err := m.Generate(ctx, 16)
			if err != nil {
				t.Fatal(err)
			}
			have, err := ref.generate(ctx, 16)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(have, want) {
				t.Fatalf("kv %v, step %d, context %d: reference %v; Generate %v", m.KVType(), step, len(ctx), have, want)
			}
		}
	}
}

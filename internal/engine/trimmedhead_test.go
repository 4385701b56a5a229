// The trimmed draft LM head (model.SetDraftVocab, serve --draft-vocab) in
// the engine: its chain is the whole head's up to the first position where
// the whole head's greedy token is outside the kept ids, and there it is the
// argmax over the kept ids. The reference is the whole head's logits
// (model.ForwardLogits over the full sequence at every step: every row, no
// subset matrix, no prefix cache), never the code under test.
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

// nearTie is the top-2 logit margin under which the reference's greedy id
// is not compared: the logits path and the argmax kernel may round apart
// there, with or without a trimmed head.
const nearTie = 1e-3

// refStep is the reference at one position of a chain: the whole head's
// greedy id, and the greedy id over the kept ids, each with its margin.
type refStep struct {
	full, kept             int
	fullMargin, keptMargin float32
}

// refChain follows the whole head's greedy chain of n tokens after ctx
// (steps[i].full is token i) and records, at each position, the argmax over
// keep as well.
func refChain(t *testing.T, m *model.Model, ctx []int, n int, keep map[int]bool) []refStep {
	t.Helper()
	seqTokens := slices.Clone(ctx)
	var steps []refStep
	for range n {
		var blocks []*model.Block
		for range (len(seqTokens) + model.BlockSize - 1) / model.BlockSize {
			blocks = append(blocks, m.NewBlock())
		}
		logits := make([]float32, len(seqTokens)*m.Vocab)
		if err := m.ForwardLogits([]*model.Seq{{Tokens: seqTokens, Blocks: blocks}}, logits); err != nil {
			t.Fatal(err)
		}
		last := logits[(len(seqTokens)-1)*m.Vocab:]
		top2 := func(in func(int) bool) (int, float32) {
			best, second := -1, -1
			for id := range m.Vocab {
				if !in(id) {
					continue
				}
				switch {
				case best < 0 || last[id] > last[best]:
					best, second = id, best
				case second < 0 || last[id] > last[second]:
					second = id
				}
			}
			if second < 0 {
				return best, 1e30
			}
			return best, last[best] - last[second]
		}
		var st refStep
		st.full, st.fullMargin = top2(func(int) bool { return true })
		st.kept, st.keptMargin = top2(func(id int) bool { return keep[id] })
		steps = append(steps, st)
		seqTokens = append(seqTokens, st.full)
	}
	return steps
}

// checkTrimmedChain checks have (a trimmed head's draft) against ref: equal
// to the whole head's chain before the first excluded token, the kept argmax
// at it, only kept ids after it. It returns the first excluded position
// (len(ref) when none).
func checkTrimmedChain(t *testing.T, what string, have []int, ref []refStep, keep map[int]bool) int {
	t.Helper()
	if len(have) != len(ref) {
		t.Fatalf("%s: draft of %d tokens; want %d", what, len(have), len(ref))
	}
	for i, id := range have {
		if !keep[id] {
			t.Fatalf("%s: token %d (id %d) is outside the kept ids", what, i, id)
		}
	}
	for i, st := range ref {
		if !keep[st.full] { // the first excluded token: the kept argmax here, nothing compared after
			if have[i] != st.kept && st.keptMargin >= nearTie {
				t.Fatalf("%s: at the first excluded position %d (whole head's id %d not kept) the draft has %d; the argmax over the kept ids is %d (margin %g)\ndraft %v\nwhole %v",
					what, i, st.full, have[i], st.kept, st.keptMargin, have, fullIDs(ref))
			}
			return i
		}
		if st.fullMargin < nearTie {
			return i // a near-tie of the reference: not compared from here
		}
		if have[i] != st.full {
			t.Fatalf("%s: token %d is %d; the whole head's chain has %d there, and every token of it up to there is kept\ndraft %v\nwhole %v",
				what, i, have[i], st.full, have, fullIDs(ref))
		}
	}
	return len(ref)
}

func fullIDs(ref []refStep) []int {
	ids := make([]int, len(ref))
	for i, st := range ref {
		ids[i] = st.full
	}
	return ids
}

// TestTrimmedHeadChain drafts through the engine (batched, with its prefix
// cache, strategies model and hybrid) on models of several LM-head storage
// types with a trimmed head, and checks every chain against the whole
// head's reference. The kept ids are chosen around the whole head's chain
// so that its first excluded token falls at every position 0 … n (n: the
// whole chain kept), plus random subsets.
func TestTrimmedHeadChain(t *testing.T) {
	const n = 10
	models := []string{"tiny-qwen3-q8_0", "tiny-qwen2-q4_0", "tiny-qwen3-f32", "tiny-qwen3k-q4_k_m"}
	if raceEnabled {
		models = models[:2]
	}
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			path := "../../testdata/models/" + name + ".gguf"
			ref := loadModel(t, path) // the whole head
			r := rand.New(rand.NewPCG(39, uint64(len(name))))
			type trial struct {
				ctx  []int
				keep []int
				exit int // the position of the first excluded token wanted (-1: random subset)
			}
			var trials []trial
			for k := range 2*(n+1) + 4 {
				// Contexts with a repeated chunk, so that hybrid proposes
				// lookup tokens.
				chunk := randTokens(r, 3+r.IntN(8), ref.Vocab)
				ctx := append(append(randTokens(r, 1+r.IntN(20), ref.Vocab), chunk...), randTokens(r, r.IntN(10), ref.Vocab)...)
				ctx = append(ctx, chunk[:1+r.IntN(len(chunk))]...)
				if k >= 2*(n+1) {
					trials = append(trials, trial{ctx: ctx, keep: r.Perm(ref.Vocab)[:1+r.IntN(ref.Vocab/2)], exit: -1})
					continue
				}
				trials = append(trials, trial{ctx: ctx, exit: k % (n + 1)})
			}
			// The kept ids around each whole-head chain: its tokens before
			// the exit, random others, never the token at the exit.
			for i := range trials {
				tr := &trials[i]
				if tr.exit < 0 {
					continue
				}
				whole := fullIDs(refChain(t, ref, tr.ctx, n, map[int]bool{}))
				ids := map[int]bool{}
				for _, id := range r.Perm(ref.Vocab)[:ref.Vocab/4] {
					ids[id] = true
				}
				for _, id := range whole[:tr.exit] {
					ids[id] = true
				}
				if tr.exit < n {
					if slices.Contains(whole[:tr.exit], whole[tr.exit]) {
						tr.exit = -1 // the chain repeats that token: it cannot be its first excluded one
					} else {
						delete(ids, whole[tr.exit])
					}
				}
				for id := range ids {
					tr.keep = append(tr.keep, id)
				}
			}
			for _, strategy := range []string{draft.NameModel, draft.NameHybrid} {
				t.Run(strategy, func(t *testing.T) {
					m := loadModel(t, path)
					s, err := draft.New(strategy, draft.DefaultOptions())
					if err != nil {
						t.Fatal(err)
					}
					e := newEngine(t, m, Options{Strategy: s, MaxBatch: 4})
					exits := map[int]int{}
					for _, tr := range trials {
						if err := m.SetDraftVocab(nil); err != nil {
							t.Fatal(err)
						}
						// SetDraftVocab is not safe during a step: the engine is
						// idle between trials (every draft has returned).
						if err := m.SetDraftVocab(tr.keep); err != nil {
							t.Fatal(err)
						}
						keep := map[int]bool{}
						for _, id := range tr.keep {
							keep[id] = true
						}
						want := refChain(t, ref, tr.ctx, n, keep)
						// The same context three times at once (batched; the
						// later ones may hit the prefix cache), then once more.
						var wg sync.WaitGroup
						drafts := make([][]int, 4)
						errs := make([]error, 4)
						for j := range 3 {
							wg.Go(func() {
								res, err := e.Draft(context.Background(), tr.ctx, n)
								drafts[j], errs[j] = res.Draft, err
							})
						}
						wg.Wait()
						res, err := e.Draft(context.Background(), tr.ctx, n)
						drafts[3], errs[3] = res.Draft, err
						for j, d := range drafts {
							if errs[j] != nil {
								t.Fatal(errs[j])
							}
							exit := checkTrimmedChain(t, fmt.Sprintf("%d kept ids, context %v, draft %d", len(tr.keep), tr.ctx, j), d, want, keep)
							if j == 0 {
								exits[exit]++
							}
							if tr.exit >= 0 && exit > tr.exit {
								t.Fatalf("the kept ids leave out the whole head's token %d; the check found the first excluded one at %d", tr.exit, exit)
							}
						}
					}
					t.Logf("first excluded position → trials: %v", exits)
				})
			}
		})
	}
}

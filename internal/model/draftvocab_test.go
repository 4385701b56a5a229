package model_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/model"
)

// TestDraftVocab checks the trimmed head: the greedy id of Forward with a
// draft vocabulary is the argmax, over that subset only, of the full logits
// of ForwardLogits (an independent path: every row, no subset matrix), for
// random subsets and contexts; ids outside the subset never come out; bad
// subsets are errors; nil restores the full head.
func TestDraftVocab(t *testing.T) {
	m, err := model.Load(filepath.Join(modelsDir, "tiny-qwen3-q8_0.gguf"), model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(5, 6))
	for _, bad := range [][]int{{}, {-1}, {m.Vocab}, {3, 3}} {
		if err := m.SetDraftVocab(bad); err == nil {
			t.Errorf("SetDraftVocab(%v): no error", bad)
		}
	}
	for trial := range 20 {
		keep := r.Perm(m.Vocab)[:1+r.IntN(m.Vocab/2)]
		in := map[int]bool{}
		for _, id := range keep {
			in[id] = true
		}
		ctx := make([]int, 1+r.IntN(40))
		for i := range ctx {
			ctx[i] = r.IntN(m.Vocab)
		}
		logits := make([]float32, len(ctx)*m.Vocab)
		blocks := func() []*model.Block {
			var bs []*model.Block
			for range (len(ctx) + model.BlockSize - 1) / model.BlockSize {
				bs = append(bs, m.NewBlock())
			}
			return bs
		}
		if err := m.ForwardLogits([]*model.Seq{{Tokens: ctx, Blocks: blocks()}}, logits); err != nil {
			t.Fatal(err)
		}
		last := logits[(len(ctx)-1)*m.Vocab:]
		want, second := -1, -1
		for id := range m.Vocab {
			if !in[id] {
				continue
			}
			switch {
			case want < 0 || last[id] > last[want]:
				want, second = id, want
			case second < 0 || last[id] > last[second]:
				second = id
			}
		}
		if err := m.SetDraftVocab(keep); err != nil {
			t.Fatal(err)
		}
		if m.DraftVocab() != len(keep) {
			t.Fatalf("DraftVocab %d; want %d", m.DraftVocab(), len(keep))
		}
		s := &model.Seq{Tokens: ctx, Blocks: blocks()}
		if err := m.Forward([]*model.Seq{s}); err != nil {
			t.Fatal(err)
		}
		if !in[s.Next] {
			t.Fatalf("trial %d: greedy id %d is outside the draft vocabulary", trial, s.Next)
		}
		if s.Next != want && !(second >= 0 && last[want]-last[second] < 1e-3) {
			t.Fatalf("trial %d (%d ids kept): greedy id %d; want %d (logit %g vs %g)", trial, len(keep), s.Next, want, last[s.Next], last[want])
		}
	}
	if err := m.SetDraftVocab(nil); err != nil || m.DraftVocab() != m.Vocab {
		t.Fatalf("SetDraftVocab(nil): %v, DraftVocab %d; want the full %d", err, m.DraftVocab(), m.Vocab)
	}
}

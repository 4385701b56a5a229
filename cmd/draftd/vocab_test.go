package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDraftVocabIDs checks how serve reads a `draftd vocab` ranking: the
// special tokens always, then the most frequent ids up to n; a ranking too
// short, an n below the specials, a vocabulary larger than the model's and
// out-of-range or repeated ids are errors naming the problem.
func TestDraftVocabIDs(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "v.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(`{"vocab_size":10,"special":[8,9],"ranked":[3,1,4,0,2,5,6,7],"counts":[9,7,5,3,0,0,0,0]}`)
	keep, err := draftVocabIDs(good, 5, 12)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{8, 9, 3, 1, 4}; !slices.Equal(keep, want) {
		t.Fatalf("have %v; want %v", keep, want)
	}
	for _, c := range []struct {
		body    string
		n, rows int
		want    string
	}{
		{`{"vocab_size":10,"special":[8,9],"ranked":[3,1]}`, 5, 12, "ranks only 2 ids"},
		{`{"vocab_size":10,"special":[8,9],"ranked":[3,1]}`, 1, 12, "fewer than the 2 special"},
		{`{"vocab_size":20,"special":[8,9],"ranked":[3,1]}`, 3, 12, "the model has 12 rows"},
		{`{"vocab_size":10,"special":[8,9],"ranked":[3,3]}`, 4, 12, "listed twice"},
		{`{"vocab_size":10,"special":[8,9],"ranked":[30,3]}`, 4, 12, "out of range"},
		{`{"vocab_size":10,`, 4, 12, "unexpected end"},
	} {
		_, err := draftVocabIDs(write(c.body), c.n, c.rows)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s n=%d: have %v; want an error with %q", c.body, c.n, err, c.want)
		}
	}
}

// TestDraftVocabFileBounded (issue 37): a --draft-vocab-file larger than
// any ranking `draftd vocab` writes (a sparse file here) is a usage error
// naming the file and the bound, found from its size without reading it.
func TestDraftVocabFileBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxVocabFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = Run(context.Background(), []string{"serve", "--model", tinyGGUF, "--draft-vocab", "10", "--draft-vocab-file", p})
	if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "at most") {
		t.Errorf("have %v; want a usage error naming %s and its bound", err, p)
	}
}

// TestVocabFromServe: a ranking from a real serve process's traffic
// (GET /v1/vocab) is a --draft-vocab-file another serve starts with. The
// model carries a tokenizer (265 ids, padded to 512): its special tokens are
// listed apart, the padding ids left out, the ids the target wrote (accepted
// + bonus of session steps) ranked first; a head of 6 rows drafts only the
// 4 special ids and the 2 most accepted.
func TestVocabFromServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds draftd and serves a model")
	}
	dir := t.TempDir()
	mpath := filepath.Join(dir, "tiny-tok.gguf")
	withTokenizer(t, tinyGGUF, mpath, exportTokenizer(t, 512))
	get := func(addr string) []byte {
		resp, err := http.Get("http://" + addr + "/v1/vocab")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /v1/vocab: %d %s %v", resp.StatusCode, b, err)
		}
		return b
	}
	s := startServe(t, true, "--model", mpath, "--strategy", "model")
	st, _, b := s.post(`{"session":"c1","tokens":[40,41,42,43,44,45],"n":4}`)
	if st != 200 {
		t.Fatalf("establish: %d %s", st, b)
	}
	// Two steps: the bonus tokens 100 and 101 the target wrote, twice and
	// once; whatever the draft, accepted 0 adds only them.
	for _, bonus := range []int{100, 100, 101} {
		if st, _, b := s.post(fmt.Sprintf(`{"session":"c1","accepted":0,"bonus":%d,"n":4}`, bonus)); st != 200 {
			t.Fatalf("step: %d %s", st, b)
		}
	}
	body := get(s.addr)
	var f vocabFile
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatal(err)
	}
	if f.VocabSize != 512 || !slices.Equal(f.Special, []int{261, 262, 263, 264}) || len(f.Ranked) != 261 ||
		!slices.Equal(f.Ranked[:2], []int{100, 101}) || !slices.Equal(f.Counts[:3], []int64{2, 1, 0}) ||
		f.Traffic == nil || f.Traffic.AcceptedTokens != 3 || f.Traffic.ContextTokens != 6 {
		t.Fatalf("ranking: vocab %d, special %v, %d ranked, top %v counts %v, traffic %+v", f.VocabSize, f.Special, len(f.Ranked), f.Ranked[:3], f.Counts[:3], f.Traffic)
	}
	rank := filepath.Join(dir, "traffic.json")
	if err := os.WriteFile(rank, body, 0o644); err != nil {
		t.Fatal(err)
	}
	// The traffic's ids first, the corpus orders the rest.
	merged := filepath.Join(dir, "merged.json")
	if err := Run(context.Background(), []string{"vocab", "--tokenizer", mpath, "--source", "prose", "--max-bytes", "20000", "--traffic", rank, "--out", merged}); err != nil {
		t.Fatal(err)
	}
	mb, err := os.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	var mf vocabFile
	if err := json.Unmarshal(mb, &mf); err != nil {
		t.Fatal(err)
	}
	if len(mf.Ranked) != 261 || !slices.Equal(mf.Ranked[:2], []int{100, 101}) || !slices.Equal(slices.Sorted(slices.Values(mf.Ranked[2:8])), []int{40, 41, 42, 43, 44, 45}) || len(mf.CorpusCounts) != 261 ||
		mf.Traffic == nil || mf.Traffic.AcceptedTokens != 3 || mf.CorpusCounts[8] == 0 {
		t.Fatalf("merged ranking: %d ranked, top %v, %d corpus counts (9th %v), traffic %+v", len(mf.Ranked), mf.Ranked[:9], len(mf.CorpusCounts), mf.CorpusCounts[8:9], mf.Traffic)
	}
	for i := 3; i < len(mf.Ranked); i++ { // the context's ids (same traffic counts), then the rest: by corpus counts
		if i == 8 {
			continue
		}
		if c, p := mf.CorpusCounts[i], mf.CorpusCounts[i-1]; c > p || c == p && mf.Ranked[i] < mf.Ranked[i-1] {
			t.Fatalf("among equal traffic counts: id %d (corpus count %d) after id %d (%d)", mf.Ranked[i], c, mf.Ranked[i-1], p)
		}
	}
	// A corpus ranking is not traffic.
	err = Run(context.Background(), []string{"vocab", "--tokenizer", mpath, "--source", "prose", "--max-bytes", "1", "--traffic", merged + ".x", "--out", filepath.Join(dir, "x.json")})
	if err == nil {
		t.Fatal("--traffic of a missing file: no error")
	}
	if err := os.WriteFile(merged+".x", []byte(`{"vocab_size":512,"special":[],"ranked":[1],"counts":[3]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), []string{"vocab", "--tokenizer", mpath, "--source", "prose", "--max-bytes", "1", "--traffic", merged + ".x", "--out", filepath.Join(dir, "x.json")})
	if err == nil || !strings.Contains(err.Error(), "not a ranking from GET /v1/vocab") {
		t.Fatalf("--traffic of a corpus ranking: %v", err)
	}
	trimmed := startServe(t, true, "--model", mpath, "--strategy", "model", "--draft-vocab", "6", "--draft-vocab-file", rank)
	for _, ctx := range []string{"[40,41,42,43,44,45]", "[1,2,3]", "[200,7,99,13,13,13]"} {
		st, _, b := trimmed.post(`{"tokens":` + ctx + `,"n":8}`)
		if st != 200 {
			t.Fatalf("draft: %d %s", st, b)
		}
		for _, id := range draftOf(t, b) {
			if !slices.Contains([]int{261, 262, 263, 264, 100, 101}, id) {
				t.Fatalf("context %s: the 6-row head drafted id %d, not a kept one: %s", ctx, id, b)
			}
		}
	}
}

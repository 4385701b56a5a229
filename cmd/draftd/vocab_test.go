package main

import (
	"context"
	"errors"
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

package vocabrank

import (
	"slices"
	"strings"
	"testing"
)

// TestBuild: special ids apart, unused ids out, the normal ones by the
// count arrays in turn, then by id; each count array read off per ranked id.
func TestBuild(t *testing.T) {
	classes := []Class{Special, Normal, Normal, Unused, Normal, Normal, Normal}
	acc := []int64{9, 1, 0, 9, 1, 0, 0}
	ctx := []int64{0, 2, 5, 0, 2, 0, 0}
	corp := []int64{0, 0, 0, 0, 7, 3, 8}
	f, err := Build(classes, acc, ctx, corp)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Special, []int{0}) || !slices.Equal(f.Ranked, []int{4, 1, 2, 6, 5}) ||
		!slices.Equal(f.Counts, []int64{1, 1, 0, 0, 0}) || !slices.Equal(f.ContextCounts, []int64{2, 2, 5, 0, 0}) ||
		!slices.Equal(f.CorpusCounts, []int64{7, 0, 0, 8, 3}) || f.VocabSize != 7 {
		t.Fatalf("%+v", f)
	}
	g, err := Build(classes, corp)
	if err != nil || !slices.Equal(g.Ranked, []int{6, 4, 5, 1, 2}) || g.ContextCounts != nil {
		t.Fatalf("one key: %+v %v", g, err)
	}
	if _, err := Build(classes, acc[:3]); err == nil {
		t.Error("short counts: no error")
	}
	f.Traffic = &Traffic{}
	a, c, err := f.TrafficCounts("f", 7)
	if err != nil || !slices.Equal(a, []int64{0, 1, 0, 0, 1, 0, 0}) || !slices.Equal(c, []int64{0, 2, 5, 0, 2, 0, 0}) {
		t.Fatalf("TrafficCounts: %v %v %v", a, c, err)
	}
	for _, bad := range []struct {
		mod  func(*File)
		want string
	}{
		{func(f *File) { f.Traffic = nil }, "not a ranking from GET /v1/vocab"},
		{func(f *File) { f.VocabSize = 8 }, "the tokenizer has 7"},
		{func(f *File) { f.Counts = f.Counts[1:] }, "want as many"},
		{func(f *File) { f.Ranked = []int{4, 4, 2, 6, 5} }, "listed twice"},
		{func(f *File) { f.Ranked = []int{4, 1, 2, 6, 70} }, "out of range"},
		{func(f *File) { f.Counts = []int64{1, -1, 0, 0, 0} }, "negative"},
	} {
		h := f
		h.Ranked, h.Counts = slices.Clone(f.Ranked), slices.Clone(f.Counts)
		bad.mod(&h)
		if _, _, err := h.TrafficCounts("f", 7); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("have %v; want an error with %q", err, bad.want)
		}
	}
	keep, err := f.Keep("f", 3, 7)
	if err != nil || !slices.Equal(keep, []int{0, 4, 1}) {
		t.Fatalf("Keep: %v %v", keep, err)
	}
}

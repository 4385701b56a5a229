package draft

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/cputime"
)

// naiveQuery is the definition Index.Query implements, by brute force over
// every earlier end position.
func naiveQuery(t []int, choice Choice) (Match, bool) {
	end := len(t) - 1
	best := 0
	var at []int // end positions with the best length, most recent first
	for i := end - 1; i >= 0; i-- {
		l := 0
		for l < MaxMatch && l <= i && t[i-l] == t[end-l] {
			l++
		}
		switch {
		case l == 0 || l < best:
		case l > best:
			best, at = l, []int{i}
		default:
			at = append(at, i)
		}
	}
	if best == 0 {
		return Match{}, false
	}
	pick := at[0]
	if choice == Frequent {
		count := map[int]int{}
		for _, i := range at {
			count[t[i+1]]++
		}
		for _, i := range at { // first (most recent) with the highest count
			if count[t[i+1]] > count[t[pick+1]] {
				pick = i
			}
		}
	}
	return Match{Next: t[pick+1], Length: best, At: pick}, true
}

func randomText(r *rand.Rand, n, alphabet int) []int {
	t := make([]int, n)
	for i := range t {
		t[i] = r.IntN(alphabet)
	}
	return t
}

func TestIndexQueryMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, choice := range []Choice{Recent, Frequent} {
		for _, alphabet := range []int{2, 3, 8, 50, 151936} {
			for trial := range 40 {
				text := randomText(r, 1+r.IntN(300), alphabet)
				if trial%4 == 0 { // copy a span forward: long matches
					a, b := r.IntN(len(text)), r.IntN(len(text))
					text = append(text, text[min(a, b):max(a, b)]...)
				}
				x := NewIndex(text[:len(text)/2], 0, choice)
				for _, tok := range text[len(text)/2:] { // grown token by token
					x.Append(tok)
				}
				for m := len(text); m >= 1; m = m*3/4 - 1 { // and shrunk
					x.Truncate(m)
					have, hok := x.Query()
					want, wok := naiveQuery(text[:m], choice)
					if have != want || hok != wok {
						t.Fatalf("%v alphabet %d, text %v: have %+v %v; want %+v %v", choice, alphabet, text[:m], have, hok, want, wok)
					}
				}
			}
		}
	}
}

func TestIndexBoundedOnRepetition(t *testing.T) {
	text := make([]int, 1<<15) // one token repeated: every position matches
	x := NewIndex(text, 16, Recent)
	m, ok := x.Query()
	if !ok || m.Length != MaxMatch || m.Next != 0 || m.At != len(text)-2 {
		t.Fatalf("have %+v %v; want the most recent occurrence with length %d", m, ok, MaxMatch)
	}
}

func TestLookupDraft(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, choice := range []Choice{Recent, Frequent} {
		for trial := range 200 {
			ctx := randomText(r, 1+r.IntN(200), 2+trial%20)
			n := 1 + r.IntN(20)
			have := Lookup{Choice: choice}.Draft(ctx, n)
			var want []int
			text := slices.Clone(ctx)
			for len(want) < n {
				m, ok := naiveQuery(text, choice)
				if !ok {
					break
				}
				want = append(want, m.Next)
				text = append(text, m.Next)
			}
			if !slices.Equal(have, want) {
				t.Fatalf("%v ctx %v n %d: have %v; want %v", choice, ctx, n, have, want)
			}
		}
	}
	// What the strategy is for: a repeated passage is continued.
	ctx := []int{7, 1, 2, 3, 4, 5, 6, 9, 9, 1, 2, 3}
	if have, want := (Lookup{}).Draft(ctx, 4), []int{4, 5, 6, 9}; !slices.Equal(have, want) {
		t.Fatalf("have %v; want %v", have, want)
	}
	if have := (Lookup{}).Draft([]int{1, 2, 3}, 4); len(have) != 0 {
		t.Fatalf("no earlier occurrence: have %v; want none", have)
	}
}

func TestPLD(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  []int
		n    int
		want []int
	}{
		{"trigram, first match", []int{1, 2, 3, 10, 11, 1, 2, 3, 20, 21, 1, 2, 3}, 2, []int{10, 11}},
		{"trigram needs n tokens after it", []int{1, 2, 3, 10, 5, 2, 3, 30, 31, 32, 1, 2, 3}, 2, []int{10, 5}},
		{"falls back to the bigram", []int{5, 2, 3, 40, 41, 1, 2, 3}, 2, []int{40, 41}},
		{"bigram too close to the end, unigram", []int{3, 8, 8, 2, 3}, 2, []int{8, 8}},
		{"nothing", []int{1, 2, 3, 4}, 2, nil},
		{"unigram only in the suffix", []int{9, 9}, 1, nil},
	} {
		if have := (PLD{}).Draft(c.ctx, c.n); !slices.Equal(have, c.want) {
			t.Errorf("%s: have %v; want %v", c.name, have, c.want)
		}
	}
}

func TestHybridAccept(t *testing.T) {
	ctx := []int{1, 2, 3, 4, 5, 1, 2, 3}
	for _, c := range []struct {
		name   string
		trust  int
		greedy []int // model after 3, after each proposal token
		kept   int
	}{
		{"all agree", 0, []int{4, 5, 1, 2}, 3},
		{"first rejected", 0, []int{7, 5, 1, 2}, 0},
		{"second rejected", 0, []int{4, 7, 1, 2}, 1},
		{"trusted match", 3, []int{7, 7, 7, 7}, 3},
	} {
		d := Hybrid{Opt: Options{Trust: c.trust, MinMatch: 1}}.Start(ctx, 8)
		p := d.Propose(3)
		if !slices.Equal(p, []int{4, 5, 1}) {
			t.Fatalf("%s: proposal %v; want [4 5 1]", c.name, p)
		}
		if kept := d.Accept(c.greedy); kept != c.kept {
			t.Errorf("%s: kept %d; want %d", c.name, kept, c.kept)
		}
		st := d.(Counter).Stats()
		if st.Kept != c.kept || st.Rejected != 3-c.kept || st.FromModel != 1 {
			t.Errorf("%s: stats %+v", c.name, st)
		}
		// The index now holds ctx + kept proposals + the model's token.
		text := append(append(slices.Clone(ctx), p[:c.kept]...), c.greedy[c.kept])
		if !slices.Equal(d.(*hybridDrafter).x.Text(), text) {
			t.Errorf("%s: text %v; want %v", c.name, d.(*hybridDrafter).x.Text(), text)
		}
	}
	d := Hybrid{Opt: Options{MinMatch: 4}}.Start(ctx, 8)
	if p := d.Propose(3); p != nil {
		t.Errorf("match of 3 under MinMatch 4: proposal %v; want none", p)
	}
}

func TestNew(t *testing.T) {
	for _, name := range Names {
		s, err := New(name, DefaultOptions())
		if err != nil || s.Name() != name {
			t.Fatalf("New(%q) = %v, %v", name, s, err)
		}
		_, mf := s.(ModelFree)
		_, g := s.(Guided)
		if mf == g {
			t.Errorf("%s: want exactly one of ModelFree and Guided", name)
		}
	}
	var ue *UnknownError
	if _, err := New("ngram", DefaultOptions()); !errors.As(err, &ue) {
		t.Errorf("unknown name: err %v; want *UnknownError", err)
	}
	if _, err := New("hybrid", Options{MinMatch: 0}); err == nil {
		t.Error("MinMatch 0 accepted")
	}
}

// BenchmarkLookup is one lookup request on a 32k-token context of real-text
// statistics: a Zipf-distributed vocabulary with repeated passages.
func BenchmarkLookup(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	z := rand.NewZipf(r, 1.1, 2, 151935)
	ctx := make([]int, 0, 32768)
	for len(ctx) < 32768 {
		if len(ctx) > 1000 && r.IntN(10) == 0 { // a repeated passage
			a := r.IntN(len(ctx) - 200)
			ctx = append(ctx, ctx[a:a+1+r.IntN(200)]...)
			continue
		}
		ctx = append(ctx, int(z.Uint64()))
	}
	ctx = ctx[:32768]
	for _, s := range []struct {
		name string
		d    ModelFree
	}{{"lookup", Lookup{}}, {"lookup-frequent", Lookup{Choice: Frequent}}, {"pld", PLD{}}} {
		b.Run(s.name+"/ctx=32768/n=16", func(b *testing.B) {
			c0 := cputime.Process()
			for b.Loop() {
				s.d.Draft(ctx, 16)
			}
			reportCPU(b, c0)
		})
	}
	b.Run("index/ctx=32768", func(b *testing.B) {
		c0 := cputime.Process()
		for b.Loop() {
			NewIndex(ctx, 16, Recent)
		}
		reportCPU(b, c0)
	})
}

// reportCPU adds the process's CPU time per iteration since c0 (the
// benchmark runs on one goroutine; the garbage collector's share is in it).
func reportCPU(b *testing.B, c0 time.Duration) {
	if c := cputime.Process() - c0; c > 0 {
		b.ReportMetric(float64(c.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func TestHybridRecall(t *testing.T) {
	on := Options{MinMatch: 4, Eager: true}
	// The previous draft was 20 21 22 23 24 25; the target accepted none
	// and put 9 (the bonus, ctx's last token) in place of 20.
	ctx := []int{1, 2, 3, 9}
	rec := []int{20, 21, 22, 23, 24, 25}
	start := func(opt Options, ctx, rec []int) Drafter { return Hybrid{Opt: opt}.StartRecall(ctx, 8, rec) }

	d := start(on, ctx, rec)
	if p := d.Propose(7); !slices.Equal(p, []int{21, 22, 23, 24}) {
		t.Fatalf("after a replaced token: proposal %v; want the rest of the old chain, %d tokens: [21 22 23 24]", p, eagerRows)
	}
	if p := start(on, ctx, rec).Propose(2); !slices.Equal(p, []int{21, 22}) {
		t.Errorf("room 2: proposal %v; want [21 22]", p)
	}
	// The model agrees with 21 and 22, then says 30 instead of 23: the
	// chain took 30 in 23's place, so 24 25 are proposed next.
	if kept := d.Accept([]int{21, 22, 30, 24, 25}); kept != 2 {
		t.Fatalf("kept %d; want 2", kept)
	}
	if p := d.Propose(4); !slices.Equal(p, []int{24, 25}) {
		t.Errorf("after a substitution: proposal %v; want [24 25]", p)
	}
	st := d.(Counter).Stats()
	if st.Recalled != 2 || st.RecallRejected != 2 || st.Kept != 2 || st.FromModel != 1 {
		t.Errorf("stats %+v; want 2 recalled kept, 2 rejected", st)
	}

	// The bonus is the old chain's second token (the target left 20 out).
	if p := start(on, []int{1, 2, 3, 21}, rec).Propose(8); !slices.Equal(p, []int{22, 23, 24, 25}) {
		t.Errorf("bonus = old second token: proposal %v; want [22 23 24 25]", p)
	}
	// The model inserts a token before the old chain goes on.
	d = start(on, ctx, rec)
	d.Propose(8)
	d.Accept([]int{40, 41, 41, 41, 41, 41}) // 40 in place of 21
	d.Propose(8)                            // 22 23 24 25
	d.Accept([]int{21, 0, 0, 0, 0})         // the model says 21: 22 is still to come
	if p := d.Propose(8); !slices.Equal(p, []int{22, 23, 24, 25}) {
		t.Errorf("after an inserted token: proposal %v; want [22 23 24 25]", p)
	}

	// Two recalled proposals in a row rejected at once: recall stops, and
	// lookup proposes again.
	lctx := []int{5, 6, 7, 8, 50, 5, 6, 7, 8, 9}
	d = start(on, lctx, []int{60, 61, 62, 63, 64, 65, 66})
	for i, want := range [][]int{{61, 62, 63, 64}, {62, 63, 64, 65}} {
		if p := d.Propose(8); !slices.Equal(p, want) {
			t.Fatalf("miss %d: proposal %v; want %v", i, p, want)
		}
		d.Accept([]int{70 + i, 0, 0, 0, 0, 0, 0})
	}
	if p := d.Propose(8); len(p) > 0 && p[0] >= 60 {
		t.Errorf("after %d misses: proposal %v still recalled", maxRecallMiss, p)
	}

	// In a batch of more than SmallBatch sequences: no recall, and lookup
	// proposes only from MinMatch on; in a small one from a match of 1.
	short := []int{1, 2, 3, 7, 1, 9} // the suffix 9 never occurred; 1 did
	big := start(on, ctx, rec)
	big.(BatchSizer).Batch(SmallBatch + 1)
	if p := big.Propose(8); p != nil {
		t.Errorf("batch of %d: proposal %v; want none", SmallBatch+1, p)
	}
	big.(BatchSizer).Batch(SmallBatch)
	if p := big.Propose(8); !slices.Equal(p, rec[1:5]) {
		t.Errorf("batch of %d: proposal %v; want %v", SmallBatch, p, rec[1:5])
	}
	d = Hybrid{Opt: on}.Start(short[:5], 8)
	if p := d.Propose(8); !slices.Equal(p, []int{2}) {
		t.Errorf("eager lookup after a match of 1: proposal %v; want [2]", p)
	}
	d.(BatchSizer).Batch(SmallBatch + 1)
	if p := d.Propose(8); p != nil {
		t.Errorf("lookup in a big batch after a match of 1 (MinMatch 4): proposal %v; want none", p)
	}

	// A long match: lookup's proposal is capped at eagerRows tokens in a
	// small batch only.
	long := []int{11, 12, 13, 14, 15, 16, 17, 18, 19, 99, 11, 12, 13, 14, 15, 16}
	d = Hybrid{Opt: on}.Start(long, 16)
	if p := d.Propose(12); !slices.Equal(p, []int{17, 18, 19, 99}) {
		t.Errorf("eager lookup: proposal %v; want [17 18 19 99]", p)
	}
	d.(BatchSizer).Batch(SmallBatch + 1)
	if p := d.Propose(12); !slices.Equal(p, []int{17, 18, 19, 99, 11, 12}) {
		t.Errorf("lookup in a big batch: proposal %v; want the 6 tokens of its match [17 18 19 99 11 12]", p)
	}

	// No recall when it is off, when lookup tokens may be trusted (the
	// draft would change), or when there is nothing after the replaced token.
	for _, c := range []struct {
		name string
		opt  Options
		rec  []int
	}{
		{"off", Options{MinMatch: 4}, rec},
		{"trust", Options{MinMatch: 4, Trust: 8, Eager: true}, rec},
		{"one token", on, rec[:1]},
	} {
		if p := start(c.opt, ctx, c.rec).Propose(8); p != nil {
			t.Errorf("%s: proposal %v; want none", c.name, p)
		}
	}
}

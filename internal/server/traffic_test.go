// GET /v1/vocab on a real server: the counts of the ranking equal the
// tokens the test sent (contexts of plain requests and of established
// sessions, accepted draft tokens + bonus of session steps; failed requests
// not counted), counted independently here; the order is the documented
// one; special ids stay apart and unused ids out; a backend that cannot
// classify its ids answers 404.

package server

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/vocabrank"
)

// classesBackend gives a backend the token classes of a tokenizer.
type classesBackend struct {
	Backend
	classes []vocabrank.Class
}

func (b classesBackend) Info() BackendInfo {
	i := b.Backend.Info()
	i.TokenClasses = func() ([]vocabrank.Class, error) { return b.classes, nil }
	return i
}

func TestVocabFromTraffic(t *testing.T) {
	classes := make([]vocabrank.Class, tinyVocab-6) // a tokenizer smaller than the model's rows
	classes[0], classes[1] = vocabrank.Special, vocabrank.Special
	for id := len(classes) - 8; id < len(classes); id++ {
		classes[id] = vocabrank.Unused
	}
	ts := startHealthy(t, Config{Open: tinyOpen(engine.Options{}, func(b Backend) Backend { return classesBackend{b, classes} })})
	r := rand.New(rand.NewPCG(39, 3))
	ctxWant, accWant := make([]int64, tinyVocab), make([]int64, tinyVocab)
	count := func(into []int64, ids []int) {
		for _, id := range ids {
			into[id]++
		}
	}
	// Few distinct ids, so that counts tie and ties break by the other
	// count and by id.
	ids := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 2 + r.IntN(40)
		}
		return s
	}
	// Sessions: the context once, then accepted + bonus per step.
	for sess := range 3 {
		id := fmt.Sprintf("s%d", sess)
		c := ids(10 + r.IntN(20))
		st, _, b := ts.sessionPost(fmt.Sprintf(`{"session":%q,"tokens":%s,"n":6}`, id, idsJSON(c)), "")
		if st != 200 {
			t.Fatalf("establish: %d %s", st, b)
		}
		count(ctxWant, c)
		last := decodeDraft(t, b)
		for range 4 {
			k, bonus := r.IntN(len(last)+1), 2+r.IntN(40)
			st, _, b := ts.sessionPost(fmt.Sprintf(`{"session":%q,"accepted":%d,"bonus":%d,"n":6}`, id, k, bonus), "")
			if st != 200 {
				t.Fatalf("step: %d %s", st, b)
			}
			count(accWant, append(slices.Clone(last[:k]), bonus))
			last = decodeDraft(t, b)
		}
		// Refused: not counted.
		if st, _, b := ts.sessionPost(fmt.Sprintf(`{"session":%q,"accepted":%d,"bonus":3}`, id, len(last)+1), ""); st != 400 {
			t.Fatalf("accepted over the draft: %d %s", st, b)
		}
	}
	// Plain requests: their whole context, each time.
	for range 3 {
		c := ids(5 + r.IntN(10))
		ts.draft(c, 4)
		count(ctxWant, c)
	}
	if st, _, b := ts.do("POST", "/draft", `{"tokens":[1,2,99999],"n":2}`); st != 400 {
		t.Fatalf("id out of range: %d %s", st, b)
	}
	// /v1/drafts: a plain item, a session item, a failing item; and ids
	// the tokenizer does not have (counted, never ranked).
	cp, cs := ids(7), append(ids(5), tinyVocab-1, len(classes)-1)
	res := ts.postBatch(fmt.Sprintf(`{"requests":[{"tokens":%s,"n":3},{"session":"b1","tokens":%s,"n":3},{"tokens":[-1],"n":3}]}`, idsJSON(cp), idsJSON(cs)))
	if len(res) != 3 || res[0].Draft == nil || res[1].Draft == nil || res[2].Draft != nil {
		t.Fatalf("batch answer %+v", res)
	}
	count(ctxWant, cp)
	count(ctxWant, cs)

	st, _, b := ts.do("GET", "/v1/vocab", "")
	if st != 200 {
		t.Fatalf("GET /v1/vocab: %d %s", st, b)
	}
	var f vocabrank.File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var ctxTotal, accTotal int64
	for id := range tinyVocab {
		ctxTotal += ctxWant[id]
		accTotal += accWant[id]
	}
	if f.Traffic == nil || f.Traffic.ContextTokens != ctxTotal || f.Traffic.AcceptedTokens != accTotal || f.Tokens != ctxTotal+accTotal ||
		f.Traffic.Requests != 3+3*4+3+2 || f.Traffic.Model != "tiny" {
		t.Fatalf("traffic %+v, tokens %d; want context %d, accepted %d, 20 requests, model tiny", f.Traffic, f.Tokens, ctxTotal, accTotal)
	}
	if f.VocabSize != len(classes) || !slices.Equal(f.Special, []int{0, 1}) {
		t.Fatalf("vocab_size %d, special %v; want %d, [0 1]", f.VocabSize, f.Special, len(classes))
	}
	var normal []int
	for id, c := range classes {
		if c == vocabrank.Normal {
			normal = append(normal, id)
		}
	}
	if len(f.Ranked) != len(normal) || len(f.Counts) != len(normal) || len(f.ContextCounts) != len(normal) {
		t.Fatalf("%d ranked, %d counts, %d context counts; want %d each", len(f.Ranked), len(f.Counts), len(f.ContextCounts), len(normal))
	}
	if sorted := slices.Sorted(slices.Values(f.Ranked)); !slices.Equal(sorted, normal) {
		t.Fatalf("the ranked ids are not the normal ids once each")
	}
	for i, id := range f.Ranked {
		if f.Counts[i] != accWant[id] || f.ContextCounts[i] != ctxWant[id] {
			t.Fatalf("id %d: counts %d / %d; sent %d accepted / %d in contexts", id, f.Counts[i], f.ContextCounts[i], accWant[id], ctxWant[id])
		}
		if i == 0 {
			continue
		}
		p := f.Ranked[i-1]
		before := accWant[p] > accWant[id] || accWant[p] == accWant[id] && (ctxWant[p] > ctxWant[id] || ctxWant[p] == ctxWant[id] && p < id)
		if !before {
			t.Fatalf("id %d (%d accepted, %d in contexts) ranks before id %d (%d, %d)", p, accWant[p], ctxWant[p], id, accWant[id], ctxWant[id])
		}
	}
	keep, err := f.Keep("traffic", 10, tinyVocab)
	if err != nil || !slices.Equal(keep, append([]int{0, 1}, f.Ranked[:8]...)) {
		t.Fatalf("Keep: %v %v", keep, err)
	}

	// A backend without token classes cannot keep the special tokens.
	plain := startHealthy(t, Config{})
	st, h, b := plain.do("GET", "/v1/vocab", "")
	checkError(t, st, h, b, http.StatusNotFound, CodeNotFound, "tokenizer")
}

// BenchmarkTrafficContext is the counting cost of a 4,096-token context (a
// plain request's, per request) on the Qwen vocabulary, from every
// goroutine at once (contention on shared counters).
func BenchmarkTrafficContext(b *testing.B) {
	tr := newTraffic(151936, nil)
	r := rand.New(rand.NewPCG(1, 2))
	ctx := make([]int, 4096)
	for i := range ctx {
		ctx[i] = r.IntN(20000) // the frequent ids: shared cache lines
	}
	b.SetBytes(int64(len(ctx)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.sawContext(ctx)
		}
	})
}

// BenchmarkTrafficContextSerial is BenchmarkTrafficContext from one
// goroutine.
func BenchmarkTrafficContextSerial(b *testing.B) {
	tr := newTraffic(151936, nil)
	r := rand.New(rand.NewPCG(1, 2))
	ctx := make([]int, 4096)
	for i := range ctx {
		ctx[i] = r.IntN(20000)
	}
	b.SetBytes(int64(len(ctx)))
	for b.Loop() {
		tr.sawContext(ctx)
	}
}

// Confidence-bounded drafts over HTTP (docs/protocol.md, "min_confidence"
// and "confidences"): where a draft stops is checked against a reference
// computed here from the model's full logits (model.PrefillLogits), not by
// the code under test; an answer without the fields is byte for byte the
// plain one whatever the serve default; bad values are 400s naming the
// field (per item in /v1/drafts); sessions continue from short drafts; a
// pre-drafted answer with a bound equals the on-demand one; /v1/info
// reports the default and the signal.

package server

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/eval"
	"github.com/draftd/draftd/internal/model"
)

// refBounded is the reference for a bounded draft of n tokens after ctx:
// the greedy chain, each token's confidence — its softmax probability from
// the full logits (float64), or with chainProb the running product of
// those (chain_prob) — and how many tokens a bound b keeps; clear is false
// when a confidence up to the stop lies within 1e-3 of b (no expectation
// then).
func refBounded(t *testing.T, m *model.Model, ctx []int, n int, b float64, chainProb bool) (chain []int, conf []float64, keep int, clear bool) {
	t.Helper()
	n = min(n, m.MaxContext-len(ctx))
	chain, err := m.Generate(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.PrefillLogits(append(slices.Clone(ctx), chain...))
	if err != nil {
		t.Fatal(err)
	}
	V := m.Vocab
	keep, clear = len(chain), true
	for i, tok := range chain {
		row := logits[(len(ctx)-1+i)*V : (len(ctx)+i)*V]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		c := math.Exp(float64(row[tok])-mx) / sum
		if chainProb && i > 0 {
			c *= conf[i-1]
		}
		conf = append(conf, c)
		if keep == len(chain) {
			if math.Abs(conf[i]-b) < 1e-3 {
				clear = false
			}
			if b > 0 && conf[i] < b {
				keep = i
			}
		}
	}
	return chain, conf, keep, clear
}

// boundedAnswer is a /draft answer or a /v1/drafts result with the fields
// of a bounded draft.
type boundedAnswer struct {
	Draft       []int      `json:"draft"`
	StopReason  *string    `json:"stop_reason"`
	Confidences *[]float64 `json:"confidences"`
	Error       *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func postBounded(t *testing.T, ts *testServer, body string) (boundedAnswer, []byte) {
	t.Helper()
	st, _, b := ts.do("POST", "/draft", body)
	if st != http.StatusOK {
		t.Fatalf("POST /draft %s: status %d %s", clip(body), st, b)
	}
	var a boundedAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return a, b
}

// findStop returns a context (of the seq family) whose reference chain of n
// first falls below bound at a position in [2, n−2], clear of near-ties.
func findStop(t *testing.T, m *model.Model, n int, bound float64) (ctx, chain []int, conf []float64, k int) {
	t.Helper()
	for start := range tinyVocab {
		ctx = seq(start, 16)
		var clear bool
		chain, conf, k, clear = refBounded(t, m, ctx, n, bound, false)
		if clear && k >= 2 && k <= n-2 {
			return ctx, chain, conf, k
		}
	}
	t.Fatalf("no context stops below %v in [2, %d]", bound, n-2)
	return
}

func TestConfidenceBoundedDraft(t *testing.T) {
	m := loadModel(t)
	const bound, n = 0.5, 10
	ts := startHealthy(t, Config{MinConfidence: 0.9}) // a default the plain /draft must ignore
	ctx, chain, conf, k := findStop(t, m, n, bound)
	t.Logf("reference confidences %.3f: bound %v stops before token %d", conf, bound, k)

	// Without the fields: exactly n tokens, the plain bytes.
	plainBody := fmt.Sprintf(`{"tokens":%s,"n":%d}`, idsJSON(ctx), n)
	_, b := postBounded(t, ts, plainBody)
	if want := appendDraft(nil, chain, nil); string(b) != string(want) {
		t.Errorf("without min_confidence (serve default 0.9): %s; want %s", b, want)
	}
	// "min_confidence":0 is no bound, but the answer says so.
	a, _ := postBounded(t, ts, fmt.Sprintf(`{"tokens":%s,"n":%d,"min_confidence":0}`, idsJSON(ctx), n))
	if !slices.Equal(a.Draft, chain) || a.StopReason != nil || a.Confidences != nil {
		t.Errorf("min_confidence 0: %+v; want the plain %v", a, chain)
	}

	a, _ = postBounded(t, ts, fmt.Sprintf(`{"tokens":%s,"n":%d,"min_confidence":%v}`, idsJSON(ctx), n, bound))
	if !slices.Equal(a.Draft, chain[:k]) || a.StopReason == nil || *a.StopReason != "confidence" || a.Confidences != nil {
		t.Errorf("min_confidence %v: %+v; want %v (stopped before token %d), stop_reason confidence, no confidences", bound, a, chain[:k], k)
	}

	a, _ = postBounded(t, ts, fmt.Sprintf(`{"tokens":%s,"n":%d,"confidences":true}`, idsJSON(ctx), n))
	if !slices.Equal(a.Draft, chain) || a.StopReason == nil || *a.StopReason != "n" || a.Confidences == nil || len(*a.Confidences) != n {
		t.Fatalf("confidences: %+v; want %v, stop_reason n, %d confidences", a, chain, n)
	}
	for i, c := range *a.Confidences {
		if math.Abs(c-conf[i]) > 1e-4 {
			t.Errorf("confidence %d: %v; reference %v", i, c, conf[i])
		}
	}

	// The maximum context first: stop_reason context.
	long := seq(3, tinyMax-3)
	lchain, lconf, _, _ := refBounded(t, m, long, n, 0, false)
	a, _ = postBounded(t, ts, fmt.Sprintf(`{"tokens":%s,"n":%d,"min_confidence":%v,"confidences":true}`, idsJSON(long), n, slices.Min(lconf)/2))
	if !slices.Equal(a.Draft, lchain) || len(lchain) != 3 || a.StopReason == nil || *a.StopReason != "context" {
		t.Errorf("3 positions left: %+v; want %v, stop_reason context", a, lchain)
	}
	// A bound of 1 drafts nothing.
	a, _ = postBounded(t, ts, fmt.Sprintf(`{"tokens":%s,"n":%d,"min_confidence":1,"confidences":true}`, idsJSON(ctx), n))
	if len(a.Draft) != 0 || a.Draft == nil || *a.StopReason != "confidence" || a.Confidences == nil || len(*a.Confidences) != 0 {
		t.Errorf("min_confidence 1: %+v; want an empty draft, stop_reason confidence, confidences []", a)
	}
	// Another strategy: lookup has no model confidence (1 each, never
	// stopped on).
	rep := append(append(seq(1, 8), seq(1, 8)...), seq(1, 3)...)
	a, _ = postBounded(t, ts, fmt.Sprintf(`{"tokens":%s,"n":4,"strategy":"lookup","min_confidence":0.99,"confidences":true}`, idsJSON(rep)))
	if !slices.Equal(a.Draft, seq(1, 8)[3:7]) || *a.StopReason != "n" || !slices.Equal(*a.Confidences, []float64{1, 1, 1, 1}) {
		t.Errorf("lookup with a bound: %+v; want %v, stop_reason n, confidences 1", a, seq(1, 8)[3:7])
	}
}

func TestConfidenceValidation(t *testing.T) {
	ts := startHealthy(t, Config{})
	for _, tc := range []struct{ field, msg string }{
		{`"min_confidence":-0.1`, `"min_confidence" must be a number in [0, 1]`},
		{`"min_confidence":1.5`, `got 1.5`},
		{`"min_confidence":"0.5"`, `got a string`},
		{`"min_confidence":true`, `got a boolean`},
		{`"min_confidence":1e999`, `"min_confidence"`},
		{`"confidences":1`, `"confidences" must be true or false, got a number`},
		{`"confidences":"yes"`, `"confidences" must be true or false`},
		{`"confidence_signal":"top2_prob"`, `"confidence_signal" must be one of ["top1_prob" "chain_prob"], got "top2_prob"`},
		{`"confidence_signal":1`, `"confidence_signal" must be one of`},
	} {
		st, h, b := ts.do("POST", "/draft", `{"tokens":[1,2,3],`+tc.field+`}`)
		checkError(t, st, h, b, http.StatusBadRequest, CodeInvalidRequest, tc.msg)
	}
	// Per item in /v1/drafts: the bad item fails alone.
	res := ts.postBatch(`{"requests":[{"id":"a","tokens":[1,2,3],"n":2,"min_confidence":2},{"id":"b","tokens":[1,2,3],"n":2}]}`)
	if len(res) != 2 || res[0].Error == nil || res[0].Error.Code != CodeInvalidRequest || !strings.Contains(res[0].Error.Message, "min_confidence") || res[1].Draft == nil || len(*res[1].Draft) != 2 {
		t.Errorf("/v1/drafts with one bad min_confidence: %+v", res)
	}
	// The serve default is checked too.
	for _, v := range []float32{-1, 1.01, float32(math.NaN())} {
		if _, err := New(Config{Open: tinyOpen(engine.Options{}, nil), MinConfidence: v}); err == nil {
			t.Errorf("Config.MinConfidence %v accepted", v)
		}
	}
	if _, err := New(Config{Open: tinyOpen(engine.Options{}, nil), ConfidenceSignal: "chain"}); err == nil || !strings.Contains(err.Error(), "chain") {
		t.Errorf(`Config.ConfidenceSignal "chain": %v; want an error naming it`, err)
	}
}

// TestConfidenceBatchDefault: in /v1/drafts an item without the field takes
// the serve default, one with its own bound (0 too) keeps it; results carry
// stop_reason only when a bound was in force or confidences were asked.
func TestConfidenceBatchDefault(t *testing.T) {
	m := loadModel(t)
	const bound, n = 0.5, 10
	ctx, chain, _, k := findStop(t, m, n, bound)
	ts := startHealthy(t, Config{MinConfidence: bound})
	body := fmt.Sprintf(`{"requests":[{"id":"default","tokens":%[1]s,"n":%[2]d},{"id":"off","tokens":%[1]s,"n":%[2]d,"min_confidence":0},{"id":"own","tokens":%[1]s,"n":%[2]d,"min_confidence":0.01}]}`, idsJSON(ctx), n)
	st, _, b := ts.do("POST", "/v1/drafts", body)
	if st != http.StatusOK {
		t.Fatalf("status %d %s", st, b)
	}
	var out struct {
		Drafts []boundedAnswer `json:"drafts"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Drafts) != 3 {
		t.Fatalf("answer %s: %v", b, err)
	}
	d, off, own := out.Drafts[0], out.Drafts[1], out.Drafts[2]
	if !slices.Equal(d.Draft, chain[:k]) || d.StopReason == nil || *d.StopReason != "confidence" {
		t.Errorf("item without the field (serve default %v): %+v; want %v, stop_reason confidence", bound, d, chain[:k])
	}
	if !slices.Equal(off.Draft, chain) || off.StopReason != nil {
		t.Errorf("item with min_confidence 0: %+v; want %v and no stop_reason", off, chain)
	}
	if !slices.Equal(own.Draft, chain) || own.StopReason == nil || *own.StopReason != "n" {
		t.Errorf("item with min_confidence 0.01: %+v; want %v, stop_reason n", own, chain)
	}
	var info map[string]any
	_, _, ib := ts.do("GET", "/v1/info", "")
	if err := json.Unmarshal(ib, &info); err != nil {
		t.Fatal(err)
	}
	if info["min_confidence"] != bound || info["confidence_signal"] != engine.ConfidenceSignal || fmt.Sprint(info["confidence_signals"]) != "[top1_prob chain_prob]" {
		t.Errorf("/v1/info min_confidence %v confidence_signal %v confidence_signals %v; want %v %q [top1_prob chain_prob]", info["min_confidence"], info["confidence_signal"], info["confidence_signals"], bound, engine.ConfidenceSignal)
	}
}

// TestConfidenceSessions: a session whose drafts stop short (the serve
// default bound and signal) goes on from them: accepted ≤ the short draft's
// length, each answer equal to the bounded /draft of the full context (the
// reference's stop), accepted beyond the short draft refused; with each
// signal, answered on demand and pre-drafted (a branch drafted with top-1
// confidences, made chain_prob's by the server).
func TestConfidenceSessions(t *testing.T) {
	m := loadModel(t)
	const n = 8
	for _, pre := range []int{0, 8} {
		for _, sig := range []struct {
			name  string
			bound float64
		}{{engine.SignalTop1, 0.5}, {engine.SignalChain, 0.15}} {
			t.Run(fmt.Sprintf("predraft %d/%s", pre, sig.name), func(t *testing.T) {
				testConfidenceSession(t, m, pre, sig.name, sig.bound, n)
			})
		}
	}
}

func testConfidenceSession(t *testing.T, m *model.Model, pre int, signal string, bound float64, n int) {
	ts := startHealthy(t, Config{MinConfidence: float32(bound), ConfidenceSignal: signal, PredraftBranches: pre})
	r := rand.New(rand.NewPCG(39, uint64(pre)))
	ctx := seq(r.IntN(tinyVocab), 12)
	have, _ := postBounded(t, ts, fmt.Sprintf(`{"session":"c","tokens":%s,"n":%d}`, idsJSON(ctx), n))
	short, hits := 0, 0.0
	for step := range 16 {
		chain, _, keep, clear := refBounded(t, m, ctx, n, bound, signal == engine.SignalChain)
		if clear && !slices.Equal(have.Draft, chain[:keep]) {
			t.Fatalf("step %d: draft %v; reference %v (chain %v)", step, have.Draft, chain[:keep], chain)
		}
		want := "n"
		if len(have.Draft) < n {
			want, short = "confidence", short+1
		}
		if have.StopReason == nil || *have.StopReason != want {
			t.Fatalf("step %d: stop_reason %v; want %s", step, have.StopReason, want)
		}
		if pre > 0 {
			waitBranches(t, ts, 0)
		}
		// All accepted, the bonus the drafter's own next token (the
		// token the bound stopped before): the all-accepted branch.
		k := len(have.Draft)
		if step%3 == 2 && k > 0 {
			k = r.IntN(k)
		}
		bonus := chain[min(k, len(chain)-1)]
		if k < len(have.Draft) {
			bonus = (have.Draft[k] + 1) % tinyVocab
		}
		if step == 5 {
			st, h, b := ts.do("POST", "/draft", fmt.Sprintf(`{"session":"c","accepted":%d,"bonus":1}`, len(have.Draft)+1))
			checkError(t, st, h, b, http.StatusBadRequest, CodeInvalidAccepted, "")
		}
		ctx = append(append(slices.Clip(ctx), have.Draft[:k]...), bonus)
		if len(ctx) > tinyMax-2*n {
			break
		}
		have, _ = postBounded(t, ts, fmt.Sprintf(`{"session":"c","accepted":%d,"bonus":%d,"n":%d}`, k, bonus, n))
	}
	if short == 0 {
		t.Errorf("no draft stopped short: the bound was never tested")
	}
	if pre > 0 {
		hits = metricOf(t, ts, "draftd_predraft_requests_total", "outcome", predraftHit)
		if hits == 0 {
			t.Errorf("no pre-drafted answer: identity with a bound untested")
		}
		t.Logf("%d short drafts, %g pre-drafted answers", short, hits)
	}
}

// TestReplayWithBound: draftd eval's client with --min-confidence against a
// real server: full, session and batch replays give the same τ and
// per-sample steps (the bounded drafts are the same whichever way they are
// asked), every confidence the replay recorded is at or above the bound,
// and the bound drafts fewer tokens than the unbounded replay.
func TestReplayWithBound(t *testing.T) {
	data := soakData(t, 6, 60)
	ts := startHealthy(t, Config{})
	run := func(p string, bound float64, rows func(eval.ConfidenceRow)) *eval.Report {
		t.Helper()
		d, err := eval.NewDrafter(eval.BackendDraftd, eval.NewHTTPClient(3), ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		d.(*eval.DraftdClient).MinConfidence = bound
		r, err := eval.Replay(t.Context(), d, data, eval.ReplayOptions{
			N: 8, Concurrency: 3, Timeout: time.Minute, Protocol: p, SessionPrefix: fmt.Sprintf("%s-%v-", p, bound), Confidences: rows,
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Failures != 0 {
			t.Fatalf("%s: %d failures (first %s)", p, r.Failures, r.FirstError)
		}
		return r
	}
	const bound = 0.5
	var mu sync.Mutex
	var low, rows int
	full := run(eval.ProtocolFull, bound, func(r eval.ConfidenceRow) {
		mu.Lock()
		defer mu.Unlock()
		rows++
		if r.Confidence < bound {
			low++
		}
	})
	if low > 0 || int64(rows) != full.DraftTokens {
		t.Errorf("%d of %d recorded confidences below the bound %v; %d draft tokens", low, rows, bound, full.DraftTokens)
	}
	for _, p := range []string{eval.ProtocolSession, eval.ProtocolBatch} {
		r := run(p, bound, nil)
		if r.Tau != full.Tau || r.DraftTokens != full.DraftTokens || !slices.Equal(r.AcceptHist, full.AcceptHist) {
			t.Errorf("%s: τ %v, %d draft tokens, hist %v; full: τ %v, %d, %v", p, r.Tau, r.DraftTokens, r.AcceptHist, full.Tau, full.DraftTokens, full.AcceptHist)
		}
	}
	free := run(eval.ProtocolSession, 0, nil)
	if full.DraftTokens >= free.DraftTokens || full.DraftedPerAccepted >= free.DraftedPerAccepted {
		t.Errorf("bound %v: %d draft tokens, %.2f per accepted; unbounded %d, %.2f", bound, full.DraftTokens, full.DraftedPerAccepted, free.DraftTokens, free.DraftedPerAccepted)
	}
	if full.DraftMSPerAccepted <= 0 || full.AcceptedTokens == 0 {
		t.Errorf("draft_ms_per_accepted %v over %d accepted tokens", full.DraftMSPerAccepted, full.AcceptedTokens)
	}
	t.Logf("bound %v: τ %.3f, %.2f drafted per accepted; unbounded τ %.3f, %.2f", bound, full.Tau, full.DraftedPerAccepted, free.Tau, free.DraftedPerAccepted)
}

// Tests of sessions (docs/protocol.md, batched and incremental drafting) on a real server over loopback: drafts of
// session requests equal model.Generate on the full context through chains
// of accepted/bonus steps (in /draft and /v1/drafts, concurrently), the
// errors of the contract, eviction by count and by tokens, idle expiry on an
// injected clock, and a replica restart (409, then resend).

package server

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/model"
)

// sessionPost sends a /draft body with the session header h ("": none).
func (ts *testServer) sessionPost(body, h string) (int, http.Header, []byte) {
	req, err := http.NewRequest("POST", ts.URL+"/draft", strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	if h != "" {
		req.Header.Set(SessionHeader, h)
	}
	return ts.send(req)
}

// chain drives one session for steps steps: establish with ctx, then each
// step accepts a random prefix of the last draft and adds a random bonus;
// every draft is checked against m.Generate on the full context. viaBatch
// sends every other step through /v1/drafts.
func chain(t *testing.T, ts *testServer, m *model.Model, r *rand.Rand, id string, ctx []int, steps, n int, viaBatch bool) {
	t.Helper()
	body := fmt.Sprintf(`{"session":%q,"tokens":%s,"n":%d}`, id, idsJSON(ctx), n)
	for step := 0; step < steps; step++ {
		var have []int
		if viaBatch && step%2 == 1 {
			res := ts.postBatch(`{"requests":[`+body+`]}`, SessionHeader, id)
			if len(res) != 1 || res[0].Draft == nil {
				t.Fatalf("%s step %d: batch answer %+v", id, step, res)
			}
			have = *res[0].Draft
		} else {
			st, _, b := ts.sessionPost(body, id)
			if st != http.StatusOK {
				t.Fatalf("%s step %d: status %d %s", id, step, st, b)
			}
			have = decodeDraft(t, b)
		}
		want, err := m.Generate(ctx, min(n, tinyMax-len(ctx)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(have, want) {
			t.Fatalf("%s step %d (context %d): session draft %v; Generate %v", id, step, len(ctx), have, want)
		}
		k := r.IntN(len(have) + 1)
		bonus := r.IntN(tinyVocab)
		if len(ctx)+k+1 >= tinyMax {
			return
		}
		ctx = append(append(slices.Clip(ctx), have[:k]...), bonus)
		body = fmt.Sprintf(`{"session":%q,"accepted":%d,"bonus":%d,"n":%d}`, id, k, bonus, n)
	}
}

func TestSessionChainsEqualGenerate(t *testing.T) {
	m := loadModel(t)
	ts := startHealthy(t, Config{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 99))
			chain(t, ts, m, r, fmt.Sprintf("conv-%d", g), randIDs(r, 5+r.IntN(60)), 12, 4+g, g%2 == 0)
		})
	}
	wg.Wait()
	fams := scrape(t, ts)
	if v, _ := value(fams, "draftd_sessions"); v != 6 {
		t.Errorf("draftd_sessions: have %v; want 6", v)
	}
	if v, _ := value(fams, "draftd_session_requests_total", "form", "accepted", "outcome", "ok"); v < 6 {
		t.Errorf("accepted-form requests: have %v; want ≥ 6", v)
	}
	if v, _ := value(fams, "draftd_session_tokens"); v <= 0 {
		t.Errorf("draftd_session_tokens: have %v; want > 0", v)
	}
}

// TestSessionBonusArray: "bonus" as an array — the bonus and the tokens the
// target produced in steps the client drafted nothing for — extends the
// session by all of them: every draft equals Generate on the full context,
// through /draft and /v1/drafts, pre-drafting on and off; an empty array
// or a bad id in it fails without changing the session.
func TestSessionBonusArray(t *testing.T) {
	m := loadModel(t)
	for _, branches := range []int{0, 2} {
		t.Run(fmt.Sprintf("predraft=%d", branches), func(t *testing.T) {
			ts := startHealthy(t, Config{PredraftBranches: branches})
			r := rand.New(rand.NewPCG(7, uint64(branches)))
			ctx := randIDs(r, 9)
			have := establish(t, ts, "arr", ctx, 4)
			for step := 0; step < 8; step++ {
				k := r.IntN(len(have) + 1)
				more := randIDs(r, 1+step%4) // one token (as an array) to four
				if len(ctx)+k+len(more) >= tinyMax-1 {
					break
				}
				ctx = append(append(slices.Clip(ctx), have[:k]...), more...)
				body := fmt.Sprintf(`{"session":"arr","accepted":%d,"bonus":%s,"n":4}`, k, idsJSON(more))
				if step%2 == 1 {
					res := ts.postBatch(`{"requests":[`+body+`]}`, SessionHeader, "arr")
					if len(res) != 1 || res[0].Draft == nil {
						t.Fatalf("step %d: batch answer %+v", step, res)
					}
					have = *res[0].Draft
				} else {
					st, _, b := ts.sessionPost(body, "arr")
					if st != http.StatusOK {
						t.Fatalf("step %d: status %d %s", step, st, b)
					}
					have = decodeDraft(t, b)
				}
				want, err := m.Generate(ctx, min(4, tinyMax-len(ctx)))
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(have, want) {
					t.Fatalf("step %d (bonus of %d tokens, context %d): session draft %v; Generate %v", step, len(more), len(ctx), have, want)
				}
			}
			for _, tc := range []struct {
				name, bonus, code, msg string
			}{
				{"empty", `[]`, CodeInvalidToken, "empty array"},
				{"out of range", `[1,512]`, CodeTokenOutOfRange, "bonus[1]"},
				{"not integer", `[1,"2"]`, CodeInvalidToken, "bonus[1]"},
				{"nested", `[[1]]`, CodeInvalidToken, "bonus[0]"},
			} {
				st, h, b := ts.sessionPost(fmt.Sprintf(`{"session":"arr","accepted":0,"bonus":%s}`, tc.bonus), "")
				checkError(t, st, h, b, 400, tc.code, tc.msg)
			}
			// The failures left the session as it was.
			st, _, b := ts.sessionPost(`{"session":"arr","accepted":0,"bonus":[3,4],"n":4}`, "")
			if want := ts.draft(append(slices.Clip(ctx), 3, 4), 4); st != 200 || !slices.Equal(decodeDraft(t, b), want) {
				t.Errorf("after the errors: %d %s; want %v", st, b, want)
			}
		})
	}
}

func TestSessionErrors(t *testing.T) {
	ts := startHealthy(t, Config{})
	st, _, b := ts.sessionPost(`{"session":"s1","tokens":[1,2,3,4],"n":4}`, "")
	if st != 200 {
		t.Fatalf("establish: %d %s", st, b)
	}
	last := decodeDraft(t, b)
	for _, tc := range []struct {
		name, body, header string
		status             int
		code, msg          string
	}{
		{"unknown session", `{"session":"nope","accepted":0,"bonus":1}`, "", 409, CodeUnknownSession, "resend"},
		{"accepted over draft", fmt.Sprintf(`{"session":"s1","accepted":%d,"bonus":1}`, len(last)+1), "", 400, CodeInvalidAccepted, "outside [0, 4]"},
		{"accepted negative", `{"session":"s1","accepted":-1,"bonus":1}`, "", 400, CodeInvalidAccepted, "≥ 0"},
		{"accepted not integer", `{"session":"s1","accepted":1.5,"bonus":1}`, "", 400, CodeInvalidAccepted, "integer"},
		{"bonus out of range", `{"session":"s1","accepted":1,"bonus":512}`, "", 400, CodeTokenOutOfRange, "bonus"},
		{"bonus not integer", `{"session":"s1","accepted":1,"bonus":"7"}`, "", 400, CodeInvalidToken, "bonus"},
		{"both forms", `{"session":"s1","tokens":[1],"accepted":0,"bonus":1}`, "", 400, CodeInvalidRequest, "not both"},
		{"neither form", `{"session":"s1","n":4}`, "", 400, CodeInvalidRequest, "needs"},
		{"accepted without bonus", `{"session":"s1","accepted":0}`, "", 400, CodeInvalidRequest, "together"},
		{"accepted without session", `{"tokens":[1],"accepted":0,"bonus":1}`, "", 400, CodeInvalidRequest, "need a \"session\""},
		{"empty id", `{"session":"","tokens":[1]}`, "", 400, CodeInvalidRequest, "empty string"},
		{"bad byte in id", `{"session":"a/b","tokens":[1]}`, "", 400, CodeInvalidRequest, "[A-Za-z0-9._:-]"},
		{"id too long", `{"session":"` + strings.Repeat("x", 129) + `","tokens":[1]}`, "", 400, CodeInvalidRequest, "128"},
		{"id not a string", `{"session":5,"tokens":[1]}`, "", 400, CodeInvalidRequest, "a number"},
		{"header differs", `{"session":"s1","tokens":[1]}`, "s2", 400, CodeInvalidRequest, SessionHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, h, b := ts.sessionPost(tc.body, tc.header)
			checkError(t, st, h, b, tc.status, tc.code, tc.msg)
		})
	}
	// None of the failures changed s1: accepting all of its draft still
	// continues the established context.
	st, _, b = ts.sessionPost(fmt.Sprintf(`{"session":"s1","accepted":%d,"bonus":9,"n":4}`, len(last)), "s1")
	if st != 200 {
		t.Fatalf("after the errors: %d %s", st, b)
	}
	if want := ts.draft(append([]int{1, 2, 3, 4}, append(last, 9)...), 4); !slices.Equal(decodeDraft(t, b), want) {
		t.Errorf("after the errors: have %s; want %v", b, want)
	}
	// The header without a body session is only a routing key.
	if st, _, b := ts.sessionPost(`{"tokens":[1,2]}`, "any"); st != 200 {
		t.Errorf("header without a body session: %d %s", st, b)
	}
	// A batch with one session twice: the second item fails alone.
	res := ts.postBatch(`{"requests":[{"session":"d","tokens":[1,2]},{"session":"d","tokens":[3]},{"tokens":[5]}]}`)
	if res[0].Draft == nil || res[1].Error == nil || res[1].Error.Code != CodeInvalidRequest || res[2].Draft == nil {
		t.Errorf("duplicate session in a batch: have %+v", res)
	}
	// DELETE: 204, then the session is unknown; 204 for an unknown one too.
	for range 2 {
		if st, _, b := ts.do("DELETE", "/v1/sessions/s1", ""); st != http.StatusNoContent || len(b) != 0 {
			t.Errorf("DELETE: have %d %q; want 204 and no body", st, b)
		}
	}
	st, h, b := ts.sessionPost(`{"session":"s1","accepted":0,"bonus":1}`, "")
	checkError(t, st, h, b, 409, CodeUnknownSession, "s1")
	st, h, b = ts.do("DELETE", "/v1/sessions/a%2Fb", "")
	checkError(t, st, h, b, 400, CodeInvalidRequest, "[A-Za-z0-9._:-]")
	st, h, b = ts.do("GET", "/v1/sessions/s1", "")
	checkError(t, st, h, b, 405, CodeMethodNotAllowed, "DELETE")
	if v, _ := value(scrape(t, ts), "draftd_sessions_deleted_total"); v != 1 {
		t.Errorf("draftd_sessions_deleted_total: have %v; want 1", v)
	}
}

// establish starts session id with ctx and returns its draft.
func establish(t *testing.T, ts *testServer, id string, ctx []int, n int) []int {
	t.Helper()
	st, _, b := ts.sessionPost(fmt.Sprintf(`{"session":%q,"tokens":%s,"n":%d}`, id, idsJSON(ctx), n), id)
	if st != 200 {
		t.Fatalf("establish %s: %d %s", id, st, b)
	}
	return decodeDraft(t, b)
}

// extend sends accepted/bonus for id and returns the status and body.
func extend(ts *testServer, id string, k, bonus, n int) (int, http.Header, []byte) {
	return ts.sessionPost(fmt.Sprintf(`{"session":%q,"accepted":%d,"bonus":%d,"n":%d}`, id, k, bonus, n), id)
}

func TestSessionEviction(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		ts := startHealthy(t, Config{MaxSessions: 2})
		establish(t, ts, "a", []int{1, 2, 3}, 4)
		establish(t, ts, "b", []int{4, 5, 6}, 4)
		if st, _, b := extend(ts, "a", 0, 7, 4); st != 200 { // a is now the most recent
			t.Fatalf("a: %d %s", st, b)
		}
		establish(t, ts, "c", []int{7, 8, 9}, 4) // evicts b, the least recently used
		st, h, b := extend(ts, "b", 0, 1, 4)
		checkError(t, st, h, b, 409, CodeUnknownSession, "b")
		for _, id := range []string{"a", "c"} {
			if st, _, b := extend(ts, id, 1, 2, 4); st != 200 {
				t.Errorf("%s after evicting b: %d %s", id, st, b)
			}
		}
		if v, _ := value(scrape(t, ts), "draftd_session_evictions_total", "reason", "count"); v != 1 {
			t.Errorf("evictions{reason=count}: have %v; want 1", v)
		}
	})
	t.Run("tokens", func(t *testing.T) {
		// The smallest budget the tiny model allows: one full context plus a
		// draft (256 + 64).
		ts := startHealthy(t, Config{MaxSessionTokens: tinyMax + 64})
		establish(t, ts, "long", seq(1, 200), 16) // 216 tokens
		establish(t, ts, "short", seq(1, 90), 16) // 106: 322 > 320 evicts "long"
		st, h, b := extend(ts, "long", 0, 1, 16)
		checkError(t, st, h, b, 409, CodeUnknownSession, "long")
		fams := scrape(t, ts)
		if v, _ := value(fams, "draftd_session_evictions_total", "reason", "tokens"); v != 1 {
			t.Errorf("evictions{reason=tokens}: have %v; want 1", v)
		}
		if v, _ := value(fams, "draftd_session_tokens"); v != 106 {
			t.Errorf("draftd_session_tokens: have %v; want 106", v)
		}
		// Resending the context brings the evicted session back, exact.
		if have, want := establish(t, ts, "long", seq(1, 200), 16), ts.draft(seq(1, 200), 16); !slices.Equal(have, want) {
			t.Errorf("re-established: have %v; want %v", have, want)
		}
	})
	t.Run("budget below one context", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{MaxSessionTokens: tinyMax, Open: tinyOpen(engine.Options{}, nil), Logger: slog.New(slog.DiscardHandler)}
		if err := Run(context.Background(), ln, cfg); err == nil || !strings.Contains(err.Error(), "--max-session-tokens") {
			t.Errorf("Run: have %v; want a max session tokens error", err)
		}
	})
}

func TestSessionIdleExpiry(t *testing.T) {
	var now atomic.Int64 // nanoseconds on the injected clock
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	ts := startHealthy(t, Config{SessionTTL: 10 * time.Minute, Now: clock})
	d := establish(t, ts, "idle", []int{1, 2, 3}, 4)
	establish(t, ts, "busy", []int{4, 5, 6}, 4)
	now.Add(int64(9 * time.Minute))
	if st, _, b := extend(ts, "busy", len(d), 1, 4); st != 200 { // used: its idle time restarts
		t.Fatalf("busy at 9 min: %d %s", st, b)
	}
	now.Add(int64(time.Minute))
	st, h, b := extend(ts, "idle", 0, 1, 4) // 10 min unused: gone
	checkError(t, st, h, b, 409, CodeUnknownSession, "--session-ttl")
	if st, _, b := extend(ts, "busy", 0, 1, 4); st != 200 {
		t.Errorf("busy at 10 min (used 1 min ago): %d %s", st, b)
	}
	if v, _ := value(scrape(t, ts), "draftd_session_evictions_total", "reason", "idle"); v != 1 {
		t.Errorf("evictions{reason=idle}: have %v; want 1", v)
	}
}

func TestSessionReplicaRestart(t *testing.T) {
	m := loadModel(t)
	ctx := seq(10, 30)
	a := startHealthy(t, Config{})
	d := establish(t, a, "conv", ctx, 8)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b := startHealthy(t, Config{}) // the replica again, fresh: no sessions
	st, h, body := extend(b, "conv", 3, 77, 8)
	checkError(t, st, h, body, 409, CodeUnknownSession, "resend")
	full := append(append(slices.Clip(ctx), d[:3]...), 77)
	have := establish(t, b, "conv", full, 8)
	want, err := m.Generate(full, 8)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(have, want) {
		t.Errorf("resent after restart: have %v; want %v", have, want)
	}
	// ... and it goes on incrementally.
	chain(t, b, m, rand.New(rand.NewPCG(1, 1)), "conv", full, 4, 8, true)
}

// TestSessionBatchesShareSessions: calls carrying the same sessions in
// opposite orders run concurrently without deadlock (locks in sorted id
// order), and each session's final state is one a call left: the next
// accepted=0 draft equals Generate on one of the contexts sent plus the bonus.
func TestSessionBatchesShareSessions(t *testing.T) {
	m := loadModel(t)
	ts := startHealthy(t, Config{})
	ctxs := map[string][][]int{"A": {{1, 2, 3}, {4, 5}}, "B": {{6, 7, 8}, {9}}}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			order := []string{"A", "B"}
			if g == 1 {
				order = []string{"B", "A"}
			}
			for range 10 {
				var items []string
				for _, id := range order {
					items = append(items, fmt.Sprintf(`{"id":%q,"session":%q,"tokens":%s,"n":3}`, id, id, idsJSON(ctxs[id][g])))
				}
				for _, r := range ts.postBatch(`{"requests":[` + strings.Join(items, ",") + `]}`) {
					if r.Draft == nil {
						t.Errorf("item %v failed: %+v", r.ID, r.Error)
					}
				}
			}
		})
	}
	wg.Wait()
	for id, cs := range ctxs {
		st, _, b := extend(ts, id, 0, 11, 3)
		if st != 200 {
			t.Fatalf("%s: %d %s", id, st, b)
		}
		have := decodeDraft(t, b)
		ok := false
		for _, c := range cs {
			want, err := m.Generate(append(slices.Clip(c), 11), 3)
			if err != nil {
				t.Fatal(err)
			}
			ok = ok || slices.Equal(have, want)
		}
		if !ok {
			t.Errorf("%s: draft %v matches no context that was sent", id, have)
		}
	}
}

// TestDeleteWhileDraftRuns: a DELETE of a session that arrives while the
// session's draft runs answers 204 and holds: the draft is answered, and
// the next accepted/bonus request gets 409 unknown_session. A session
// established after the DELETE is kept as usual.
func TestDeleteWhileDraftRuns(t *testing.T) {
	g := newGate()
	ts := startHealthy(t, Config{Open: g.open(engine.Options{})})
	g.armed.Store(true)
	t.Cleanup(g.release)
	c, br := rawReq(t, ts, "POST", "/draft", `{"session":"s1","tokens":[1,2,3],"n":4}`)
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not start the session draft")
	}
	if st, _, b := ts.do("DELETE", "/v1/sessions/s1", ""); st != http.StatusNoContent {
		t.Fatalf("DELETE while the draft runs: %d %s; want 204", st, b)
	}
	g.release()
	resp, b, err := answerOf(t, c, br, 30*time.Second)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the running draft: %v %v %s; want 200", resp, err, b)
	}
	st, h, b := extend(ts, "s1", 0, 1, 4)
	checkError(t, st, h, b, http.StatusConflict, CodeUnknownSession, "unknown")

	establish(t, ts, "s1", []int{1, 2, 3}, 4)
	if st, _, b := extend(ts, "s1", 0, 1, 4); st != http.StatusOK {
		t.Errorf("a session established after the DELETE: extend %d %s; want 200", st, b)
	}
}

// TestDeleteSessionPaths: a DELETE on /v1/sessions/ that names no single
// valid session is 400 invalid_request — never a 405 that lists DELETE as
// allowed, nor a redirect to another session's path (which a client that
// follows redirects would delete).
func TestDeleteSessionPaths(t *testing.T) {
	ts := startHealthy(t, Config{})
	establish(t, ts, "b", []int{1, 2, 3}, 4)
	for _, path := range []string{"/v1/sessions/", "/v1/sessions/a/b", "/v1/sessions/a/../b", "/v1/sessions/./b", "/v1/sessions//b", "/v1/sessions/a%2Fb", "/v1/sessions/b/"} {
		c, br := rawReq(t, ts, "DELETE", path, "")
		resp, b, err := answerOf(t, c, br, 20*time.Second)
		if err != nil {
			t.Fatalf("DELETE %s: %v", path, err)
		}
		if loc := resp.Header.Get("Location"); loc != "" {
			t.Errorf("DELETE %s: redirect to %s", path, loc)
		}
		checkError(t, resp.StatusCode, resp.Header, b, http.StatusBadRequest, CodeInvalidRequest, "session")
	}
	if st, _, b := extend(ts, "b", 0, 1, 4); st != http.StatusOK {
		t.Errorf("session b after DELETEs of other paths: extend %d %s; want 200", st, b)
	}
	// Other methods on a session path stay 405 (allowed: DELETE).
	c, br := rawReq(t, ts, "GET", "/v1/sessions/b", "")
	if resp, _, err := answerOf(t, c, br, 20*time.Second); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "DELETE" {
		t.Errorf("GET /v1/sessions/b: %v %v; want 405 with Allow: DELETE", resp, err)
	}
	// A DELETE with X-Draftd-Session given twice is refused as /draft
	// refuses it.
	c, br = rawReq(t, ts, "DELETE", "/v1/sessions/b", "", SessionHeader+": b", SessionHeader+": b")
	resp, b, err := answerOf(t, c, br, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, resp.StatusCode, resp.Header, b, http.StatusBadRequest, CodeInvalidRequest, "given 2 times")
}

// recallBackend records the Recall of every item it passes on.
type recallBackend struct {
	Backend
	mu   sync.Mutex
	seen [][]int
}

func (b *recallBackend) DraftBatch(ctx context.Context, items []BatchItem) ([]engine.Result, []error, error) {
	b.mu.Lock()
	for _, it := range items {
		b.seen = append(b.seen, slices.Clone(it.Recall))
	}
	b.mu.Unlock()
	return b.Backend.DraftBatch(ctx, items)
}

func (b *recallBackend) last() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[len(b.seen)-1]
}

// TestSessionRecallEqualsGenerate runs sessions on a server whose default is
// hybrid with recall: an "accepted"+"bonus" request hands the engine the
// session's last draft after its accepted tokens (Recall; none when all were
// accepted or with "tokens"), and every draft equals model.Generate on the
// full context, whether the bonus continues the old chain (its rest is
// recalled and kept) or not.
func TestSessionRecallEqualsGenerate(t *testing.T) {
	m := loadModel(t)
	opt := draft.DefaultOptions()
	opt.Eager = true
	rb := &recallBackend{}
	ts := startHealthy(t, Config{Open: tinyOpen(engine.Options{Strategy: draft.Hybrid{Opt: opt}},
		func(b Backend) Backend { rb.Backend = b; return rb })})
	for g := range 4 {
		r := rand.New(rand.NewPCG(uint64(g), 123))
		id := fmt.Sprintf("recall-%d", g)
		ctx := randIDs(r, 5+r.IntN(40))
		n := 6 + 2*g
		body := fmt.Sprintf(`{"session":%q,"tokens":%s,"n":%d}`, id, idsJSON(ctx), n)
		var wantRecall []int
		for step := 0; len(ctx)+n+1 < tinyMax; step++ {
			st, _, b := ts.sessionPost(body, id)
			if st != http.StatusOK {
				t.Fatalf("%s step %d: status %d %s", id, step, st, b)
			}
			if have := rb.last(); !slices.Equal(have, wantRecall) {
				t.Fatalf("%s step %d: recall %v; want %v", id, step, have, wantRecall)
			}
			have := decodeDraft(t, b)
			want, err := m.Generate(ctx, min(n, tinyMax-len(ctx)))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(have, want) {
				t.Fatalf("%s step %d (context %d): session draft %v; Generate %v", id, step, len(ctx), have, want)
			}
			k := r.IntN(len(have) + 1)
			var bonus int
			switch {
			case step%2 == 0 && k < len(have):
				bonus = have[k] // the old chain goes on: its rest is recalled and kept
			default:
				bonus = r.IntN(tinyVocab)
			}
			ctx = append(append(slices.Clip(ctx), have[:k]...), bonus)
			wantRecall = nil
			if k < len(have) {
				wantRecall = have[k:]
			}
			body = fmt.Sprintf(`{"session":%q,"accepted":%d,"bonus":%d,"n":%d}`, id, k, bonus, n)
		}
	}
}

package eval

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// TestReplayPeerFailures checks that llama-server's chat-parser 500 is
// scored as a failure (empty draft) and also counted as the peer's own, by
// reason, while an ordinary 500 is not.
func TestReplayPeerFailures(t *testing.T) {
	// E: continuation 50 51 52
	//   p=0 chat-parser 500 → a=0, p=1 (failure, the peer's own)
	//   p=1 500             → a=0, p=2 (failure, not the peer's own)
	//   p=2 draft 52        → a=1, p=4   3 steps
	e := Sample{ID: "E", Prompt: []int{5}, Continuation: []int{50, 51, 52}}
	script := map[string]reply{
		key(ctxOf(e, 0)): {peerBug: true},
		key(ctxOf(e, 1)): {status: 500},
		key(ctxOf(e, 2)): {draft: []int{52}},
	}
	_, srv := newFakeServer(t, 4, script)
	d, err := NewDrafter(BackendLlamaServer, NewHTTPClient(1), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Replay(t.Context(), d, []Sample{e}, ReplayOptions{N: 4, Concurrency: 1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, want{
		tokens: 3, steps: 3, failures: 2, draftTokens: 1,
		tau: 1, tauMacro: 1,
		hist:     []int64{2, 1, 0, 0, 0},
		reached:  []int64{1, 0, 0, 0},
		accepted: []int64{1, 0, 0, 0},
		kinds:    map[string]int{"HTTP 500": 2},
	})
	if r.PeerFailures != 1 || !reflect.DeepEqual(r.PeerFailureReasons, map[string]int{ReasonLlamaChatParser: 1}) {
		t.Errorf("peer failures: have %d %v; want 1 {%q: 1}", r.PeerFailures, r.PeerFailureReasons, ReasonLlamaChatParser)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		PeerFailures *int64         `json:"peer_failures"`
		Reasons      map[string]int `json:"peer_failure_reasons"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.PeerFailures == nil || *m.PeerFailures != 1 || m.Reasons[ReasonLlamaChatParser] != 1 {
		t.Errorf("JSON peer_failures, peer_failure_reasons: have %v %v in %s", m.PeerFailures, m.Reasons, data)
	}

	t.Run("draftd backend", func(t *testing.T) {
		// The draftd client never calls a 500 the peer's own: for draftd a
		// 500 is a bug of the system under test.
		_, srv := newFakeServer(t, 4, map[string]reply{key(ctxOf(e, 0)): {status: 500}, key(ctxOf(e, 1)): {peerBug: true}})
		d, _ := NewDrafter(BackendDraftd, NewHTTPClient(1), srv.URL)
		r, err := Replay(t.Context(), d, []Sample{e}, ReplayOptions{N: 4, Concurrency: 1, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r.Failures != 3 || r.PeerFailures != 0 || r.PeerFailureReasons != nil {
			t.Errorf("failures, peer failures: have %d, %d %v; want 3, 0 nil", r.Failures, r.PeerFailures, r.PeerFailureReasons)
		}
	})
}

// TestLlamaServerPeerError checks which llama-server errors the client calls
// the peer's own: only the chat-parser 500, not any 500 or 400.
func TestLlamaServerPeerError(t *testing.T) {
	_, srv := newFakeServer(t, 4, map[string]reply{"[6]": {peerBug: true}, "[7]": {status: 500}, "[8]": {status: 400}})
	d, _ := NewDrafter(BackendLlamaServer, NewHTTPClient(1), srv.URL)
	for _, tt := range []struct {
		tokens []int
		status int
		peer   bool
	}{{[]int{6}, 500, true}, {[]int{7}, 500, false}, {[]int{8}, 400, false}} {
		_, err := d.Draft(t.Context(), tt.tokens, 4)
		var se *StatusError
		var pe *PeerError
		if !errors.As(err, &se) || se.Status != tt.status {
			t.Errorf("tokens %v: have %v; want a *StatusError %d", tt.tokens, err, tt.status)
		}
		if isPeer := errors.As(err, &pe); isPeer != tt.peer || (isPeer && pe.Reason != ReasonLlamaChatParser) {
			t.Errorf("tokens %v: have %v (a *PeerError: %v); want a *PeerError: %v", tt.tokens, err, isPeer, tt.peer)
		}
	}
}

// TestRouted checks that Routed sends every request of a conversation (same
// first AffinityTokens ids, any length) to one server and spreads
// conversations over all of them.
func TestRouted(t *testing.T) {
	type hit struct{ server, conv int }
	var hits []hit
	var mu sync.Mutex
	var rs Routed
	for i := range 3 {
		rs = append(rs, drafterFunc(func(_ context.Context, tokens []int, n int) ([]int, error) {
			mu.Lock()
			hits = append(hits, hit{i, tokens[0]})
			mu.Unlock()
			return []int{i}, nil
		}))
	}
	for conv := range 30 {
		ctx := make([]int, AffinityTokens)
		for j := range ctx {
			ctx[j] = conv*1000 + j
		}
		for _, extra := range []int{0, 1, 7, 50} {
			c := append(append([]int{}, ctx...), make([]int, extra)...)
			if _, err := rs.Draft(t.Context(), c, 4); err != nil {
				t.Fatal(err)
			}
		}
	}
	server := map[int]int{} // conversation → server
	used := map[int]int{}
	for _, h := range hits {
		if s, ok := server[h.conv]; ok && s != h.server {
			t.Errorf("conversation %d: served by %d and %d", h.conv, s, h.server)
		}
		server[h.conv] = h.server
		used[h.server]++
	}
	if len(used) != 3 {
		t.Errorf("requests per server %v: want all 3 used by 30 conversations", used)
	}
}

type drafterFunc func(ctx context.Context, tokens []int, n int) ([]int, error)

func (f drafterFunc) Draft(ctx context.Context, tokens []int, n int) ([]int, error) {
	return f(ctx, tokens, n)
}

// Unit tests of the session store: ids, Extend against a plain slice
// model, LRU eviction by count and tokens, idle expiry on an injected clock,
// and the per-session lock. The HTTP behaviour is tested in internal/server.
package session

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "A-z_0.9:x": true, strings.Repeat("x", 128): true,
		"": false, strings.Repeat("x", 129): false, "a b": false, "a/b": false, "é": false, "a\x00": false,
	} {
		if ValidID(id) != want {
			t.Errorf("ValidID(%q): have %v; want %v", id, !want, want)
		}
	}
}

func newStore(t *testing.T, opt Options) *Store {
	t.Helper()
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestExtendAndEviction(t *testing.T) {
	now := time.Unix(0, 0)
	s := newStore(t, Options{MaxSessions: 2, MaxTokens: 20, TTL: time.Minute, Now: func() time.Time { return now }})
	s.Put("a", []int{1, 2, 3}, []int{4, 5})
	full, err := s.Extend("a", 1, 9)
	if err != nil || !slices.Equal(full, []int{1, 2, 3, 4, 9}) {
		t.Fatalf("Extend(a, 1, 9): have %v, %v; want [1 2 3 4 9]", full, err)
	}
	var ae *AcceptedError
	if _, err := s.Extend("a", 3, 9); !errors.As(err, &ae) || ae.DraftLen != 2 {
		t.Errorf("Extend(a, 3): have %v; want an AcceptedError with DraftLen 2", err)
	}
	if _, err := s.Extend("zz", 0, 1); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown: have %v", err)
	}
	s.Put("b", []int{1}, nil)
	s.Extend("a", 0, 1) // a most recent
	s.Put("c", []int{1}, nil)
	if _, err := s.Extend("b", 0, 1); !errors.Is(err, ErrUnknown) {
		t.Errorf("b after count eviction: have %v; want ErrUnknown", err)
	}
	// Count again: a (the LRU now) goes for d.
	s.Put("d", make([]int, 15), []int{1})
	if _, err := s.Extend("a", 0, 1); !errors.Is(err, ErrUnknown) {
		t.Errorf("a after the second count eviction: have %v", err)
	}
	st := s.Stats()
	if st.Sessions != 2 || st.Tokens != 17 || st.Evicted[ReasonCount] != 2 || st.Evicted[ReasonTokens] != 0 {
		t.Errorf("stats %+v; want 2 sessions, 17 tokens, 2 count evictions", st)
	}
	// Tokens: c (1) + d (16) = 17; e of 4 makes 21 > 20: c, the LRU, goes
	// (d stays: 16 + 4 = 20 fits).
	s.opt.MaxSessions = 10
	s.Put("e", []int{1, 2, 3}, []int{4})
	if _, err := s.Extend("c", 0, 1); !errors.Is(err, ErrUnknown) {
		t.Errorf("c after token eviction: have %v", err)
	}
	if st := s.Stats(); st.Sessions != 2 || st.Tokens != 20 || st.Evicted[ReasonTokens] != 1 {
		t.Errorf("stats %+v; want 2 sessions, 20 tokens, 1 token eviction", st)
	}
	if s.Put("huge", make([]int, 21), nil) {
		t.Error("Put of 21 tokens into a 20-token store: kept")
	}
	now = now.Add(time.Minute)
	if st := s.Stats(); st.Sessions != 0 || st.Tokens != 0 || st.Evicted[ReasonIdle] != 2 {
		t.Errorf("after the TTL: %+v; want empty, 2 idle evictions", st)
	}
	if !s.Put("e", []int{1}, nil) || !s.Delete("e") || s.Delete("e") {
		t.Error("Delete: want true once, then false")
	}
}

func TestLockSerializes(t *testing.T) {
	s := newStore(t, Options{MaxSessions: 4, MaxTokens: 100, TTL: time.Hour})
	unlock, err := s.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Lock(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("second Lock with a cancelled ctx while held: have %v", err)
	}
	other, err := s.Lock(ctx, "y") // another session is not blocked... unless ctx is done first
	if err == nil {
		other()
	}
	got := make(chan struct{})
	go func() {
		u, err := s.Lock(context.Background(), "x")
		if err == nil {
			u()
		}
		close(got)
	}()
	unlock()
	<-got
	if n := len(s.locks); n != 0 {
		t.Errorf("%d lock entries left; want 0", n)
	}
}

// TestDeleteWhileLocked: a Delete while a request of the session holds its
// lock, or waits for it, is not undone by that request's Put; a request
// that calls Lock after the Delete establishes the session as usual.
func TestDeleteWhileLocked(t *testing.T) {
	s := newStore(t, Options{MaxSessions: 4, MaxTokens: 100, TTL: time.Minute})
	ctx := context.Background()
	s.Put("a", []int{1, 2}, []int{3})
	unlock, err := s.Lock(ctx, "a") // a running request
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan func())
	go func() { // a request that arrived before the Delete
		u, _ := s.Lock(ctx, "a")
		waiting <- u
	}()
	for {
		s.mu.Lock()
		refs := s.locks["a"].refs
		s.mu.Unlock()
		if refs == 2 {
			break
		}
		time.Sleep(time.Millisecond) // polling the waiter's arrival, not ordering by time
	}
	if !s.Delete("a") {
		t.Fatal("Delete of a held session: false")
	}
	if s.Put("a", []int{1, 2, 3}, []int{4}) {
		t.Error("Put by the holder that locked before the Delete: kept")
	}
	unlock()
	u := <-waiting
	if s.Put("a", []int{5}, []int{6}) {
		t.Error("Put by the waiter that locked before the Delete: kept")
	}
	u()
	if _, err := s.Extend("a", 0, 1); !errors.Is(err, ErrUnknown) {
		t.Errorf("Extend after the Delete: %v; want ErrUnknown", err)
	}
	u, err = s.Lock(ctx, "a") // after the Delete
	if err != nil {
		t.Fatal(err)
	}
	if !s.Put("a", []int{7}, []int{8}) {
		t.Error("Put by a request that locked after the Delete: not kept")
	}
	u()
	if full, err := s.Extend("a", 1, 9); err != nil || !slices.Equal(full, []int{7, 8, 9}) {
		t.Errorf("Extend: %v %v; want [7 8 9]", full, err)
	}
}

// TestBytesAccounted: what Stats says sessions cost is at least the heap the
// store really grows by holding them (runtime.MemStats after a GC, an
// independent measure), and not more than 3× it, for small and large
// sessions and for counts just below and above a growth of the id map.
func TestBytesAccounted(t *testing.T) {
	for _, c := range []struct{ n, ctx, draft, idLen int }{
		{1000, 1, 0, 5}, {1000, 4, 2, 12}, {5000, 4, 2, 36}, {8192, 1, 1, 8}, {8193, 1, 1, 8},
		{20000, 2, 8, 20}, {3000, 200, 16, 128}, {500, 2049, 0, 8}, {300, 8193, 8, 8}, {200, 33000, 8, 8},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := newStore(t, Options{MaxSessions: c.n, MaxTokens: int64(c.n * (c.ctx + c.draft)), TTL: time.Hour})
		for i := range c.n {
			id := fmt.Sprintf("%0*d", c.idLen, i) // (idLen bytes: every case's ids have room for n)
			if !s.Put(id, make([]int, c.ctx), make([]int, c.draft)) {
				t.Fatalf("%+v: Put %d refused", c, i)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := s.Stats()
		runtime.KeepAlive(s)
		grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		if st.Sessions != c.n {
			t.Fatalf("%+v: %d sessions held; want %d", c, st.Sessions, c.n)
		}
		t.Logf("%+v: accounted %d B (%.0f B/session), heap grew %d B (%.0f B/session)",
			c, st.Bytes, float64(st.Bytes)/float64(c.n), grew, float64(grew)/float64(c.n))
		if st.Bytes < grew || st.Bytes > 3*grew {
			t.Errorf("%+v: accounted %d B; the heap grew %d B (want accounted in [grew, 3 × grew])", c, st.Bytes, grew)
		}
		if max := MaxBytes(c.n, int64(c.n*(c.ctx+c.draft))); st.Bytes > max {
			t.Errorf("%+v: accounted %d B > MaxBytes %d", c, st.Bytes, max)
		}
	}
}

func TestRecall(t *testing.T) {
	s := newStore(t, Options{MaxSessions: 4, MaxTokens: 100, TTL: time.Hour})
	s.Put("a", []int{1, 2, 3}, []int{7, 8, 9})
	for _, c := range []struct {
		id       string
		accepted int
		want     []int
	}{
		{"a", 0, []int{7, 8, 9}},
		{"a", 2, []int{9}},
		{"a", 3, nil}, // all accepted: nothing to recall
		{"a", 4, nil},
		{"a", -1, nil},
		{"b", 0, nil}, // unknown
	} {
		if have := s.Recall(c.id, c.accepted); !slices.Equal(have, c.want) {
			t.Errorf("Recall(%s, %d) = %v; want %v", c.id, c.accepted, have, c.want)
		}
	}
	r := s.Recall("a", 0)
	r[0] = 99 // a copy: the session's draft is unchanged
	if have, _ := s.Extend("a", 1, 5); !slices.Equal(have, []int{1, 2, 3, 7, 5}) {
		t.Errorf("after changing a recall: Extend = %v", have)
	}
}

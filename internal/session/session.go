// Package session is the store of draftd's incremental drafting sessions
// (docs/protocol.md, batched and incremental drafting): per session id, the context the client established and the
// last draft returned, so that a request can say "k tokens of your last
// draft were accepted and the target added t" instead of resending the whole
// context. The store is bounded by a session count, a total of stored tokens
// and an idle time, evicting the least recently used session first; a
// per-session lock serializes the requests of one session. It does not draft
// (the engine does) nor speak HTTP (internal/server does).
package session

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// MaxIDLen is the longest session id; ids are 1–MaxIDLen bytes of
// [A-Za-z0-9._:-].
const MaxIDLen = 128

// ValidID reports whether id is a valid session id.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// TokenBytes is what the store holds per token (ids are kept as int32).
const TokenBytes = 4

// EntryBytes bounds what one session costs the store besides its token
// arrays and its id's bytes: the entry (id, two slice headers, last use),
// its LRU list element, its share of the id map (slots at the lowest load
// factor after a growth) and the rounding of the id's allocation.
// TestBytesAccounted checks Stats.Bytes against the heap the store really
// grows by.
const EntryBytes = 320

// MaxBytes bounds what a store with these bounds can hold: 5 bytes per
// token (4, and up to a quarter more for the allocator's rounding of an
// array: at most 1/8 below 32 KiB, at most a page of 8 KiB above), and per
// session EntryBytes, the longest id and up to 16 bytes of rounding of each
// of its two arrays.
func MaxBytes(maxSessions int, maxTokens int64) int64 {
	return maxTokens*(TokenBytes+1) + int64(maxSessions)*(EntryBytes+MaxIDLen+32)
}

// Options bound a Store.
type Options struct {
	MaxSessions int              // sessions held at once (≥ 1)
	MaxTokens   int64            // context and last-draft tokens held, summed over sessions (≥ 1)
	TTL         time.Duration    // a session unused this long is gone (> 0)
	Now         func() time.Time // the clock (nil: time.Now); tests inject one
}

// Eviction reasons, the labels of Stats.Evicted.
const (
	ReasonCount  = "count"  // MaxSessions reached
	ReasonTokens = "tokens" // MaxTokens reached
	ReasonIdle   = "idle"   // unused for TTL
)

// Stats is a snapshot of a store.
type Stats struct {
	Sessions int               // sessions held
	Tokens   int64             // tokens held
	Bytes    int64             // what the sessions cost: their token arrays as allocated, ids and EntryBytes each
	Evicted  map[string]uint64 // sessions evicted, by reason
	Deleted  uint64            // sessions deleted by their client
}

// ErrUnknown: no such session (never established, deleted, evicted or
// expired).
var ErrUnknown = errors.New("unknown session")

// AcceptedError: accepted is more than the last draft's length.
type AcceptedError struct {
	Accepted, DraftLen int
}

func (e *AcceptedError) Error() string {
	return fmt.Sprintf("accepted = %d is outside [0, %d], the length of the session's last draft", e.Accepted, e.DraftLen)
}

// Store holds sessions. It is safe for concurrent use.
type Store struct {
	opt Options

	mu      sync.Mutex
	byID    map[string]*list.Element // of *entry
	lru     *list.List               // front: most recently used
	tokens  int64
	bytes   int64 // Σ entry.bytes() over the sessions held
	locks   map[string]*lock
	evicted map[string]uint64
	deleted uint64
}

type entry struct {
	id   string
	ctx  []int32 // (L) the session's context
	last []int32 // (≤ n) the last draft returned
	used time.Time
}

func (e *entry) size() int64 { return int64(len(e.ctx) + len(e.last)) }

// bytes is what the entry costs: its token arrays as allocated (their
// capacities, the allocator's rounding of their lengths), its id and
// EntryBytes.
func (e *entry) bytes() int64 {
	return int64(cap(e.ctx)+cap(e.last))*TokenBytes + int64(len(e.id)) + EntryBytes
}

// int32s copies ts into a new array whose capacity is the whole allocation
// (slices.Grow rounds it up to the allocator's size class, as append does).
func int32s(ts []int) []int32 {
	out := slices.Grow([]int32(nil), len(ts))[:len(ts)]
	for i, t := range ts {
		out[i] = int32(t)
	}
	return out
}

type lock struct {
	ch   chan struct{} // holds one value while locked
	refs int           // holders and waiters
	// deletes counts the Deletes of the id while the lock had holders or
	// waiters; held is its value when the current holder called Lock. A
	// holder whose Lock came before a Delete does not bring the session
	// back with its Put.
	deletes, held uint64
}

// New returns an empty store; options out of range are an error.
func New(opt Options) (*Store, error) {
	switch {
	case opt.MaxSessions < 1:
		return nil, fmt.Errorf("session: max sessions %d < 1", opt.MaxSessions)
	case opt.MaxTokens < 1:
		return nil, fmt.Errorf("session: max tokens %d < 1", opt.MaxTokens)
	case opt.TTL <= 0:
		return nil, fmt.Errorf("session: TTL %v ≤ 0", opt.TTL)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Store{
		opt: opt, byID: map[string]*list.Element{}, lru: list.New(), locks: map[string]*lock{},
		evicted: map[string]uint64{ReasonCount: 0, ReasonTokens: 0, ReasonIdle: 0},
	}, nil
}

// Options returns the store's bounds.
func (s *Store) Options() Options { return s.opt }

// Lock waits until the caller holds session id's lock (or ctx ends) and
// returns its release. Requests of one session run one at a time; a caller
// holding several locks must take them in sorted id order. A Delete of id
// after Lock was called (while the caller waits or holds the lock) makes
// the caller's Put of id a no-op: the session stays deleted.
func (s *Store) Lock(ctx context.Context, id string) (unlock func(), err error) {
	s.mu.Lock()
	l := s.locks[id]
	if l == nil {
		l = &lock{ch: make(chan struct{}, 1)}
		s.locks[id] = l
	}
	l.refs++
	arrived := l.deletes
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, id)
		}
		s.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		s.mu.Lock()
		l.held = arrived
		s.mu.Unlock()
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// Extend returns the context of session id after its client accepted the
// first accepted tokens of the last draft and the target added bonus and
// then more (none but for a client that let steps pass without drafts):
// context + last[:accepted] + [bonus] + more, a new slice. It fails with ErrUnknown
// or an *AcceptedError; it does not change the session (Put does, once the
// draft from it is made).
func (s *Store) Extend(id string, accepted, bonus int, more ...int) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opt.Now()
	s.expire(now)
	el := s.byID[id]
	if el == nil {
		return nil, ErrUnknown
	}
	e := el.Value.(*entry)
	if accepted < 0 || accepted > len(e.last) {
		return nil, &AcceptedError{Accepted: accepted, DraftLen: len(e.last)}
	}
	e.used = now
	s.lru.MoveToFront(el)
	full := make([]int, 0, len(e.ctx)+accepted+1+len(more)) // (L + accepted + 1 + len(more))
	for _, t := range e.ctx {
		full = append(full, int(t))
	}
	for _, t := range e.last[:accepted] {
		full = append(full, int(t))
	}
	return append(append(full, bonus), more...), nil
}

// Recall returns a copy of the tokens of session id's last draft after its
// first accepted ones (nil when there are none, or no such session). Called
// by the holder of id's lock after Extend, it is the rest of the draft
// Extend extended.
func (s *Store) Recall(id string, accepted int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.byID[id]
	if el == nil {
		return nil
	}
	e := el.Value.(*entry)
	if accepted < 0 || accepted >= len(e.last) {
		return nil
	}
	out := make([]int, len(e.last)-accepted)
	for i, t := range e.last[accepted:] {
		out[i] = int(t)
	}
	return out
}

// Put makes context and draft the state of session id (creating it), then
// evicts least recently used other sessions until the bounds hold. A state
// larger than MaxTokens by itself is not kept (false); the session is then
// gone. Called by the holder of id's lock, it keeps nothing (false) when id
// was deleted since that holder called Lock.
func (s *Store) Put(id string, context, draft []int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opt.Now()
	s.expire(now)
	if l := s.locks[id]; l != nil && len(l.ch) == 1 && l.held != l.deletes {
		return false
	}
	if el := s.byID[id]; el != nil {
		s.remove(el)
	}
	size := int64(len(context) + len(draft))
	if size > s.opt.MaxTokens {
		s.evicted[ReasonTokens]++
		return false
	}
	e := &entry{id: strings.Clone(id), ctx: int32s(context), last: int32s(draft), used: now}
	for s.lru.Len() >= s.opt.MaxSessions {
		s.remove(s.lru.Back())
		s.evicted[ReasonCount]++
	}
	for s.tokens+size > s.opt.MaxTokens {
		s.remove(s.lru.Back())
		s.evicted[ReasonTokens]++
	}
	s.byID[e.id] = s.lru.PushFront(e)
	s.tokens += size
	s.bytes += e.bytes()
	return true
}

// Delete removes session id, also for the requests of it that have
// called Lock and not yet Put (see Lock); false when there was none.
func (s *Store) Delete(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.opt.Now())
	if l := s.locks[id]; l != nil {
		l.deletes++
	}
	el := s.byID[id]
	if el == nil {
		return false
	}
	s.remove(el)
	s.deleted++
	return true
}

// Stats returns a snapshot (expiring idle sessions first).
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.opt.Now())
	ev := make(map[string]uint64, len(s.evicted))
	for k, v := range s.evicted {
		ev[k] = v
	}
	return Stats{Sessions: s.lru.Len(), Tokens: s.tokens, Bytes: s.bytes, Evicted: ev, Deleted: s.deleted}
}

// expire drops the sessions unused for TTL: the least recently used ones,
// at the back.
func (s *Store) expire(now time.Time) {
	for el := s.lru.Back(); el != nil; el = s.lru.Back() {
		if now.Sub(el.Value.(*entry).used) < s.opt.TTL {
			return
		}
		s.remove(el)
		s.evicted[ReasonIdle]++
	}
}

func (s *Store) remove(el *list.Element) {
	e := s.lru.Remove(el).(*entry)
	delete(s.byID, e.id)
	s.tokens -= e.size()
	s.bytes -= e.bytes()
}

// Unit tests of the prefix cache with small fake blocks (no model): trie
// insert/match/split, copy-on-write of partly matched blocks, refcounts,
// LRU eviction, budget errors and the block accounting invariant.
package kvcache

import (
	"errors"
	"slices"
	"testing"

	"github.com/draftd/draftd/internal/model"
)

const (
	testHeadDim  = 2
	testSegments = 3 // (layers·kvHeads) segments per block
)

// newTestCache returns a cache of f32 blocks holding maxBlocks blocks.
func newTestCache(t *testing.T, maxBlocks int) *Cache {
	t.Helper()
	n := testSegments * BlockSize * testHeadDim
	spec := Spec{
		BlockBytes: 8 * n,
		HeadDim:    testHeadDim,
		NewBlock:   func() *model.Block { return &model.Block{K32: make([]float32, n), V32: make([]float32, n)} },
	}
	c, err := New(spec, int64(maxBlocks*spec.BlockBytes))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// write fills positions [from, to) of the lease as a forward pass would,
// with a value derived from the token and its position (so identical
// prefixes give identical KV, like the model).
func write(l *Lease, tokens []int, from, to int) {
	for p := from; p < to; p++ {
		b := l.Blocks[p/BlockSize]
		for s := range testSegments {
			off := (s*BlockSize + p%BlockSize) * testHeadDim
			for i := range testHeadDim {
				b.K32[off+i] = kv(tokens[:p+1], s, i)
				b.V32[off+i] = -kv(tokens[:p+1], s, i)
			}
		}
	}
}

func kv(prefix []int, s, i int) float32 {
	h := uint32(2166136261)
	for _, t := range prefix {
		h = (h ^ uint32(t)) * 16777619
	}
	return float32(h%100000) + float32(s*10+i)/100
}

// verify checks that the lease's blocks hold the KV of tokens[:n].
func verify(t *testing.T, l *Lease, tokens []int, n int) {
	t.Helper()
	for p := range n {
		b := l.Blocks[p/BlockSize]
		for s := range testSegments {
			off := (s*BlockSize + p%BlockSize) * testHeadDim
			for i := range testHeadDim {
				if want := kv(tokens[:p+1], s, i); b.K32[off+i] != want || b.V32[off+i] != -want {
					t.Fatalf("position %d segment %d: have K %v V %v; want %v", p, s, b.K32[off+i], b.V32[off+i], want)
				}
			}
		}
	}
}

// run is one sequence through the cache: acquire, write the uncached
// positions, commit. It returns the number of cached positions.
func run(t *testing.T, c *Cache, tokens []int, total int) int {
	t.Helper()
	all := seqTokens(tokens, total)
	l, err := c.Acquire(tokens, total)
	if err != nil {
		t.Fatalf("Acquire(%d tokens, %d): %v", len(tokens), total, err)
	}
	verify(t, l, all, l.Cached)
	write(l, all, l.Cached, total)
	c.Commit(l, all, total)
	checkInvariants(t, c)
	return l.Cached
}

// seqTokens extends tokens to total with deterministic "draft" tokens.
func seqTokens(tokens []int, total int) []int {
	all := slices.Clone(tokens)
	for len(all) < total {
		all = append(all, 1000+len(all))
	}
	return all
}

func seq(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}

func checkInvariants(t *testing.T, c *Cache) {
	t.Helper()
	if c.allocated != c.trie+c.leased+len(c.free) {
		t.Fatalf("allocated %d != trie %d + leased %d + free %d", c.allocated, c.trie, c.leased, len(c.free))
	}
	if c.allocated > c.maxBlocks {
		t.Fatalf("allocated %d > max %d", c.allocated, c.maxBlocks)
	}
	nodes, pinned := 0, 0
	var walk func(n *node)
	walk = func(n *node) {
		count := 0
		for _, list := range n.children {
			for _, x := range list {
				count++
				nodes++
				if x.refs > 0 {
					pinned++
					if n != &c.root && n.refs == 0 {
						t.Fatalf("pinned node under an unpinned parent")
					}
				}
				if x.parent != n {
					t.Fatalf("broken parent link")
				}
				if len(x.tokens) < BlockSize && x.nchild > 0 {
					t.Fatalf("partial node with children")
				}
				if ev := x.refs == 0 && x.nchild == 0; ev != (x.heapIdx >= 0) {
					t.Fatalf("node evictable=%v but heap index %d", ev, x.heapIdx)
				}
				walk(x)
			}
		}
		if count != n.nchild {
			t.Fatalf("nchild %d, children %d", n.nchild, count)
		}
	}
	walk(&c.root)
	if nodes != c.trie || pinned != c.pinned {
		t.Fatalf("trie %d nodes (counted %d), pinned %d (counted %d)", c.trie, nodes, c.pinned, pinned)
	}
	if s := c.Stats(); s.BytesInUse > s.BudgetBytes {
		t.Fatalf("bytes in use %d > budget %d", s.BytesInUse, s.BudgetBytes)
	}
}

func TestInsertMatchSplit(t *testing.T) {
	c := newTestCache(t, 100)
	a := seq(0, 40) // blocks: 16 + 16 + 8
	if got := run(t, c, a, 50); got != 0 {
		t.Fatalf("first run cached %d; want 0", got)
	}
	// Trie holds a + drafts up to 50 positions.
	all := seqTokens(a, 50)
	tests := []struct {
		name   string
		tokens []int
		want   int // Match
	}{
		{"same", all, 50},
		{"prefix in block 0", all[:5], 5},
		{"block boundary", all[:32], 32},
		{"diverge in block 1", append(slices.Clone(all[:20]), 9999), 20},
		{"diverge at 0", []int{7777}, 0},
		{"longer", append(slices.Clone(all), 1, 2, 3), 50},
	}
	for _, tc := range tests {
		if have := c.Match(tc.tokens); have != tc.want {
			t.Errorf("%s: Match = %d; want %d", tc.name, have, tc.want)
		}
	}
	// Split: a sequence diverging inside block 1 shares block 0 by
	// reference and copies the 4 matched positions of block 1.
	b := append(slices.Clone(all[:20]), seq(5000, 10)...)
	lb, err := c.Acquire(b, 40)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Cached != 20 {
		t.Errorf("Cached = %d; want 20", lb.Cached)
	}
	la, err := c.Acquire(all, 55)
	if err != nil {
		t.Fatal(err)
	}
	if la.Blocks[0] != lb.Blocks[0] {
		t.Error("full block 0 is not shared")
	}
	if la.Blocks[1] == lb.Blocks[1] {
		t.Error("partly matched block 1 is shared, not copied")
	}
	ball := seqTokens(b, 40)
	verify(t, lb, ball, 20)
	write(lb, ball, 20, 40) // must not disturb a's cached block 1
	verify(t, la, all, la.Cached)
	c.Commit(lb, ball, 40)
	c.Release(la)
	checkInvariants(t, c)
	for _, tc := range []struct {
		tokens []int
		want   int
	}{{all, 50}, {ball, 40}} {
		if have := c.Match(tc.tokens); have != tc.want {
			t.Errorf("after split: Match = %d; want %d", have, tc.want)
		}
	}
}

func TestNextTurnReusesDrafts(t *testing.T) {
	// The conversation pattern: context + accepted drafts + bonus.
	c := newTestCache(t, 100)
	ctx := seq(0, 30)
	n := 16
	run(t, c, ctx, len(ctx)+n-1) // drafts 1000+30 … with KV for all but the last
	all := seqTokens(ctx, len(ctx)+n)
	for _, accepted := range []int{0, 3, 15, 16} {
		next := append(slices.Clone(all[:len(ctx)+accepted]), 4242)
		l, err := c.Acquire(next, len(next)+n-1)
		if err != nil {
			t.Fatal(err)
		}
		want := len(ctx) + min(accepted, n-1)
		if l.Cached != want {
			t.Errorf("accepted %d: Cached = %d; want %d", accepted, l.Cached, want)
		}
		verify(t, l, all, l.Cached)
		c.Release(l)
	}
	checkInvariants(t, c)
}

func TestRefcountsAndBudget(t *testing.T) {
	c := newTestCache(t, 6)
	if _, err := c.Acquire(seq(0, 10), 7*BlockSize); !errors.Is(err, ErrTooLarge) {
		t.Errorf("7 blocks in a 6-block cache: have %v; want ErrTooLarge", err)
	}
	a := seq(0, 48)
	la, err := c.Acquire(a, 64) // 4 blocks
	if err != nil {
		t.Fatal(err)
	}
	write(la, seqTokens(a, 64), 0, 64)
	if _, err := c.Acquire(seq(100, 40), 48); !errors.Is(err, ErrNoSpace) {
		t.Errorf("3 more blocks with 2 free: have %v; want ErrNoSpace", err)
	}
	checkInvariants(t, c)
	c.Commit(la, seqTokens(a, 64), 64)
	// Now all 4 trie blocks are evictable; two sequences sharing a's first
	// two blocks pin them.
	l1, err := c.Acquire(seqTokens(a, 64)[:40], 40)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Cached != 39 {
		t.Errorf("Cached = %d; want 39", l1.Cached)
	}
	if c.pinned != 2 {
		t.Errorf("pinned = %d; want 2", c.pinned)
	}
	l2, err := c.Acquire(append(slices.Clone(a[:32]), 777, 778), 34)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Blocks[0] != l1.Blocks[0] || l2.Blocks[1] != l1.Blocks[1] {
		t.Error("shared prefix blocks differ")
	}
	if c.root.children[0][0].refs != 2 {
		t.Errorf("block 0 refs = %d; want 2", c.root.children[0][0].refs)
	}
	checkInvariants(t, c)
	// 6 blocks: 2 pinned shared + 1 private (l1) + 1 private (l2) + 2 left
	// in the trie (a's blocks 2, 3), evictable. A 3-block request fails.
	if _, err := c.Acquire(seq(300, 40), 40); !errors.Is(err, ErrNoSpace) {
		t.Errorf("have %v; want ErrNoSpace", err)
	}
	l3, err := c.Acquire(seq(300, 20), 20) // 2 blocks: evicts a's tail
	if err != nil {
		t.Fatal(err)
	}
	if c.Stats().Evictions != 2 {
		t.Errorf("evictions = %d; want 2", c.Stats().Evictions)
	}
	verify(t, l1, seqTokens(a, 64), l1.Cached) // pinned blocks untouched
	c.Release(l1)
	c.Release(l2)
	c.Release(l3)
	checkInvariants(t, c)
	if c.pinned != 0 || c.leased != 0 {
		t.Errorf("after release: pinned %d, leased %d; want 0, 0", c.pinned, c.leased)
	}
}

func TestLRUEviction(t *testing.T) {
	c := newTestCache(t, 3)
	x, y, z := seq(0, 10), seq(100, 10), seq(200, 10)
	run(t, c, x, 10)
	run(t, c, y, 10)
	run(t, c, z, 10)
	run(t, c, append(slices.Clone(x), 1), 11) // touch x: y is now the oldest
	run(t, c, seq(300, 10), 10)               // needs one block
	if c.Match(y) != 0 {
		t.Error("y (least recently used) was not evicted")
	}
	for _, s := range [][]int{x, z, seq(300, 10)} {
		if c.Match(s) != 10 {
			t.Errorf("Match(%v…) = %d; want 10", s[0], c.Match(s))
		}
	}
	// Eviction frees leaves before their parents.
	c2 := newTestCache(t, 4)
	long := seq(0, 48) // 3 blocks in a chain
	run(t, c2, long, 48)
	run(t, c2, seq(500, 10), 10) // 1 block, newer
	run(t, c2, seq(600, 10), 10) // evicts the chain's leaf only
	if have := c2.Match(long); have != 32 {
		t.Errorf("chain after one eviction: Match = %d; want 32", have)
	}
	checkInvariants(t, c2)
}

func TestDuplicateAndLongerPartials(t *testing.T) {
	c := newTestCache(t, 20)
	a := seq(0, 20)
	// Two sequences computing the same tokens concurrently: the second
	// commit keeps the first's blocks and frees its own.
	l1, _ := c.Acquire(a, 20)
	l2, _ := c.Acquire(a, 20)
	write(l1, a, 0, 20)
	write(l2, a, 0, 20)
	c.Commit(l1, a, 20)
	c.Commit(l2, a, 20)
	checkInvariants(t, c)
	if c.trie != 2 {
		t.Errorf("trie has %d blocks; want 2", c.trie)
	}
	// A longer version of the partial block 1 replaces it.
	b := seq(0, 25)
	run(t, c, b, 25)
	if c.trie != 2 || c.Match(b) != 25 {
		t.Errorf("after longer partial: trie %d blocks, Match %d; want 2, 25", c.trie, c.Match(b))
	}
	// A shorter one is dropped.
	run(t, c, seq(0, 18), 18)
	if c.trie != 2 {
		t.Errorf("after shorter partial: trie %d blocks; want 2", c.trie)
	}
	checkInvariants(t, c)
}

func TestReset(t *testing.T) {
	c := newTestCache(t, 10)
	run(t, c, seq(0, 40), 40)
	l, _ := c.Acquire(seq(0, 40), 60)
	_ = l
	c.Reset()
	checkInvariants(t, c)
	if s := c.Stats(); s.BytesInUse != 0 || c.Match(seq(0, 40)) != 0 {
		t.Errorf("after Reset: %d bytes in use, Match %d", s.BytesInUse, c.Match(seq(0, 40)))
	}
	run(t, c, seq(0, 40), 40)
}

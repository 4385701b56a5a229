// Package kvcache is draftd's prefix cache: paged KV blocks (model.Block, 16
// positions each) kept in a trie of block-sized token chunks, with refcounts,
// LRU eviction under a byte budget and a free list so memory never exceeds
// the budget. It does not run the model or schedule requests (internal/engine
// does), and it is not safe for concurrent use: one goroutine (the engine's)
// calls every method except Stats, which reads atomics.
//
// Exactness rule: a block that is in the trie is never written again. A
// sequence shares (by reference) only full blocks whose 16 tokens it matches
// and continues past; a block it matches only in part — the typical case for
// the next request of a conversation, which diverges from the cached drafts
// at the bonus token — is copied into a private block (copy-on-write of the
// matched positions), and the sequence writes its new positions there. Private
// blocks enter the trie only when the sequence commits, after its last write.
package kvcache

import (
	"container/heap"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/draftd/draftd/internal/model"
)

// BlockSize is the number of positions of one block (model.BlockSize).
const BlockSize = model.BlockSize

var (
	// ErrNoSpace means the blocks a sequence needs are not free now: blocks
	// held by active sequences fill the budget. Retry after one finishes.
	ErrNoSpace = errors.New("kvcache: KV budget is held by active sequences")
	// ErrTooLarge means one sequence needs more blocks than the whole budget.
	ErrTooLarge = errors.New("kvcache: sequence needs more KV blocks than the budget holds")
)

// Spec describes the blocks the cache manages.
type Spec struct {
	BlockBytes int                 // memory of one block
	HeadDim    int                 // elements per position within one (layer, kvHead) segment of a block
	NewBlock   func() *model.Block // allocates one block
}

// SpecOf returns the Spec of m's KV blocks.
func SpecOf(m *model.Model) Spec {
	return Spec{BlockBytes: m.BlockBytes(), HeadDim: m.HeadDim, NewBlock: m.NewBlock}
}

// node is one block of the trie: the KV of positions [depth·16, depth·16+len(tokens)).
// A node with fewer than BlockSize tokens is a leaf and is never shared by
// reference (only copied), so it can be replaced by a longer version.
type node struct {
	tokens   []int32           // (≤ BlockSize) the chunk this block holds KV for
	block    *model.Block      // KV of tokens; never written while in the trie
	parent   *node             // nil for the root
	children map[int32][]*node // by first token of the child's chunk
	nchild   int
	refs     int    // leases holding this node (a lease holds its whole path)
	lastUse  uint64 // LRU clock
	heapIdx  int    // index in the evictable heap, -1 when not evictable
}

// Lease is one active sequence's hold on the cache: Blocks cover positions
// [0, total) where [0, Cached) are already filled from the cache and the
// sequence writes the rest. Only the owner writes Blocks[Cached/16:].
type Lease struct {
	Blocks []*model.Block // (ceil(total/16)) KV blocks of the sequence
	Cached int            // positions whose KV came from the cache

	path []*node // shared full blocks: Blocks[:len(path)]
	done bool
}

// Stats are the cache's counters, readable from any goroutine.
type Stats struct {
	BudgetBytes  int64 // the byte budget
	BlockBytes   int64 // bytes of one block
	MaxBlocks    int   // blocks that fit the budget
	TrieBlocks   int   // blocks held by the trie (reusable prefixes)
	LeasedBlocks int   // private blocks of active sequences
	FreeBlocks   int   // allocated blocks on the free list
	BytesInUse   int64 // (TrieBlocks + LeasedBlocks) · BlockBytes
	Evictions    uint64
}

// Cache is the prefix cache.
type Cache struct {
	spec      Spec
	budget    int64
	maxBlocks int

	root      node
	evictable nodeHeap // refs == 0, no children, ordered by lastUse
	free      []*model.Block
	allocated int // blocks that exist: trie + leased + free
	trie      int // nodes in the trie (excluding the root)
	pinned    int // trie nodes with refs > 0
	leased    int // private blocks of live leases
	clock     uint64

	st struct {
		trie, leased, free atomic.Int64
		evictions          atomic.Uint64
	}
}

// New returns an empty cache holding at most budgetBytes of blocks.
func New(spec Spec, budgetBytes int64) (*Cache, error) {
	if spec.BlockBytes <= 0 || spec.HeadDim <= 0 || spec.NewBlock == nil {
		return nil, fmt.Errorf("kvcache: incomplete block spec %+v", spec)
	}
	maxBlocks := budgetBytes / int64(spec.BlockBytes)
	if maxBlocks < 1 {
		return nil, fmt.Errorf("kvcache: budget of %d bytes holds no block of %d bytes", budgetBytes, spec.BlockBytes)
	}
	c := &Cache{spec: spec, budget: budgetBytes, maxBlocks: int(min(maxBlocks, 1<<30))}
	c.root.heapIdx = -1
	return c, nil
}

// MaxBlocks is the number of blocks the budget holds.
func (c *Cache) MaxBlocks() int { return c.maxBlocks }

// BlocksFor is the number of blocks covering positions [0, positions).
func BlocksFor(positions int) int { return (positions + BlockSize - 1) / BlockSize }

// Acquire finds the longest cached prefix of tokens[:len(tokens)-1] (the last
// token is always recomputed: its logits are needed) and allocates the blocks
// for positions [0, total), total ≥ len(tokens). It returns ErrTooLarge when
// total can never fit and ErrNoSpace when it cannot fit now; in both cases
// nothing changes but LRU order.
func (c *Cache) Acquire(tokens []int, total int) (*Lease, error) {
	if len(tokens) == 0 || total < len(tokens) {
		return nil, fmt.Errorf("kvcache: Acquire of %d tokens for %d positions", len(tokens), total)
	}
	nb := BlocksFor(total)
	if nb > c.maxBlocks {
		return nil, fmt.Errorf("%w: %d positions need %d blocks of %d bytes; the budget of %d bytes holds %d",
			ErrTooLarge, total, nb, c.spec.BlockBytes, c.budget, c.maxBlocks)
	}
	c.clock++
	limit := len(tokens) - 1
	// Walk the trie: full blocks matched and continued past are shared.
	var path []*node
	cur := &c.root
	var cow *node // block matched in part: its first cowLen positions are copied
	cowLen := 0
	for pos := 0; pos < limit; pos += BlockSize {
		chunk := tokens[pos:min(pos+BlockSize, limit)]
		child, l := cur.best(chunk)
		if child == nil || l == 0 {
			break
		}
		if l == BlockSize && len(child.tokens) == BlockSize {
			path = append(path, child)
			cur = child
			continue
		}
		cow, cowLen = child, l
		break
	}
	// Pin what we use so that allocation cannot evict it.
	for _, n := range path {
		c.ref(n)
	}
	if cow != nil {
		c.ref(cow)
	}
	need := nb - len(path)
	if c.available() < need {
		c.unrefPath(path)
		if cow != nil {
			c.unref(cow)
		}
		return nil, ErrNoSpace
	}
	l := &Lease{Blocks: make([]*model.Block, 0, nb), path: path, Cached: len(path) * BlockSize}
	for _, n := range path {
		l.Blocks = append(l.Blocks, n.block)
	}
	for range need {
		l.Blocks = append(l.Blocks, c.alloc())
	}
	c.leased += need
	if cow != nil {
		model.CopyPositions(l.Blocks[len(path)], cow.block, cowLen, c.spec.HeadDim)
		l.Cached += cowLen
		c.unref(cow)
	}
	c.publish()
	return l, nil
}

// Commit inserts the first valid positions of the lease (their tokens are
// tokens[:valid]; every one of them must have been written) into the trie and
// ends the lease. Blocks past valid go to the free list.
func (c *Cache) Commit(l *Lease, tokens []int, valid int) {
	if l.done {
		return
	}
	l.done = true
	c.clock++
	valid = min(valid, len(tokens), len(l.Blocks)*BlockSize)
	cur := &c.root
	for _, n := range l.path {
		n.lastUse = c.clock
		cur = n
	}
	i := len(l.path)
	for ; i*BlockSize < valid; i++ {
		chunk := tokens[i*BlockSize : min((i+1)*BlockSize, valid)]
		b := l.Blocks[i]
		c.leased--
		if cur == nil { // stopped below a partial node: nothing more to insert
			c.release(b)
			continue
		}
		cur = c.insert(cur, chunk, b)
	}
	for ; i < len(l.Blocks); i++ {
		c.leased--
		c.release(l.Blocks[i])
	}
	c.unrefPath(l.path)
	// Refresh heap order of the whole path (lastUse changed).
	for _, n := range l.path {
		c.fix(n)
	}
	l.Blocks = nil
	c.publish()
}

// Release ends the lease without inserting anything (the sequence failed and
// its private blocks may hold garbage).
func (c *Cache) Release(l *Lease) {
	if l.done {
		return
	}
	l.done = true
	for _, b := range l.Blocks[len(l.path):] {
		c.leased--
		c.release(b)
	}
	c.unrefPath(l.path)
	l.Blocks = nil
	c.publish()
}

// Reset forgets every block — the trie, the free list and the blocks of
// live leases, which must not be used afterwards — after an internal
// failure has left the cache's state in doubt.
func (c *Cache) Reset() {
	c.root = node{heapIdx: -1}
	c.evictable = nil
	c.free = nil
	c.allocated, c.leased, c.trie, c.pinned = 0, 0, 0, 0
	c.publish()
}

// Match reports how many leading positions of tokens the trie holds KV for
// (whole chunks and a partial match of the next one), without changing
// anything. For tests and diagnostics.
func (c *Cache) Match(tokens []int) int {
	cur, n := &c.root, 0
	for pos := 0; pos < len(tokens); pos += BlockSize {
		child, l := cur.best(tokens[pos:min(pos+BlockSize, len(tokens))])
		if child == nil {
			break
		}
		n += l
		if l < BlockSize || len(child.tokens) < BlockSize {
			break
		}
		cur = child
	}
	return n
}

// Stats returns the counters; safe from any goroutine.
func (c *Cache) Stats() Stats {
	t, l, f := c.st.trie.Load(), c.st.leased.Load(), c.st.free.Load()
	bb := int64(c.spec.BlockBytes)
	return Stats{
		BudgetBytes: c.budget, BlockBytes: bb, MaxBlocks: c.maxBlocks,
		TrieBlocks: int(t), LeasedBlocks: int(l), FreeBlocks: int(f),
		BytesInUse: (t + l) * bb, Evictions: c.st.evictions.Load(),
	}
}

func (c *Cache) publish() {
	c.st.trie.Store(int64(c.trie))
	c.st.leased.Store(int64(c.leased))
	c.st.free.Store(int64(len(c.free)))
}

// available is the number of blocks an allocation can get: free, not yet
// allocated, or evictable. Every unpinned trie node is evictable (leaves
// first), because a lease pins its whole path from the root.
func (c *Cache) available() int {
	return len(c.free) + (c.maxBlocks - c.allocated) + (c.trie - c.pinned)
}

// alloc returns a block, evicting the least recently used leaf if needed.
// The caller has checked available().
func (c *Cache) alloc() *model.Block {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b
	}
	if c.allocated < c.maxBlocks {
		c.allocated++
		return c.spec.NewBlock()
	}
	n := heap.Pop(&c.evictable).(*node)
	c.remove(n)
	c.st.evictions.Add(1)
	b := n.block
	n.block = nil
	return b
}

// release puts a block on the free list.
func (c *Cache) release(b *model.Block) { c.free = append(c.free, b) }

// remove unlinks an evictable leaf n (already out of the heap) from its parent.
func (c *Cache) remove(n *node) {
	p := n.parent
	k := n.tokens[0]
	list := p.children[k]
	for i, x := range list {
		if x == n {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.children, k)
	} else {
		p.children[k] = list
	}
	p.nchild--
	n.parent = nil
	c.trie--
	c.fix(p)
}

// insert adds chunk (its KV in b, now owned by the trie) under cur and
// returns the node to continue under (nil when the chunk is partial).
func (c *Cache) insert(cur *node, chunk []int, b *model.Block) *node {
	k := int32(chunk[0])
	for _, x := range cur.children[k] {
		if sameTokens(x.tokens, chunk) {
			// Already cached (computed concurrently by another sequence):
			// identical tokens give identical KV, keep the existing block.
			c.release(b)
			x.lastUse = c.clock
			c.fix(x)
			if len(x.tokens) < BlockSize {
				return nil
			}
			return x
		}
		if len(x.tokens) > len(chunk) && sameTokens(x.tokens[:len(chunk)], chunk) {
			// A longer version is cached (chunk is partial, the last one).
			c.release(b)
			x.lastUse = c.clock
			c.fix(x)
			return nil
		}
		if len(x.tokens) < len(chunk) && x.refs == 0 && x.nchild == 0 && sameTokens(x.tokens, chunk[:len(x.tokens)]) {
			// A shorter version of this chunk: replace its contents.
			c.release(x.block)
			x.block = b
			x.tokens = toInt32(chunk)
			x.lastUse = c.clock
			c.fix(x)
			if len(x.tokens) < BlockSize {
				return nil
			}
			return x
		}
	}
	n := &node{tokens: toInt32(chunk), block: b, parent: cur, lastUse: c.clock, heapIdx: -1}
	if cur.children == nil {
		cur.children = map[int32][]*node{}
	}
	cur.children[k] = append(cur.children[k], n)
	cur.nchild++
	c.trie++
	c.fix(cur)
	c.fix(n)
	if len(chunk) < BlockSize {
		return nil
	}
	return n
}

func (c *Cache) ref(n *node) {
	if n.refs == 0 {
		c.pinned++
	}
	n.refs++
	n.lastUse = c.clock
	c.fix(n)
}

func (c *Cache) unref(n *node) {
	n.refs--
	if n.refs == 0 {
		c.pinned--
	}
	c.fix(n)
}

func (c *Cache) unrefPath(path []*node) {
	for i := len(path) - 1; i >= 0; i-- {
		c.unref(path[i])
	}
}

// fix puts n into or out of the evictable heap (or reorders it).
func (c *Cache) fix(n *node) {
	if n == &c.root {
		return
	}
	ev := n.refs == 0 && n.nchild == 0 && n.parent != nil
	switch {
	case ev && n.heapIdx < 0:
		heap.Push(&c.evictable, n)
	case ev:
		heap.Fix(&c.evictable, n.heapIdx)
	case n.heapIdx >= 0:
		heap.Remove(&c.evictable, n.heapIdx)
	}
}

// best returns the child whose chunk shares the longest prefix with chunk,
// and that length.
func (n *node) best(chunk []int) (*node, int) {
	if len(chunk) == 0 {
		return nil, 0
	}
	var best *node
	bl := 0
	for _, x := range n.children[int32(chunk[0])] {
		l := 0
		for l < len(x.tokens) && l < len(chunk) && int(x.tokens[l]) == chunk[l] {
			l++
		}
		if l > bl || (l == bl && best != nil && len(x.tokens) > len(best.tokens)) {
			best, bl = x, l
		}
	}
	return best, bl
}

func sameTokens(a []int32, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i, v := range a {
		if int(v) != b[i] {
			return false
		}
	}
	return true
}

func toInt32(s []int) []int32 {
	out := make([]int32, len(s))
	for i, v := range s {
		out[i] = int32(v)
	}
	return out
}

// nodeHeap is a min-heap of nodes by lastUse (container/heap).
type nodeHeap []*node

func (h nodeHeap) Len() int           { return len(h) }
func (h nodeHeap) Less(i, j int) bool { return h[i].lastUse < h[j].lastUse }
func (h nodeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *nodeHeap) Push(x any) {
	n := x.(*node)
	n.heapIdx = len(*h)
	*h = append(*h, n)
}
func (h *nodeHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.heapIdx = -1
	return n
}

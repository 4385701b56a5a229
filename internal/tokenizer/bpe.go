// Rank-based BPE merging of one pre-token: start from one symbol per byte,
// repeatedly merge the adjacent pair with the lowest merge rank (the leftmost
// on a tie), with a binary heap of candidate pairs and a linked list of
// symbols, so a word of n bytes costs O(n log n), never a rescan per merge.
// This is the algorithm of Hugging Face's BPE model (ignore_merges=false, no
// dropout, no byte fallback); it does not pre-tokenize or normalize.

package tokenizer

// merge is the result of merging a pair of tokens: its rank (lower merges
// first) and the id of the merged token.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// symbol is one token of a word being merged: a node of a doubly linked list
// over positions in the word.
type symbol struct {
	id         int32
	prev, next int32 // index of the neighbouring symbols, -1 at the ends
	dead       bool  // merged into its left neighbour
}

// candidate is a pair of adjacent symbols that can merge.
type candidate struct {
	rank        int32
	pos         int32 // index of the left symbol
	left, right int32 // the ids it was created for; stale when they changed
	id          int32 // merged token
}

func (c candidate) less(d candidate) bool {
	return c.rank < d.rank || (c.rank == d.rank && c.pos < d.pos)
}

// bpeState holds the scratch buffers of one encoding call.
type bpeState struct {
	syms []symbol
	heap []candidate
}

func (st *bpeState) push(c candidate) {
	h := append(st.heap, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	st.heap = h
}

func (st *bpeState) pop() candidate {
	h := st.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h[l].less(h[m]) {
			m = l
		}
		if r < n && h[r].less(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	st.heap = h
	return top
}

// tryPair queues the merge of the symbols at positions a and b if one exists.
func (t *Tokenizer) tryPair(st *bpeState, a, b int32) {
	l, r := st.syms[a].id, st.syms[b].id
	if m, ok := t.merges[pairKey(l, r)]; ok {
		st.push(candidate{rank: m.rank, pos: a, left: l, right: r, id: m.id})
	}
}

// bpe appends to dst the ids of the byte string word after all merges.
func (t *Tokenizer) bpe(dst []int, st *bpeState, word string) []int {
	if len(word) == 1 {
		return append(dst, int(t.byteToken[word[0]]))
	}
	if id, ok := t.wholeWord[word]; ok {
		return append(dst, int(id))
	}
	syms := st.syms[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, symbol{id: t.byteToken[word[i]], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	st.syms = syms
	st.heap = st.heap[:0]
	for i := int32(0); i+1 < int32(len(syms)); i++ {
		t.tryPair(st, i, i+1)
	}
	for len(st.heap) > 0 {
		c := st.pop()
		s := &st.syms[c.pos]
		if s.dead || s.id != c.left || s.next < 0 {
			continue
		}
		nx := &st.syms[s.next]
		if nx.id != c.right {
			continue
		}
		// Merge the right symbol into the left one.
		s.id = c.id
		nx.dead = true
		s.next = nx.next
		if s.next >= 0 {
			st.syms[s.next].prev = c.pos
			t.tryPair(st, c.pos, s.next)
		}
		if s.prev >= 0 {
			t.tryPair(st, s.prev, c.pos)
		}
	}
	for i := int32(0); i >= 0; i = st.syms[i].next {
		dst = append(dst, int(st.syms[i].id))
	}
	return dst
}

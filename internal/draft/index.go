// The n-gram index that lookup, hybrid and their tests share: a request's own
// tokens (context, then the tokens drafted so far) with a hash chain of
// earlier positions by their last four tokens, built in O(len), grown and
// shrunk one token at a time in O(1); matches shorter than four tokens are
// found by a bounded backward scan. It answers "the longest
// suffix of the text that occurred earlier, and what followed it". It holds
// nothing across requests and is not safe for concurrent use.
package draft

// Search limits: they bound the work of one query on any text (a context of
// one repeated token included) and make no difference on real text, where the
// first candidates of the 4-gram chain already hold the longest match.
const (
	// MaxMatch caps the length a match is measured to (longer ties). On
	// the real-text sets of docs/strategies.md, caps from 16 up give the same τ.
	MaxMatch = 32
	gram     = 4    // tokens of the long chain's key
	maxLong  = 64   // candidates visited on the 4-gram chain
	maxShort = 256  // candidates of the backward scan for shorter matches
	window   = 8192 // positions the backward scan reads at most
)

// Choice picks among earlier occurrences of the longest matching suffix.
type Choice int

const (
	// Recent proposes what followed the most recent occurrence.
	Recent Choice = iota
	// Frequent proposes the continuation that followed most of the
	// occurrences (ties: the most recent one's).
	Frequent
)

func (c Choice) String() string {
	if c == Frequent {
		return "frequent"
	}
	return "recent"
}

// Index is a growing token text with its hash chains. Positions are stored
// +1 so that zero means "none".
type Index struct {
	text   []int32 // (m) the tokens
	mask   uint32  // buckets − 1
	head4  []int32 // (buckets) last position +1 whose 4-gram hashes here
	prev4  []int32 // (m) previous position +1 in the same bucket
	choice Choice

	cand []int32 // scratch: candidates with the best length (Frequent)
}

// NewIndex indexes ctx (copied) with room for extra more tokens before the
// tables would degrade.
func NewIndex(ctx []int, extra int, choice Choice) *Index {
	x := new(Index)
	x.reset(ctx, extra, choice)
	return x
}

// reset makes x the index of ctx, reusing its memory where it is large
// enough.
func (x *Index) reset(ctx []int, extra int, choice Choice) {
	size := uint32(64) // about one bucket per token: the tables stay in L2
	for int(size) < len(ctx)+extra && size < 1<<30 {
		size <<= 1
	}
	n := len(ctx) + extra
	if cap(x.text) < n {
		x.text, x.prev4 = make([]int32, 0, n), make([]int32, 0, n)
	}
	if cap(x.head4) < int(size) {
		x.head4 = make([]int32, size)
	} else {
		x.head4 = x.head4[:size]
		clear(x.head4)
	}
	x.mask, x.choice = size-1, choice
	// Append, unrolled for the context.
	x.text, x.prev4 = x.text[:len(ctx)], x.prev4[:len(ctx)]
	for p, tok := range ctx {
		x.text[p] = int32(tok)
	}
	for p := gram - 1; p < len(ctx); p++ {
		b := x.hash4(p) & x.mask
		x.prev4[p], x.head4[b] = x.head4[b], int32(p+1)
	}
}

// Len is the number of tokens in the text.
func (x *Index) Len() int { return len(x.text) }

// Text returns a copy of the indexed text.
func (x *Index) Text() []int {
	out := make([]int, len(x.text))
	for i, t := range x.text {
		out[i] = int(t)
	}
	return out
}

func (x *Index) hash4(p int) uint32 { // key of the 4-gram ending at p (p ≥ 3)
	g := x.text[p-3 : p+1 : p+1]
	h := uint64(uint32(g[0]))<<32 | uint64(uint32(g[1]))
	h ^= (uint64(uint32(g[2]))<<32 | uint64(uint32(g[3]))) * 0xC2B2AE3D27D4EB4F
	return uint32((h * 0x9E3779B97F4A7C15) >> 32)
}

// Append adds one token at the end.
func (x *Index) Append(tok int) {
	p := len(x.text)
	x.text = append(x.text, int32(tok))
	var prev int32
	if p >= gram-1 {
		b := x.hash4(p) & x.mask
		prev = x.head4[b]
		x.head4[b] = int32(p + 1)
	}
	x.prev4 = append(x.prev4, prev)
}

// Truncate removes the tokens after the first m (m ≤ Len), undoing Appends.
func (x *Index) Truncate(m int) {
	for p := len(x.text) - 1; p >= m; p-- {
		if p >= gram-1 {
			x.head4[x.hash4(p)&x.mask] = x.prev4[p]
		}
	}
	x.text, x.prev4 = x.text[:m], x.prev4[:m]
}

// Match is the answer of Query: the text's longest suffix (Length tokens,
// capped at MaxMatch) occurred earlier ending at position At, followed there
// by Next.
type Match struct {
	Next, Length, At int
}

// Query finds the longest suffix of the text that also ends at an earlier
// position, and the token that followed it (see Choice). ok is false when
// nothing matches: the last four tokens never occurred before and the last
// token not within the previous window positions.
func (x *Index) Query() (m Match, ok bool) {
	end := len(x.text) - 1
	if end < 1 {
		return Match{}, false
	}
	if end >= gram-1 {
		if m, ok = x.search(true); ok {
			return m, true
		}
	}
	return x.search(false)
}

// search visits candidate end positions, most recent first — those on the
// 4-gram chain (long), or those of the backward scan that end with the
// last token — and keeps the longest matches (at least four tokens long on
// the chain: the others are hash collisions).
func (x *Index) search(long bool) (Match, bool) {
	t := x.text
	end := len(t) - 1
	best, at := 0, -1
	x.cand = x.cand[:0]
	min, limit := 1, maxShort
	if long {
		min, limit = gram, maxLong
	}
	lo := max(0, end-window)
	i := end
	for v := 0; v < limit; v++ {
		if long { // next on the chain
			c := x.prev4[i]
			if c == 0 {
				break
			}
			i = int(c - 1)
		} else { // next earlier occurrence of the last token
			i--
			for i >= lo && t[i] != t[end] {
				i--
			}
			if i < lo {
				break
			}
		}
		l := 0
		for l < MaxMatch && l <= i && t[i-l] == t[end-l] {
			l++
		}
		if l < min || l < best {
			continue
		}
		if l > best {
			best, at = l, i
			x.cand = x.cand[:0]
		}
		if x.choice == Frequent {
			x.cand = append(x.cand, int32(i))
		} else if l == MaxMatch {
			break // nothing older can be longer, and ties go to the recent
		}
	}
	if at < 0 {
		return Match{}, false
	}
	if x.choice == Frequent && len(x.cand) > 1 {
		at = x.frequent()
	}
	return Match{Next: int(t[at+1]), Length: best, At: at}, true
}

// frequent returns the candidate whose continuation is the most common among
// x.cand (most recent first; ties go to the earlier entry, the more recent).
func (x *Index) frequent() int {
	t := x.text
	bestAt, bestN := int(x.cand[0]), 0
	for j, c := range x.cand {
		next := t[c+1]
		seen := false
		for _, d := range x.cand[:j] {
			if t[d+1] == next {
				seen = true
				break
			}
		}
		if seen {
			continue
		}
		n := 0
		for _, d := range x.cand[j:] {
			if t[d+1] == next {
				n++
			}
		}
		if n > bestN {
			bestAt, bestN = int(c), n
		}
	}
	return bestAt
}

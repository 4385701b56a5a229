// The model-free strategies: lookup (longest earlier match, re-looked-up
// after every proposed token) and pld, the published prompt-lookup baseline.
// Neither runs the model nor reads anything but the request's tokens.
package draft

import "sync"

// indexPool keeps the memory of Lookup's indexes between requests (the
// tables only: reset clears them, nothing of one request reaches another).
var indexPool = sync.Pool{New: func() any { return new(Index) }}

// Lookup drafts the continuation of the longest suffix of the context that
// occurred earlier in it: after each proposed token the suffix (now ending
// in that token) is looked up again, so the proposal follows its match as
// long as the match holds and moves to a longer one when one appears. The
// draft ends early only when nothing matches (see Index.Query).
type Lookup struct{ Choice Choice }

func (Lookup) Name() string { return NameLookup }

// Draft implements ModelFree.
func (l Lookup) Draft(ctx []int, n int) []int {
	x := indexPool.Get().(*Index)
	defer indexPool.Put(x)
	x.reset(ctx, n, l.Choice)
	out := make([]int, 0, n)
	for len(out) < n {
		m, ok := x.Query()
		if !ok {
			break
		}
		out = append(out, m.Next)
		x.Append(m.Next)
	}
	return out
}

// PLD is prompt-lookup decoding as published (Saxena 2023, and Hugging Face
// transformers' prompt_lookup_num_tokens): for an n-gram size of 3, then 2,
// then 1, take the context's last n-gram, scan the context from the start
// for its first occurrence that leaves n tokens after it (and is not the
// suffix itself) and propose those n tokens; nothing when no size matches.
type PLD struct{}

func (PLD) Name() string { return NamePLD }

// Draft implements ModelFree.
func (PLD) Draft(ctx []int, n int) []int {
	m := len(ctx)
	for g := 3; g >= 1; g-- {
		if m < g {
			continue
		}
		suffix := ctx[m-g:]
	scan:
		for i := 0; i+g <= m; i++ {
			for j, t := range suffix {
				if ctx[i+j] != t {
					continue scan
				}
			}
			start, end := i+g, i+g+n
			if end <= m && start < m-g {
				return append([]int(nil), ctx[start:end]...)
			}
		}
	}
	return nil
}

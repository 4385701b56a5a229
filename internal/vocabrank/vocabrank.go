// Package vocabrank is the token ranking a trimmed draft LM head (serve
// --draft-vocab N, FR-Spec) keeps the top of: the JSON file `draftd vocab`
// writes from text on the machine and `GET /v1/vocab` answers from the
// traffic a server saw, and the one rule that orders it (special tokens
// apart, always kept; every other id by its counts, ties by ascending id).
// It does not count tokens, read files or choose N.
package vocabrank

import (
	"fmt"
	"slices"

	"github.com/draftd/draftd/internal/tokenizer"
)

// File is the ranking's JSON.
type File struct {
	Corpus    []Corpus `json:"corpus"` // what was counted (`draftd vocab`; empty for traffic)
	Traffic   *Traffic `json:"traffic,omitempty"`
	Tokens    int64    `json:"tokens"`     // tokens counted
	VocabSize int      `json:"vocab_size"` // the tokenizer's vocabulary
	Special   []int    `json:"special"`    // control, user-defined and unknown tokens: always kept
	Ranked    []int    `json:"ranked"`     // every other id, most frequent first (ties, including the unseen: lower id first)
	Counts    []int64  `json:"counts"`     // (len(ranked)) occurrences of each (traffic: in the target's output)
	// ContextCounts (traffic only, len(ranked)): occurrences of each in the
	// contexts clients sent, the tie-break of Counts.
	ContextCounts []int64 `json:"context_counts,omitempty"`
	// CorpusCounts (`draftd vocab --traffic` only, len(ranked)): occurrences
	// of each in the corpora, the tie-break of ContextCounts.
	CorpusCounts []int64 `json:"corpus_counts,omitempty"`
}

// Corpus is one corpus of `draftd vocab`.
type Corpus struct {
	Source string `json:"source"`
	Root   string `json:"root"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
}

// Traffic says what a server counted (GET /v1/vocab).
type Traffic struct {
	Model          string `json:"model"`           // what was served
	Since          string `json:"since"`           // RFC 3339: when counting started (the model loaded)
	Requests       int64  `json:"requests"`        // draft requests (and batch items) counted
	ContextTokens  int64  `json:"context_tokens"`  // tokens of contexts sent: plain requests' and the tokens that establish a session
	AcceptedTokens int64  `json:"accepted_tokens"` // accepted draft tokens + bonus tokens sessions reported: the target's output
}

// Class is what the ranking does with an id.
type Class uint8

const (
	Normal  Class = iota // ranked
	Special              // always kept, listed apart
	Unused               // neither (padding ids without a token)
)

// Classes are the classes of tok's ids: control, user-defined and unknown
// tokens are special, unused (padding) ids are left out.
func Classes(tok *tokenizer.Tokenizer) ([]Class, error) {
	cl := make([]Class, tok.VocabSize())
	for id := range cl {
		_, ty, err := tok.Token(id)
		if err != nil {
			return nil, err
		}
		switch ty {
		case tokenizer.TokenControl, tokenizer.TokenUserDefined, tokenizer.TokenUnknown:
			cl[id] = Special
		case tokenizer.TokenUnused:
			cl[id] = Unused
		}
	}
	return cl, nil
}

// Build ranks the ids of classes (VocabSize = len(classes)): the special
// ones apart, every normal one by counts[0] descending, ties by counts[1]
// descending, then counts[2] (when given), then by ascending id. Each counts
// slice is as long as classes. Counts holds counts[0] of each ranked id,
// ContextCounts counts[1], CorpusCounts counts[2].
func Build(classes []Class, counts ...[]int64) (File, error) {
	if len(counts) < 1 || len(counts) > 3 {
		return File{}, fmt.Errorf("vocabrank: %d count arrays; want 1 to 3", len(counts))
	}
	for _, c := range counts {
		if len(c) != len(classes) {
			return File{}, fmt.Errorf("vocabrank: %d counts for a vocabulary of %d", len(c), len(classes))
		}
	}
	f := File{VocabSize: len(classes), Special: []int{}, Ranked: []int{}, Corpus: []Corpus{}}
	for id, c := range classes {
		switch c {
		case Special:
			f.Special = append(f.Special, id)
		case Normal:
			f.Ranked = append(f.Ranked, id)
		}
	}
	slices.SortStableFunc(f.Ranked, func(a, b int) int {
		for _, c := range counts {
			switch {
			case c[a] > c[b]:
				return -1
			case c[a] < c[b]:
				return 1
			}
		}
		return 0
	})
	f.Counts = make([]int64, len(f.Ranked))
	for i, id := range f.Ranked {
		f.Counts[i] = counts[0][id]
	}
	pick := func(c []int64) []int64 {
		out := make([]int64, len(f.Ranked))
		for i, id := range f.Ranked {
			out[i] = c[id]
		}
		return out
	}
	if len(counts) >= 2 {
		f.ContextCounts = pick(counts[1])
	}
	if len(counts) == 3 {
		f.CorpusCounts = pick(counts[2])
	}
	return f, nil
}

// TrafficCounts are the accepted and context counts by id of a ranking
// from traffic (GET /v1/vocab), checked: vocab ids, each ranked id once,
// every count array as long as the ranking.
func (f *File) TrafficCounts(name string, vocab int) (accepted, context []int64, err error) {
	switch {
	case f.Traffic == nil:
		return nil, nil, fmt.Errorf("%s: no \"traffic\": not a ranking from GET /v1/vocab", name)
	case f.VocabSize != vocab:
		return nil, nil, fmt.Errorf("%s: ranks a vocabulary of %d tokens; the tokenizer has %d", name, f.VocabSize, vocab)
	case len(f.Counts) != len(f.Ranked) || len(f.ContextCounts) != len(f.Ranked):
		return nil, nil, fmt.Errorf("%s: %d ranked ids with %d counts and %d context counts; want as many of each", name, len(f.Ranked), len(f.Counts), len(f.ContextCounts))
	}
	accepted, context = make([]int64, vocab), make([]int64, vocab)
	seen := make([]bool, vocab)
	for i, id := range f.Ranked {
		if id < 0 || id >= vocab || seen[id] {
			return nil, nil, fmt.Errorf("%s: id %d is out of range or listed twice", name, id)
		}
		if f.Counts[i] < 0 || f.ContextCounts[i] < 0 {
			return nil, nil, fmt.Errorf("%s: id %d has a negative count", name, id)
		}
		seen[id] = true
		accepted[id], context[id] = f.Counts[i], f.ContextCounts[i]
	}
	return accepted, context, nil
}

// Keep is the ids a draft head of n rows keeps for a model of vocab rows:
// every special token, then the most frequent ids until n. name names the
// file in errors.
func (f *File) Keep(name string, n, vocab int) ([]int, error) {
	if f.VocabSize < 1 || f.VocabSize > vocab {
		return nil, fmt.Errorf("%s: ranks a vocabulary of %d tokens; the model has %d rows", name, f.VocabSize, vocab)
	}
	if len(f.Special) > n {
		return nil, fmt.Errorf("--draft-vocab %d is fewer than the %d special tokens of %s", n, len(f.Special), name)
	}
	if len(f.Special)+len(f.Ranked) < n {
		return nil, fmt.Errorf("--draft-vocab %d: %s ranks only %d ids (+ %d special)", n, name, len(f.Ranked), len(f.Special))
	}
	keep := append(slices.Clone(f.Special), f.Ranked[:n-len(f.Special)]...)
	seen := map[int]bool{}
	for _, id := range keep {
		if id < 0 || id >= f.VocabSize || seen[id] {
			return nil, fmt.Errorf("%s: id %d is out of range or listed twice", name, id)
		}
		seen[id] = true
	}
	return keep, nil
}

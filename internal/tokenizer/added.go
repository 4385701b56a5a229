// Added tokens (tokenizer.json "added_tokens"; GGUF CONTROL and USER_DEFINED
// tokens) found verbatim in text before any normalization or BPE, as Hugging
// Face's AddedVocabulary does: leftmost match first, the longest token on a
// tie, lstrip/rstrip absorbing neighbouring white space. It does not
// implement "single_word" (loading refuses such tokens).

package tokenizer

import (
	"sort"
	"unicode"
	"unicode/utf8"
)

// addedToken is one token matched in text.
type addedToken struct {
	id       int
	content  string
	special  bool // not matched when special tokens are split (EncodePlain)
	lstrip   bool
	rstrip   bool
	normText bool // "normalized": matched in NFC-normalized text, not raw text
}

// addedMatcher finds added tokens in text.
type addedMatcher struct {
	byFirst [256][]*addedToken // tokens by first byte, longest first
}

func newAddedMatcher(toks []*addedToken) *addedMatcher {
	m := &addedMatcher{}
	for _, t := range toks {
		if t.content == "" {
			continue
		}
		b := t.content[0]
		m.byFirst[b] = append(m.byFirst[b], t)
	}
	for b := range m.byFirst {
		l := m.byFirst[b]
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].content) > len(l[j].content) })
	}
	return m
}

// match is one added token found in text: text[start:end] is consumed by it
// (including white space absorbed by lstrip/rstrip).
type match struct {
	start, end int
	tok        *addedToken
}

// find appends to dst the non-overlapping matches in s, scanning left to
// right. Tokens for which skip returns true are ignored.
func (m *addedMatcher) find(dst []match, s string, skip func(*addedToken) bool) []match {
	if m == nil {
		return dst
	}
	prevEnd := 0
	for i := 0; i < len(s); i++ {
		cands := m.byFirst[s[i]]
		if len(cands) == 0 {
			continue
		}
		var hit *addedToken
		for _, t := range cands {
			if len(s)-i >= len(t.content) && s[i:i+len(t.content)] == t.content && !skip(t) {
				hit = t
				break
			}
		}
		if hit == nil {
			continue
		}
		start, end := i, i+len(hit.content)
		if hit.lstrip {
			for start > prevEnd {
				r, n := utf8.DecodeLastRuneInString(s[prevEnd:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if hit.rstrip {
			for end < len(s) {
				r, n := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += n
			}
		}
		dst = append(dst, match{start, end, hit})
		prevEnd = end
		i = end - 1
	}
	return dst
}

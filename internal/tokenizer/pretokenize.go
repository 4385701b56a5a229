// The Qwen2 pre-tokenizer: a hand-written scanner that splits text exactly as
// the regular expression of Qwen2/Qwen3's tokenizer.json does under the
// backtracking, leftmost-first semantics of the regex engines Hugging Face
// uses (Oniguruma, fancy-regex):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Go's regexp has no look-ahead, and the pattern only needs one character of
// it, so a scanner is both exact and faster. It is not a general regex engine:
// any other pattern is rejected when a tokenizer is loaded.
//
// Character classes: \p{L} and \p{N} are Unicode general categories L and N,
// \s is the Unicode White_Space property (as in Oniguruma and Rust's regex,
// so U+0085 is a space and U+FEFF is not), and (?i) folds with simple Unicode
// case folding (so 'ſ' (U+017F) matches 's'). A byte that is not valid UTF-8
// is one character of none of these classes.

package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// qwen2Pattern is the Split pattern of the Qwen2/Qwen3 tokenizer.json.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Character classes of the pattern; a rune has at most one of
// letter/number/space, and crlf implies space.
const (
	clsLetter = 1 << iota
	clsNumber
	clsSpace
	clsCRLF // '\r' or '\n'
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for c := 0; c < utf8.RuneSelf; c++ {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			asciiClass[c] = clsLetter
		case unicode.IsNumber(r):
			asciiClass[c] = clsNumber
		case unicode.IsSpace(r):
			asciiClass[c] = clsSpace
		}
	}
	asciiClass['\r'] |= clsCRLF
	asciiClass['\n'] |= clsCRLF
}

// class returns the character class of r. unicode.IsSpace is exactly the
// White_Space property (it includes U+0085 and U+00A0).
func class(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return 0
}

// at decodes the character at s[i:]: its rune, its size in bytes and its
// class. An invalid byte is a character of size 1 and class 0. i < len(s).
func at(s string, i int) (r rune, size int, cls uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size == 1 {
		return r, 1, 0
	}
	return r, size, class(r)
}

// foldEq reports whether r equals the ASCII lower-case letter want under
// simple case folding.
func foldEq(r rune, want byte) bool {
	if r == rune(want) || r == rune(want-'a'+'A') {
		return true
	}
	return want == 's' && r == 'ſ' // U+017F LATIN SMALL LETTER LONG S folds to 's'
}

// contraction returns the length of a match of (?i:'s|'t|'re|'ve|'m|'ll|'d)
// at s[i:], where s[i] is an apostrophe, or 0.
func contraction(s string, i int) int {
	j := i + 1
	if j >= len(s) {
		return 0
	}
	r1, n1, _ := at(s, j)
	switch {
	case foldEq(r1, 's'), foldEq(r1, 't'), foldEq(r1, 'm'), foldEq(r1, 'd'):
		return 1 + n1
	}
	if j+n1 >= len(s) {
		return 0
	}
	r2, n2, _ := at(s, j+n1)
	switch {
	case foldEq(r1, 'r') && foldEq(r2, 'e'),
		foldEq(r1, 'v') && foldEq(r2, 'e'),
		foldEq(r1, 'l') && foldEq(r2, 'l'):
		return 1 + n1 + n2
	}
	return 0
}

// scanWhile returns the end of the run of characters from s[i:] whose class
// has any of the bits in mask.
func scanWhile(s string, i int, mask uint8) int {
	for i < len(s) {
		_, n, c := at(s, i)
		if c&mask == 0 {
			break
		}
		i += n
	}
	return i
}

// nextPiece returns the end of the pre-token that starts at s[i:], i < len(s).
// The alternatives are tried in the order of the pattern; every character is
// matched by one of them, so consecutive pieces cover s.
func nextPiece(s string, i int) int {
	r, n, c := at(s, i)

	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if m := contraction(s, i); m > 0 {
			return i + m
		}
	}

	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if c&clsLetter != 0 {
		return scanWhile(s, i+n, clsLetter)
	}
	if c&(clsCRLF|clsNumber) == 0 && i+n < len(s) {
		if _, n2, c2 := at(s, i+n); c2&clsLetter != 0 {
			return scanWhile(s, i+n+n2, clsLetter)
		}
	}

	// 3. \p{N}
	if c&clsNumber != 0 {
		return i + n
	}

	// 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	const word = clsLetter | clsNumber | clsSpace
	j := -1
	switch {
	case c == 0:
		j = i + n
	case r == ' ' && i+n < len(s):
		if _, n2, c2 := at(s, i+n); c2 == 0 {
			j = i + n + n2
		}
	}
	if j >= 0 {
		for j < len(s) {
			_, n3, c3 := at(s, j)
			if c3&word != 0 {
				break
			}
			j += n3
		}
		return scanWhile(s, j, clsCRLF)
	}

	// Only white space is left: c has clsSpace.
	// 5. \s*[\r\n]+ : the longest prefix of the white-space run that ends in
	// '\r' or '\n' (the greedy \s* gives back characters up to the last one).
	end, lastCRLF, last, count := i, -1, i, 0
	for end < len(s) {
		_, m, cm := at(s, end)
		if cm&clsSpace == 0 {
			break
		}
		if cm&clsCRLF != 0 {
			lastCRLF = end + m
		}
		last = end
		end += m
		count++
	}
	if lastCRLF >= 0 {
		return lastCRLF
	}
	// 6. \s+(?!\S) : the whole run at the end of the text, else the run
	// without its last character, which then starts the next piece.
	if end == len(s) || count == 1 {
		return end // 7. \s+ when 6 cannot match a single space before a non-space
	}
	return last
}

// forEachPiece calls f with the bounds of each pre-token of s in order.
func forEachPiece(s string, f func(start, end int)) {
	for i := 0; i < len(s); {
		j := nextPiece(s, i)
		f(i, j)
		i = j
	}
}

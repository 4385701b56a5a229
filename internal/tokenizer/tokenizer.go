// Package tokenizer is the byte-level BPE tokenizer of the Qwen2/Qwen3 model
// family (text ⇄ token ids), loaded from a Hugging Face tokenizer.json or
// from the metadata of a GGUF file, and the model's chat template.
//
// Encoding follows Hugging Face tokenizers exactly: added tokens are found in
// the raw text first, the rest is NFC-normalized, split by the Qwen2
// pre-tokenizer (pretokenize.go) and merged by rank (bpe.go). Encode is
// HF's encode(text, add_special_tokens=False): nothing is prepended or
// appended. It is not a general tokenizers implementation: other
// pre-tokenizers, normalizers or models are rejected with a specific error.
//
// A Tokenizer is immutable after loading and safe for concurrent use.
package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// TokenType is the kind of a token, with the values GGUF uses
// (tokenizer.ggml.token_type).
type TokenType int32

const (
	TokenNormal      TokenType = 1 // a BPE token
	TokenUnknown     TokenType = 2
	TokenControl     TokenType = 3 // a special added token such as <|im_start|>
	TokenUserDefined TokenType = 4 // a non-special added token such as <think>
	TokenUnused      TokenType = 5 // an id without a token (padding up to the model's vocab)
	TokenByte        TokenType = 6
)

// Errors returned by this package.
var (
	ErrUnsupported    = errors.New("tokenizer: unsupported")
	ErrBadTokenizer   = errors.New("tokenizer: malformed")
	ErrTokenID        = errors.New("tokenizer: token id out of range")
	ErrNoChatTemplate = errors.New("tokenizer: no chat template")
)

// Tokenizer is a loaded byte-level BPE tokenizer.
type Tokenizer struct {
	pieces []string    // (vocab) token text as stored: byte-level alphabet, or plain text for added tokens
	types  []TokenType // (vocab)
	raw    []string    // (vocab) the bytes each token decodes to

	byteToken [256]int32       // byte → id of its one-byte token
	merges    map[uint64]merge // pairKey(left, right) → rank and merged id
	mergeList [][2]string      // (merges) merge pairs in rank order, byte-level text
	wholeWord map[string]int32 // raw bytes of a token whose BPE is that one token → id

	added      []*addedToken
	rawAdded   *addedMatcher // added tokens matched before normalization
	normAdded  *addedMatcher // added tokens with normalized=true, matched after it
	nfc        bool
	pre        string // pre-tokenizer name as in GGUF tokenizer.ggml.pre ("qwen2")
	bos, eos   int    // -1 when absent
	pad        int
	addBOS     *bool    // tokenizer_config add_bos_token, when given
	specials   []string // "bos", "eos", "pad": the order in which the source named them
	template   string
	tmplOnce   sync.Once
	tmpl       *ChatTemplate
	tmplErr    error
	stateCache sync.Pool // *bpeState
}

// VocabSize is the number of token ids: ids are 0..VocabSize()-1. From a
// tokenizer.json this is the BPE vocabulary plus added tokens (151669 for
// Qwen3); from a GGUF file it is the model's vocabulary, which llama.cpp
// pads with unused tokens (151936 for Qwen3).
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// BOS, EOS and PAD return the ids of the beginning-of-sequence,
// end-of-sequence and padding tokens, or -1 when the tokenizer has none.
func (t *Tokenizer) BOS() int { return t.bos }
func (t *Tokenizer) EOS() int { return t.eos }
func (t *Tokenizer) PAD() int { return t.pad }

// AddBOS reports whether the model expects BOS before a prompt
// (tokenizer_config add_bos_token / GGUF tokenizer.ggml.add_bos_token; false
// for Qwen). Encode never adds it.
func (t *Tokenizer) AddBOS() bool { return t.addBOS != nil && *t.addBOS }

// Pre returns the pre-tokenizer name as llama.cpp calls it ("qwen2").
func (t *Tokenizer) Pre() string { return t.pre }

// ChatTemplate returns the Jinja chat template, "" when there is none.
func (t *Tokenizer) ChatTemplate() string { return t.template }

// Token returns the stored text of token id (byte-level alphabet for BPE
// tokens, e.g. "Ġthe"; plain text for added tokens) and its type.
func (t *Tokenizer) Token(id int) (string, TokenType, error) {
	if id < 0 || id >= len(t.pieces) {
		return "", 0, fmt.Errorf("%w: %d not in [0,%d)", ErrTokenID, id, len(t.pieces))
	}
	return t.pieces[id], t.types[id], nil
}

// Encode returns the token ids of text. Added tokens written in the text,
// special ones such as "<|im_start|>" included, become their ids.
func (t *Tokenizer) Encode(text string) []int { return t.encode(text, false) }

// EncodePlain is Encode with special tokens not recognised: "<|im_start|>"
// in text is encoded as ordinary characters (HF split_special_tokens=True).
// Non-special added tokens such as "<think>" are still recognised, as in HF
// and llama.cpp (parse_special=false).
func (t *Tokenizer) EncodePlain(text string) []int { return t.encode(text, true) }

func skipNone(*addedToken) bool      { return false }
func skipSpecial(a *addedToken) bool { return a.special }

func (t *Tokenizer) encode(text string, plain bool) []int {
	st, _ := t.stateCache.Get().(*bpeState)
	if st == nil {
		st = &bpeState{}
	}
	defer func() {
		if cap(st.syms) <= 1<<16 { // do not keep the buffers of a huge word
			t.stateCache.Put(st)
		}
	}()
	skip := skipNone
	if plain {
		skip = skipSpecial
	}
	ids := make([]int, 0, len(text)/3+1)
	var ms [8]match
	matches := t.rawAdded.find(ms[:0], text, skip)
	prev := 0
	for _, m := range matches {
		ids = t.encodeNormalized(ids, st, text[prev:m.start], skip)
		ids = append(ids, m.tok.id)
		prev = m.end
	}
	return t.encodeNormalized(ids, st, text[prev:], skip)
}

// encodeNormalized normalizes a piece of text between raw added tokens,
// finds the normalized added tokens in it and encodes the rest.
func (t *Tokenizer) encodeNormalized(ids []int, st *bpeState, s string, skip func(*addedToken) bool) []int {
	if s == "" {
		return ids
	}
	if t.nfc && norm.NFC.QuickSpanString(s) != len(s) {
		s = norm.NFC.String(s)
	}
	if t.normAdded == nil {
		return t.encodeWords(ids, st, s)
	}
	var ms [8]match
	prev := 0
	for _, m := range t.normAdded.find(ms[:0], s, skip) {
		ids = t.encodeWords(ids, st, s[prev:m.start])
		ids = append(ids, m.tok.id)
		prev = m.end
	}
	return t.encodeWords(ids, st, s[prev:])
}

// encodeWords pre-tokenizes normalized text and merges each piece.
func (t *Tokenizer) encodeWords(ids []int, st *bpeState, s string) []int {
	for i := 0; i < len(s); {
		j := nextPiece(s, i)
		ids = t.bpe(ids, st, s[i:j])
		i = j
	}
	return ids
}

// DecodeBytes returns the bytes that ids stand for, concatenated. Unused ids
// (padding) contribute nothing; ids outside [0, VocabSize()) are an error.
func (t *Tokenizer) DecodeBytes(ids []int) ([]byte, error) {
	n := 0
	for _, id := range ids {
		if id < 0 || id >= len(t.raw) {
			return nil, fmt.Errorf("%w: %d not in [0,%d)", ErrTokenID, id, len(t.raw))
		}
		n += len(t.raw[id])
	}
	b := make([]byte, 0, n)
	for _, id := range ids {
		b = append(b, t.raw[id]...)
	}
	return b, nil
}

// Decode returns the text of ids. Byte sequences that are not valid UTF-8
// (a character cut between tokens) become U+FFFD, one per maximal ill-formed
// subpart, as Rust's String::from_utf8_lossy does in Hugging Face tokenizers.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	b, err := t.DecodeBytes(ids)
	if err != nil {
		return "", err
	}
	return lossyUTF8(b), nil
}

// TokenID returns the id of the token whose stored text is piece.
func (t *Tokenizer) TokenID(piece string) (int, bool) {
	for _, a := range t.added {
		if a.content == piece {
			return a.id, true
		}
	}
	if b, ok := byteLevelDecode(piece); ok {
		if len(b) == 1 {
			return int(t.byteToken[b[0]]), true
		}
		if id, ok := t.wholeWord[string(b)]; ok && t.pieces[id] == piece {
			return int(id), true
		}
	}
	for id, p := range t.pieces { // tokens that BPE never produces whole
		if p == piece {
			return id, true
		}
	}
	return 0, false
}

// lossyUTF8 converts b to a string, replacing each maximal subpart of an
// ill-formed sequence (Unicode §3.9, "U+FFFD substitution of maximal
// subparts") with U+FFFD, the policy of Rust, WHATWG and Python.
func lossyUTF8(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b))
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 {
			sb.WriteByte(c)
			i++
			continue
		}
		n, lo, hi := 0, byte(0x80), byte(0xBF) // continuation bytes needed; range of the first one
		switch {
		case 0xC2 <= c && c <= 0xDF:
			n = 1
		case c == 0xE0:
			n, lo = 2, 0xA0
		case 0xE1 <= c && c <= 0xEC, c == 0xEE, c == 0xEF:
			n = 2
		case c == 0xED:
			n, hi = 2, 0x9F
		case c == 0xF0:
			n, lo = 3, 0x90
		case 0xF1 <= c && c <= 0xF3:
			n = 3
		case c == 0xF4:
			n, hi = 3, 0x8F
		}
		j := i + 1
		for k := 0; k < n && j < len(b); k++ {
			if b[j] < lo || b[j] > hi {
				break
			}
			lo, hi = 0x80, 0xBF
			j++
		}
		if n > 0 && j == i+1+n {
			sb.Write(b[i:j])
		} else {
			sb.WriteString("\uFFFD")
		}
		i = j
	}
	return sb.String()
}

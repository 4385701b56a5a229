// Construction of a Tokenizer from its parts, shared by the tokenizer.json
// and GGUF loaders: it checks the vocabulary and merges and builds the lookup
// tables. It reads no files.

package tokenizer

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// parts is what a loader extracts from its source.
type parts struct {
	pieces   []string    // (vocab) stored token text; "" for unused ids
	types    []TokenType // (vocab)
	merges   [][2]string // (merges) in rank order, stored (byte-level) text
	added    []*addedToken
	nfc      bool
	pre      string
	bos      int
	eos      int
	pad      int
	addBOS   *bool
	template string
	specials []string // "bos", "eos", "pad" in the order the source names them
}

func build(p parts) (*Tokenizer, error) {
	n := len(p.pieces)
	if n == 0 || len(p.types) != n {
		return nil, fmt.Errorf("%w: %d tokens, %d token types", ErrBadTokenizer, n, len(p.types))
	}
	if p.pre != "qwen2" {
		return nil, fmt.Errorf("%w: pre-tokenizer %q (only qwen2 is implemented)", ErrUnsupported, p.pre)
	}
	t := &Tokenizer{
		pieces:    p.pieces,
		types:     p.types,
		raw:       make([]string, n),
		merges:    make(map[uint64]merge, len(p.merges)),
		mergeList: p.merges,
		added:     p.added,
		nfc:       p.nfc,
		pre:       p.pre,
		bos:       p.bos,
		eos:       p.eos,
		pad:       p.pad,
		addBOS:    p.addBOS,
		specials:  p.specials,
		template:  p.template,
	}
	for _, id := range []int{t.bos, t.eos, t.pad} {
		if id < -1 || id >= n {
			return nil, fmt.Errorf("%w: special token id %d not in [0,%d)", ErrBadTokenizer, id, n)
		}
	}

	// Raw bytes of every token; byte-level text maps back to bytes.
	isAdded := make([]bool, n)
	for _, a := range p.added {
		if a.id < 0 || a.id >= n {
			return nil, fmt.Errorf("%w: added token %q has id %d not in [0,%d)", ErrBadTokenizer, a.content, a.id, n)
		}
		isAdded[a.id] = true
		t.raw[a.id] = a.content
	}
	byID := make(map[string]int32, n) // stored text of BPE tokens → id
	for i := range t.byteToken {
		t.byteToken[i] = -1
	}
	for id, piece := range p.pieces {
		if isAdded[id] || p.types[id] == TokenUnused {
			continue
		}
		b, ok := byteLevelDecode(piece)
		if !ok || len(b) == 0 {
			return nil, fmt.Errorf("%w: token %d %q is not in the byte-level alphabet", ErrBadTokenizer, id, piece)
		}
		t.raw[id] = string(b)
		if _, dup := byID[piece]; !dup {
			byID[piece] = int32(id)
		}
		if len(b) == 1 && t.byteToken[b[0]] < 0 {
			t.byteToken[b[0]] = int32(id)
		}
	}
	for b, id := range t.byteToken {
		if id < 0 {
			return nil, fmt.Errorf("%w: no token for byte 0x%02x", ErrBadTokenizer, b)
		}
	}

	for rank, m := range p.merges {
		l, okl := byID[m[0]]
		r, okr := byID[m[1]]
		id, okm := byID[m[0]+m[1]]
		if !okl || !okr || !okm {
			return nil, fmt.Errorf("%w: merge %d %q + %q: token not in vocabulary", ErrBadTokenizer, rank, m[0], m[1])
		}
		k := pairKey(l, r)
		if _, dup := t.merges[k]; !dup { // the first (lowest) rank wins
			t.merges[k] = merge{rank: int32(rank), id: id}
		}
	}

	// Added tokens: raw ones are matched before normalization, normalized
	// ones after it, against their normalized text.
	var rawAdded, normAdded []*addedToken
	for _, a := range p.added {
		if a.normText {
			c := *a
			if t.nfc {
				c.content = norm.NFC.String(c.content)
			}
			normAdded = append(normAdded, &c)
		} else {
			rawAdded = append(rawAdded, a)
		}
	}
	t.rawAdded = newAddedMatcher(rawAdded)
	if len(normAdded) > 0 {
		t.normAdded = newAddedMatcher(normAdded)
	}

	// A pre-token that is itself a token usually merges into exactly that
	// token; record where it does, so encoding can skip the merge loop.
	// Checked per token, because BPE does not guarantee it. The check is
	// most of the loading time, so it runs on all CPUs.
	self := make([]bool, n)
	workers := min(runtime.GOMAXPROCS(0), 8)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			st := &bpeState{}
			var buf []int
			for id := w; id < n; id += workers {
				raw := t.raw[id]
				if len(raw) < 2 || isAdded[id] {
					continue
				}
				buf = t.bpe(buf[:0], st, raw)
				self[id] = len(buf) == 1 && buf[0] == id
			}
		})
	}
	wg.Wait()
	whole := make(map[string]int32, n)
	for id, ok := range self {
		if ok {
			whole[t.raw[id]] = int32(id)
		}
	}
	t.wholeWord = whole
	return t, nil
}

// isAddedType reports whether tokens of type ty are matched in text.
func isAddedType(ty TokenType) bool {
	return ty == TokenControl || ty == TokenUserDefined || ty == TokenUnknown
}

// looksSpecial is llama.cpp's convert_hf_to_gguf rule for added tokens that
// are not marked special but are written as control tokens in GGUF.
func looksSpecial(s string) bool {
	if slices.Contains([]string{"<pad>", "<mask>", "<2mass>", "[@BOS@]"}, s) {
		return true
	}
	has := func(pre, suf string) bool { return strings.HasPrefix(s, pre) && strings.HasSuffix(s, suf) }
	return has("<|", "|>") || has("<｜", "｜>") || has("<unused", ">")
}

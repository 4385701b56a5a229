// The tokenizer in GGUF metadata (tokenizer.ggml.*, tokenizer.chat_template),
// read and written with the keys, types and conventions of llama.cpp's
// convert_hf_to_gguf.py for Qwen2/Qwen3 (_set_vocab_gpt2 + gguf-py
// SpecialVocab): byte-level token text for BPE tokens, plain text for added
// tokens, CONTROL for special (or special-looking) added tokens,
// USER_DEFINED for the others, "[PAD<id>]" UNUSED tokens up to the model's
// vocabulary size, merges as "left right" strings.

package tokenizer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/draftd/draftd/internal/gguf"
)

// GGUF metadata keys.
const (
	keyModel        = "tokenizer.ggml.model"
	keyPre          = "tokenizer.ggml.pre"
	keyTokens       = "tokenizer.ggml.tokens"
	keyTokenType    = "tokenizer.ggml.token_type"
	keyMerges       = "tokenizer.ggml.merges"
	keyBOS          = "tokenizer.ggml.bos_token_id"
	keyEOS          = "tokenizer.ggml.eos_token_id"
	keyPAD          = "tokenizer.ggml.padding_token_id"
	keyAddBOS       = "tokenizer.ggml.add_bos_token"
	keyChatTemplate = "tokenizer.chat_template"
)

func loadGGUFFile(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// FromGGUF builds the tokenizer stored in a GGUF file's metadata. The token
// text is copied, so f may be closed afterwards. GGUF does not record the
// normalizer; pre-tokenizer "qwen2" implies the NFC normalizer of Qwen's
// tokenizer.json (which llama.cpp itself does not apply). GGUF has no
// "special" flag: CONTROL tokens count as special, so EncodePlain also leaves
// alone the added tokens that the converter marks CONTROL because they look
// special (Qwen3's <|fim_prefix|> and friends), as llama.cpp does.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	model, err := f.String(keyModel)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
	}
	if model != "gpt2" {
		return nil, fmt.Errorf("%w: %s %q (only gpt2, byte-level BPE)", ErrUnsupported, keyModel, model)
	}
	pre := "default"
	if f.Has(keyPre) {
		if pre, err = f.String(keyPre); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
		}
	}
	if pre != "qwen2" {
		return nil, fmt.Errorf("%w: %s %q (only qwen2 is implemented)", ErrUnsupported, keyPre, pre)
	}
	tokens, err := f.Strings(keyTokens)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
	}
	p := parts{
		pieces: make([]string, len(tokens)),
		types:  make([]TokenType, len(tokens)),
		nfc:    true,
		pre:    pre,
		bos:    -1, eos: -1, pad: -1,
	}
	for i, s := range tokens {
		p.pieces[i] = strings.Clone(s)
		p.types[i] = TokenNormal
	}
	if f.Has(keyTokenType) {
		types, err := f.Ints(keyTokenType)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
		}
		if len(types) != len(tokens) {
			return nil, fmt.Errorf("%w: %d tokens but %d token types", ErrBadTokenizer, len(tokens), len(types))
		}
		for i, ty := range types {
			if ty < int64(TokenNormal) || ty > int64(TokenByte) {
				return nil, fmt.Errorf("%w: token %d has type %d", ErrBadTokenizer, i, ty)
			}
			p.types[i] = TokenType(ty)
		}
	}
	for id, ty := range p.types {
		if isAddedType(ty) {
			p.added = append(p.added, &addedToken{id: id, content: p.pieces[id], special: ty != TokenUserDefined})
		}
	}
	merges, err := f.Strings(keyMerges)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
	}
	p.merges = make([][2]string, len(merges))
	for i, m := range merges {
		// llama.cpp splits at the first space after the first byte.
		k := -1
		if len(m) > 1 {
			k = strings.IndexByte(m[1:], ' ')
		}
		if k < 0 {
			return nil, fmt.Errorf("%w: merge %d %q is not two tokens", ErrBadTokenizer, i, m)
		}
		p.merges[i] = [2]string{strings.Clone(m[:k+1]), strings.Clone(m[k+2:])}
	}
	for _, e := range f.KV {
		var s struct {
			key string
			id  *int
		}
		switch e.Key {
		case keyBOS:
			s.key, s.id = keyBOS, &p.bos
			p.specials = append(p.specials, "bos")
		case keyEOS:
			s.key, s.id = keyEOS, &p.eos
			p.specials = append(p.specials, "eos")
		case keyPAD:
			s.key, s.id = keyPAD, &p.pad
			p.specials = append(p.specials, "pad")
		default:
			continue
		}
		v, err := f.Uint(s.key)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
		}
		if v >= uint64(len(tokens)) {
			return nil, fmt.Errorf("%w: %s %d not in [0,%d)", ErrBadTokenizer, s.key, v, len(tokens))
		}
		*s.id = int(v)
	}
	if f.Has(keyAddBOS) {
		v, err := f.Bool(keyAddBOS)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
		}
		p.addBOS = &v
	}
	if f.Has(keyChatTemplate) {
		if p.template, err = f.String(keyChatTemplate); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadTokenizer, err)
		}
		p.template = strings.Clone(p.template)
	}
	return build(p)
}

// WriteGGUF adds the tokenizer's metadata to w, with as many tokens as the
// tokenizer has (VocabSize). A model file needs WriteGGUFPadded instead when
// the model's embedding has more rows than the tokenizer has tokens.
func (t *Tokenizer) WriteGGUF(w *gguf.Writer) error {
	return t.WriteGGUFPadded(w, len(t.pieces))
}

// WriteGGUFPadded adds the tokenizer's metadata to w with vocabSize tokens:
// ids the tokenizer lacks are written as "[PAD<id>]" with type UNUSED, as
// convert_hf_to_gguf.py does up to config.json's vocab_size (151936 for
// Qwen3). The keys, in the converter's order: tokenizer.ggml.model, pre,
// tokens, token_type, merges, the special token ids, add_bos_token,
// tokenizer.chat_template.
func (t *Tokenizer) WriteGGUFPadded(w *gguf.Writer, vocabSize int) error {
	if vocabSize < len(t.pieces) {
		return fmt.Errorf("tokenizer: vocabulary size %d is smaller than the tokenizer's %d tokens", vocabSize, len(t.pieces))
	}
	tokens := make([]string, vocabSize)
	types := make([]int32, vocabSize)
	for i := range tokens {
		if i < len(t.pieces) && t.pieces[i] != "" {
			tokens[i], types[i] = t.pieces[i], int32(t.types[i])
		} else {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), int32(TokenUnused)
		}
	}
	merges := make([]string, len(t.mergeList))
	for i, m := range t.mergeList {
		// gguf-py writes a space inside a token as U+0120 (' ' + 256).
		merges[i] = strings.ReplaceAll(m[0], " ", "\u0120") + " " + strings.ReplaceAll(m[1], " ", "\u0120")
	}
	type kv struct {
		key   string
		value any
	}
	kvs := []kv{
		{keyModel, "gpt2"},
		{keyPre, t.pre},
		{keyTokens, tokens},
		{keyTokenType, types},
		{keyMerges, merges},
	}
	for _, typ := range t.specialOrder() {
		switch typ {
		case "bos":
			kvs = append(kvs, kv{keyBOS, uint32(t.bos)})
		case "eos":
			kvs = append(kvs, kv{keyEOS, uint32(t.eos)})
		case "pad":
			kvs = append(kvs, kv{keyPAD, uint32(t.pad)})
		}
	}
	if t.addBOS != nil {
		kvs = append(kvs, kv{keyAddBOS, *t.addBOS})
	}
	if t.template != "" {
		kvs = append(kvs, kv{keyChatTemplate, t.template})
	}
	var errs []error
	for _, e := range kvs {
		if err := w.Add(e.key, e.value); err != nil {
			errs = append(errs, fmt.Errorf("tokenizer: gguf %s: %w", e.key, err))
		}
	}
	return errors.Join(errs...)
}

// specialOrder lists the special tokens the tokenizer has, in the order the
// converter adds them.
func (t *Tokenizer) specialOrder() []string {
	var out []string
	for _, typ := range t.specials {
		switch {
		case typ == "bos" && t.bos >= 0, typ == "eos" && t.eos >= 0, typ == "pad" && t.pad >= 0:
			out = append(out, typ)
		}
	}
	return out
}

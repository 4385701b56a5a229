// Writing a Tokenizer as Hugging Face files: tokenizer.json (the byte-level
// BPE vocabulary and merges, the added tokens, the NFC normalizer, the Qwen2
// pre-tokenizer and the ByteLevel decoder, as Qwen's own tokenizer.json
// spells them) and tokenizer_config.json (special token names, chat
// template). Load, FromHF and Hugging Face tokenizers read them back as the
// same tokenizer. It writes no files itself.

package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// hfAddedToken is one entry of tokenizer.json's added_tokens (and, without
// the id, of tokenizer_config.json's added_tokens_decoder).
type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// marshalJSON encodes v without HTML escaping ("<|im_start|>" stays
// readable), indented as transformers' save_pretrained writes.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// orderedVocab is model.vocab written in id order (a Go map would be
// written in key order).
type orderedVocab struct {
	pieces []string
	ids    []int
}

func (v orderedVocab) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range v.pieces {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshalJSON(p)
		if err != nil {
			return nil, err
		}
		b.Write(bytes.TrimSpace(k))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(v.ids[i]))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// HFTokenizerJSON returns the tokenizer as a tokenizer.json. Ids without a
// token (GGUF's "[PAD<id>]" padding up to the model's vocabulary) are left
// out, as in the original file; the model's config.json vocab_size covers
// them.
func (t *Tokenizer) HFTokenizerJSON() ([]byte, error) {
	if t.pre != "qwen2" {
		return nil, fmt.Errorf("%w: pre-tokenizer %q (only qwen2 is written)", ErrUnsupported, t.pre)
	}
	isAdded := make([]bool, len(t.pieces))
	added := make([]hfAddedToken, 0, len(t.added))
	for _, a := range t.added {
		isAdded[a.id] = true
		added = append(added, hfAddedToken{ID: a.id, Content: a.content, LStrip: a.lstrip, RStrip: a.rstrip, Normalized: a.normText, Special: a.special})
	}
	var vocab orderedVocab
	for id, p := range t.pieces {
		if isAdded[id] || t.types[id] == TokenUnused {
			continue
		}
		vocab.pieces = append(vocab.pieces, p)
		vocab.ids = append(vocab.ids, id)
	}
	merges := t.mergeList
	if merges == nil {
		merges = [][2]string{}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	var normalizer any
	if t.nfc {
		normalizer = map[string]any{"type": "NFC"}
	}
	doc := struct {
		Version       string         `json:"version"`
		Truncation    any            `json:"truncation"`
		Padding       any            `json:"padding"`
		AddedTokens   []hfAddedToken `json:"added_tokens"`
		Normalizer    any            `json:"normalizer"`
		PreTokenizer  any            `json:"pre_tokenizer"`
		PostProcessor any            `json:"post_processor"`
		Decoder       any            `json:"decoder"`
		Model         any            `json:"model"`
	}{
		Version:     "1.0",
		AddedTokens: added,
		Normalizer:  normalizer,
		PreTokenizer: map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		PostProcessor: byteLevel,
		Decoder:       byteLevel,
		Model: struct {
			Type                    string       `json:"type"`
			Dropout                 any          `json:"dropout"`
			UnkToken                any          `json:"unk_token"`
			ContinuingSubwordPrefix string       `json:"continuing_subword_prefix"`
			EndOfWordSuffix         string       `json:"end_of_word_suffix"`
			FuseUnk                 bool         `json:"fuse_unk"`
			ByteFallback            bool         `json:"byte_fallback"`
			IgnoreMerges            bool         `json:"ignore_merges"`
			Vocab                   orderedVocab `json:"vocab"`
			Merges                  [][2]string  `json:"merges"`
		}{Type: "BPE", Vocab: vocab, Merges: merges},
	}
	return marshalJSON(doc)
}

// HFTokenizerConfig returns the tokenizer_config.json that goes with
// HFTokenizerJSON: tokenizer class Qwen2Tokenizer, the added tokens, the
// bos/eos/pad token names (null when the tokenizer has none), add_bos_token,
// the chat template, and maxLength as model_max_length.
func (t *Tokenizer) HFTokenizerConfig(maxLength int) ([]byte, error) {
	name := func(id int) any {
		if id < 0 {
			return nil
		}
		return t.raw[id]
	}
	type entry struct { // transformers' key order
		Content    string `json:"content"`
		LStrip     bool   `json:"lstrip"`
		Normalized bool   `json:"normalized"`
		RStrip     bool   `json:"rstrip"`
		SingleWord bool   `json:"single_word"`
		Special    bool   `json:"special"`
	}
	entries := map[int]entry{}
	for _, a := range t.added {
		entries[a.id] = entry{a.content, a.lstrip, a.normText, a.rstrip, false, a.special}
	}
	cfg := map[string]any{
		"add_bos_token":                t.AddBOS(),
		"add_prefix_space":             false,
		"added_tokens_decoder":         idKeyed[entry](entries),
		"bos_token":                    name(t.bos),
		"clean_up_tokenization_spaces": false,
		"eos_token":                    name(t.eos),
		"errors":                       "replace",
		"model_max_length":             maxLength,
		"pad_token":                    name(t.pad),
		"split_special_tokens":         false,
		"tokenizer_class":              "Qwen2Tokenizer",
		"unk_token":                    nil,
	}
	if t.template != "" {
		cfg["chat_template"] = t.template
	}
	return marshalJSON(cfg)
}

// idKeyed is a JSON object whose keys are token ids, written in numeric
// order as transformers writes added_tokens_decoder.
type idKeyed[V any] map[int]V

func (o idKeyed[V]) MarshalJSON() ([]byte, error) {
	ids := slices.Sorted(maps.Keys(o))
	var b bytes.Buffer
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		v, err := marshalJSON(o[id])
		if err != nil {
			return nil, err
		}
		b.WriteString(strconv.Quote(strconv.Itoa(id)))
		b.WriteByte(':')
		b.Write(bytes.TrimSpace(v))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Loading from Hugging Face files: tokenizer.json (vocabulary, merges, added
// tokens, normalizer, pre-tokenizer), tokenizer_config.json (chat template,
// names of the special tokens, add_bos_token), chat_template.jinja and
// config.json (special token ids), read the way llama.cpp's
// convert_hf_to_gguf.py (gguf-py SpecialVocab) reads them, so that a
// tokenizer loaded here writes the same GGUF metadata. Only the Qwen2-style
// byte-level BPE is accepted.

package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Load reads a tokenizer from path, which is one of
//   - a tokenizer.json file (tokenizer_config.json, chat_template.jinja and
//     config.json beside it are read too when present),
//   - a Hugging Face model directory containing those files,
//   - a GGUF file (recognised by its magic, whatever its name).
func Load(path string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if fi.IsDir() {
		return LoadHF(filepath.Join(path, "tokenizer.json"))
	}
	if isGGUF(path) {
		return loadGGUFFile(path)
	}
	if filepath.Base(path) == "tokenizer_config.json" {
		return nil, fmt.Errorf("tokenizer: %s holds no vocabulary: give tokenizer.json or its directory", path)
	}
	return LoadHF(path)
}

// isGGUF reports whether the file at path starts with the GGUF magic.
func isGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "GGUF"
}

// LoadHF reads tokenizer.json at path and the optional files beside it
// (tokenizer_config.json, chat_template.jinja, config.json).
func LoadHF(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	dir := filepath.Dir(path)
	config, err := readOptional(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	jinjaFile, err := readOptional(filepath.Join(dir, "chat_template.jinja"))
	if err != nil {
		return nil, err
	}
	modelConfig, err := readOptional(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	t, err := FromHF(data, config, jinjaFile, modelConfig)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return b, nil
}

// hfTokenizer is the part of tokenizer.json that this package reads.
type hfTokenizer struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   *hfComponent `json:"normalizer"`
	PreTokenizer *hfComponent `json:"pre_tokenizer"`
	Decoder      *hfComponent `json:"decoder"`
	Model        struct {
		Type                    string          `json:"type"`
		Vocab                   map[string]int  `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
		Dropout                 *float64        `json:"dropout"`
		ContinuingSubwordPrefix string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string          `json:"end_of_word_suffix"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
	} `json:"model"`
}

// hfComponent is a normalizer, pre-tokenizer or decoder of tokenizer.json.
type hfComponent struct {
	Type           string        `json:"type"`
	Normalizers    []hfComponent `json:"normalizers"`
	Pretokenizers  []hfComponent `json:"pretokenizers"`
	Pattern        struct{ Regex, String *string }
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

// hfConfig is the part of tokenizer_config.json that this package reads.
type hfConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
	PadToken     json.RawMessage `json:"pad_token"`
	AddBOSToken  *bool           `json:"add_bos_token"`
}

// FromHF builds a tokenizer from the contents of tokenizer.json and, each
// optional (nil), tokenizer_config.json, chat_template.jinja and the model's
// config.json.
func FromHF(tokenizerJSON, tokenizerConfig, chatTemplateJinja, modelConfig []byte) (*Tokenizer, error) {
	var hf hfTokenizer
	if err := json.Unmarshal(tokenizerJSON, &hf); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json: %v", ErrBadTokenizer, err)
	}
	m := &hf.Model
	switch {
	case m.Type != "BPE" && m.Type != "":
		return nil, fmt.Errorf("%w: model type %q (only BPE)", ErrUnsupported, m.Type)
	case len(m.Vocab) == 0:
		return nil, fmt.Errorf("%w: tokenizer.json has no model.vocab", ErrBadTokenizer)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("%w: BPE dropout", ErrUnsupported)
	case m.ByteFallback:
		return nil, fmt.Errorf("%w: BPE byte_fallback", ErrUnsupported)
	case m.IgnoreMerges:
		return nil, fmt.Errorf("%w: BPE ignore_merges", ErrUnsupported)
	case m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "":
		return nil, fmt.Errorf("%w: BPE continuing_subword_prefix/end_of_word_suffix", ErrUnsupported)
	}
	p := parts{bos: -1, eos: -1, pad: -1}
	var err error
	if p.nfc, err = hfNormalizer(hf.Normalizer); err != nil {
		return nil, err
	}
	if p.pre, err = hfPreTokenizer(hf.PreTokenizer); err != nil {
		return nil, err
	}
	if hf.Decoder == nil || hf.Decoder.Type != "ByteLevel" {
		return nil, fmt.Errorf("%w: decoder %s (only ByteLevel)", ErrUnsupported, describe(hf.Decoder))
	}
	if p.merges, err = hfMerges(m.Merges); err != nil {
		return nil, err
	}

	n := 0
	for _, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("%w: negative token id %d", ErrBadTokenizer, id)
		}
		n = max(n, id+1)
	}
	for _, a := range hf.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("%w: negative token id %d", ErrBadTokenizer, a.ID)
		}
		n = max(n, a.ID+1)
	}
	// Ids index arrays: they must be (nearly) dense, which also keeps a
	// malformed file from asking for a huge allocation.
	if n > len(m.Vocab)+len(hf.AddedTokens) {
		return nil, fmt.Errorf("%w: token id %d with only %d tokens", ErrBadTokenizer, n-1, len(m.Vocab)+len(hf.AddedTokens))
	}
	p.pieces = make([]string, n)
	p.types = make([]TokenType, n)
	for i := range p.types {
		p.types[i] = TokenUnused
	}
	for piece, id := range m.Vocab {
		if p.types[id] != TokenUnused {
			return nil, fmt.Errorf("%w: token id %d used twice", ErrBadTokenizer, id)
		}
		p.pieces[id], p.types[id] = piece, TokenNormal
	}
	for _, a := range hf.AddedTokens {
		if a.SingleWord {
			return nil, fmt.Errorf("%w: added token %q with single_word", ErrUnsupported, a.Content)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("%w: empty added token %d", ErrBadTokenizer, a.ID)
		}
		// The GGUF token type, as convert_hf_to_gguf.py assigns it.
		ty := TokenUserDefined
		if a.Special || looksSpecial(a.Content) {
			ty = TokenControl
		}
		p.pieces[a.ID], p.types[a.ID] = a.Content, ty
		p.added = append(p.added, &addedToken{
			id: a.ID, content: a.Content, special: a.Special,
			lstrip: a.LStrip, rstrip: a.RStrip, normText: a.Normalized,
		})
	}

	if err := hfSpecials(&p, tokenizerConfig, chatTemplateJinja, modelConfig); err != nil {
		return nil, err
	}
	return build(p)
}

func describe(c *hfComponent) string {
	if c == nil {
		return "null"
	}
	return fmt.Sprintf("%q", c.Type)
}

// hfNormalizer accepts no normalizer or NFC (possibly in a Sequence).
func hfNormalizer(c *hfComponent) (nfc bool, err error) {
	if c == nil {
		return false, nil
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for i := range c.Normalizers {
			v, err := hfNormalizer(&c.Normalizers[i])
			if err != nil {
				return false, err
			}
			nfc = nfc || v
		}
		return nfc, nil
	}
	return false, fmt.Errorf("%w: normalizer %q (only NFC)", ErrUnsupported, c.Type)
}

// hfPreTokenizer accepts the Qwen2 pre-tokenizer: Split with the Qwen2
// pattern (Isolated) followed by ByteLevel without prefix space or regex.
func hfPreTokenizer(c *hfComponent) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: pre_tokenizer: %s (only the Qwen2 Split+ByteLevel sequence is implemented)", ErrUnsupported, why)
	}
	if c == nil || c.Type != "Sequence" || len(c.Pretokenizers) != 2 {
		return bad(fmt.Sprintf("type %s", describe(c)))
	}
	split, bl := c.Pretokenizers[0], c.Pretokenizers[1]
	if split.Type != "Split" || split.Pattern.Regex == nil || *split.Pattern.Regex != qwen2Pattern ||
		split.Behavior != "Isolated" || split.Invert {
		return bad(fmt.Sprintf("first step %q is not the Qwen2 Split", split.Type))
	}
	if bl.Type != "ByteLevel" || bl.AddPrefixSpace || (bl.UseRegex != nil && *bl.UseRegex) {
		return bad(fmt.Sprintf("second step %q is not ByteLevel(add_prefix_space=false, use_regex=false)", bl.Type))
	}
	return "qwen2", nil
}

// hfMerges reads merges in either format: ["a b", ...] or [["a","b"], ...].
func hfMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("%w: tokenizer.json has no model.merges", ErrBadTokenizer)
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("%w: model.merges: %v", ErrBadTokenizer, err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := bytes.Cut([]byte(l), []byte{' '})
		if !ok || bytes.IndexByte(b, ' ') >= 0 {
			return nil, fmt.Errorf("%w: merge %d %q is not two tokens", ErrBadTokenizer, i, l)
		}
		pairs[i] = [2]string{string(a), string(b)}
	}
	return pairs, nil
}

// hfSpecials reads the chat template and the special token ids the way
// gguf-py's SpecialVocab does: token names from tokenizer_config.json
// resolved against the added tokens, then ids from config.json for those
// still missing.
func hfSpecials(p *parts, tokenizerConfig, chatTemplateJinja, modelConfig []byte) error {
	p.template = string(chatTemplateJinja)
	if tokenizerConfig != nil {
		var c hfConfig
		if err := json.Unmarshal(tokenizerConfig, &c); err != nil {
			return fmt.Errorf("%w: tokenizer_config.json: %v", ErrBadTokenizer, err)
		}
		if len(c.ChatTemplate) > 0 && string(c.ChatTemplate) != "null" {
			tmpl, err := parseChatTemplateField(c.ChatTemplate)
			if err != nil {
				return err
			}
			p.template = tmpl
		}
		p.addBOS = c.AddBOSToken
		for _, s := range []struct {
			typ string
			raw json.RawMessage
			id  *int
		}{{"bos", c.BOSToken, &p.bos}, {"eos", c.EOSToken, &p.eos}, {"pad", c.PadToken, &p.pad}} {
			name := tokenName(s.raw)
			if name == "" {
				continue
			}
			for _, a := range p.added {
				if a.content == name {
					*s.id = a.id
					p.specials = append(p.specials, s.typ)
					break
				}
			}
		}
	}
	if modelConfig != nil {
		var c map[string]json.RawMessage
		if err := json.Unmarshal(modelConfig, &c); err != nil {
			return fmt.Errorf("%w: config.json: %v", ErrBadTokenizer, err)
		}
		for _, s := range []struct {
			typ string
			key string
			id  *int
		}{{"bos", "bos_token_id", &p.bos}, {"eos", "eos_token_id", &p.eos}, {"pad", "pad_token_id", &p.pad}} {
			var id int
			raw := c[s.key] // null, as transformers writes an absent id, is no id (not 0)
			if *s.id < 0 && len(raw) > 0 && string(raw) != "null" && json.Unmarshal(raw, &id) == nil && id >= 0 && id < len(p.pieces) {
				*s.id = id
				p.specials = append(p.specials, s.typ)
			}
		}
	}
	return nil
}

// tokenName reads a special token of tokenizer_config.json: a string or an
// AddedToken object {"content": ...}; "" when absent or null.
func tokenName(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct{ Content string }
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

// parseChatTemplateField reads tokenizer_config.json's chat_template: a
// string, or a list of {"name", "template"} of which "default" is used.
func parseChatTemplateField(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", fmt.Errorf("%w: chat_template is neither a string nor a list of templates", ErrBadTokenizer)
	}
	for _, t := range list {
		if t.Name == "default" {
			return t.Template, nil
		}
	}
	return "", fmt.Errorf("%w: chat_template list has no \"default\" template", ErrBadTokenizer)
}
